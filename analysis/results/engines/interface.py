"""The engine contract: submit a rank's work, take results as they complete, cancel, close; and
the one retry loop every engine shares (a rank that raises is run again, bad input never)."""
from __future__ import annotations

import abc
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gapscope.analysis.results.engines.batches import call_batch, group
from gapscope.analysis.results.engines.faults import fault_spec, inject_fault
from gapscope.profilers.errors import GapscopeInputError, GapscopeRunError


@dataclass
class Outcome:
    """One rank's work, finished: its value, or why it failed (error: one line)."""

    key: int
    value: object = None
    error: str | None = None
    attempts: int = 1


class WorkerLost(Exception):
    """The process running the work died (SIGKILL, out of memory) and was not replaced."""


class EngineLost(GapscopeRunError):
    """The cluster itself went away (its scheduler killed): no rank left can be run, and
    nothing left to cancel. stream adds the keys not handed back (`missing`) to its words;
    the command says it in one line, exit 1."""

    def __init__(self, message: str, missing: list[int] | None = None):
        super().__init__(message)
        self.missing = missing or []

    def __str__(self) -> str:
        text = self.args[0]
        if self.missing:
            ranks = ", ".join(map(str, self.missing))
            text += f": rank{'s' if len(self.missing) > 1 else ''} {ranks} not analysed"
        return text


class Engine(abc.ABC):
    """Runs calls somewhere and hands back their outcomes as they complete, in any order."""

    name: str
    workers: int
    # Bytes of rank files one task should hold at the least (engines.batches): 0, a rank a task
    # (the local pool, whose cost a task is small).
    batch_bytes: int = 0

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


def call(fn: Callable, key: int, args: tuple, fault: tuple[str, int] | None = None):
    """What a worker runs: the call, after the test-only fault hook had its chance."""
    inject_fault(key, fault)
    return fn(*args)


def stream(engine: Engine, fn: Callable, tasks: dict[int, tuple], retries: int = 0,
           where: dict[int, str | None] | None = None,
           sizes: dict[int, int] | None = None) -> Iterator[Outcome]:
    """Every task's Outcome as it completes. A task that raises is submitted again up to `retries`
    times; bad input (GapscopeInputError: the same file fails the same way) never, and it is
    raised as it is, so the command says it in one line. Ctrl-C cancels what is left. `sizes`:
    each task's bytes, for an engine that batches small tasks (Engine.batch_bytes)."""
    where, fault = where or {}, fault_spec()
    attempts = dict.fromkeys(tasks, 1)
    sent: dict[int, list[int]] = {}  # what the engine runs, by its id: the keys it holds
    ids = itertools.count()

    def send(keys: list[int]) -> None:
        ident = next(ids)
        sent[ident] = keys
        if len(keys) == 1:
            engine.submit(ident, call, (fn, keys[0], tasks[keys[0]], fault), where.get(keys[0]))
        else:
            engine.submit(ident, call_batch, (fn, [(k, tasks[k]) for k in keys], fault),
                          where.get(keys[0]))

    try:
        for keys in group(tasks, sizes, engine.batch_bytes, engine.workers):
            send(keys)
        while engine.pending:
            ident, value, error = engine.next_done()
            keys = sent.pop(ident)
            if len(keys) > 1 and error is None:
                results = value
            else:  # one call, or a batch lost whole (its worker died): each key its error
                results = [(key, value, error) for key in keys]
            for key, value, error in results:
                if error is None:
                    yield Outcome(key, value, attempts=attempts[key])
                elif isinstance(error, GapscopeInputError):
                    raise error
                elif attempts[key] <= retries and not isinstance(error, WorkerLost):
                    attempts[key] += 1
                    send([key])
                else:
                    yield Outcome(key, error=one_line(error), attempts=attempts[key])
    except EngineLost as lost:  # nothing to cancel: the cluster is gone
        raise EngineLost(lost.args[0], sorted({k for keys in sent.values() for k in keys})) from None
    except BaseException:
        engine.cancel()
        raise


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or "no message"
    return f"{type(error).__name__}: {text}"[:300]
