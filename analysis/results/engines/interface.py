"""The engine contract: submit a rank's work, take results as they complete, cancel, close; and
the one retry loop every engine shares (a rank that raises is run again, bad input never)."""
from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from analysis.results.engines.faults import fault_spec, inject_fault
from profilers.errors import GapscopeInputError


@dataclass
class Outcome:
    """One rank's work, finished: its value, or why it failed (error: one line)."""

    key: int
    value: object = None
    error: str | None = None
    attempts: int = 1


class WorkerLost(Exception):
    """The process running the work died (SIGKILL, out of memory) and was not replaced."""


class Engine(abc.ABC):
    """Runs calls somewhere and hands back their outcomes as they complete, in any order."""

    name: str
    workers: int

    @abc.abstractmethod
    def submit(self, key: int, fn: Callable, args: tuple, where: str | None = None) -> None:
        """Run fn(*args) for `key`; `where`: the host holding its file, where the engine can use it."""

    @abc.abstractmethod
    def next_done(self) -> tuple[int, object, BaseException | None]:
        """Block until a submitted call completes: (key, value, None) or (key, None, error)."""

    @property
    @abc.abstractmethod
    def pending(self) -> int:
        """Calls submitted and not yet handed back by next_done."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Drop every call not handed back (Ctrl-C): remote tasks are cancelled, not left running."""

    def close(self) -> None:
        """Give back what the engine started; an engine joined, not started, is only left."""

    def record(self) -> dict:
        """What the JSON says did the work."""
        return {"name": self.name, "workers": self.workers}

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def call(fn: Callable, key: int, args: tuple, fault: str | None = None):
    """What a worker runs: the call, after the test-only fault hook had its chance."""
    inject_fault(key, fault)
    return fn(*args)


def stream(engine: Engine, fn: Callable, tasks: dict[int, tuple], retries: int = 0,
           where: dict[int, str | None] | None = None) -> Iterator[Outcome]:
    """Every task's Outcome as it completes. A task that raises is submitted again up to `retries`
    times; bad input (GapscopeInputError: the same file fails the same way) never, and it is
    raised as it is, so the command says it in one line. Ctrl-C cancels what is left."""
    where, fault = where or {}, fault_spec()
    attempts = dict.fromkeys(tasks, 1)
    try:
        for key, args in tasks.items():
            engine.submit(key, call, (fn, key, args, fault), where.get(key))
        while engine.pending:
            key, value, error = engine.next_done()
            if error is None:
                yield Outcome(key, value, attempts=attempts[key])
            elif isinstance(error, GapscopeInputError):
                raise error
            elif attempts[key] <= retries and not isinstance(error, WorkerLost):
                attempts[key] += 1
                engine.submit(key, call, (fn, key, tasks[key], fault), where.get(key))
            else:
                yield Outcome(key, error=one_line(error), attempts=attempts[key])
    except BaseException:
        engine.cancel()
        raise


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or "no message"
    return f"{type(error).__name__}: {text}"[:300]
