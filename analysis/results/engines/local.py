"""The default engine, with no dependency beyond Python: a process pool on this machine (or, for
one worker, this process). A worker that dies (SIGKILL, the OOM killer) breaks the whole pool:
the pool is rebuilt and the ranks not finished are submitted again, a bounded number of times."""
from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from gapscope.analysis.results.engines.interface import Engine, WorkerLost
from gapscope.profilers.errors import GapscopeInputError

# Pools rebuilt after a worker died, per job: a rank that kills its worker every time (a trace
# too big for memory) must not rebuild forever, taking the ranks beside it down each time.
POOL_REBUILDS = 3
# Workers of the pool, where the caller names none: GAPSCOPE_JOB_WORKERS (1 reads the ranks one
# after another in this process), else one per core.
WORKERS_ENV = "GAPSCOPE_JOB_WORKERS"


def worker_count(ranks: int, workers: int | None = None) -> int:
    """At most one worker per core and per rank: memory stays that of a few traces at once."""
    if not workers:
        raw = os.environ.get(WORKERS_ENV, "").strip()
        if raw and not (raw.isascii() and raw.isdigit() and 0 < len(raw) <= 4 and int(raw) > 0):
            raise GapscopeInputError(f"{WORKERS_ENV} should be a whole number of processes, not "
                                     f"{raw[:40]!r}")
        workers = int(raw or 0)
    limit = workers if workers and workers > 0 else (os.cpu_count() or 1)
    return max(1, min(ranks, limit))


def local_engine(ranks: int, workers: int | None = None) -> Engine:
    """The pool for a job of `ranks`; this process alone where one worker is all it gets."""
    count = worker_count(ranks, workers)
    return SerialEngine() if count == 1 else LocalEngine(count)


class SerialEngine(Engine):
    """One rank after another in this process: no pool to start for tiny jobs or one worker."""

    name = "local"
    workers = 1

    def __init__(self) -> None:
        self._queue: deque = deque()

    def submit(self, key: int, fn: Callable, args: tuple, where: str | None = None) -> None:
        self._queue.append((key, fn, args))

    @property
    def pending(self) -> int:
        return len(self._queue)

    def next_done(self):
        key, fn, args = self._queue.popleft()
        try:
            return key, fn(*args), None
        except Exception as error:  # noqa: BLE001 - the retry loop decides what it means
            return key, None, error

    def cancel(self) -> None:
        self._queue.clear()


class LocalEngine(Engine):
    """A process pool of `workers`; results stream back as each rank completes."""

    name = "local"

    def __init__(self, workers: int, rebuilds: int = POOL_REBUILDS) -> None:
        self.workers = workers
        self.rebuilds = 0
        self._rebuilds_left = rebuilds
        self._pool = _new_pool(workers)
        self._futures: dict[Future, tuple[int, Callable, tuple]] = {}
        self._ready: deque = deque()

    def submit(self, key: int, fn: Callable, args: tuple, where: str | None = None) -> None:
        self._futures[self._pool.submit(fn, *args)] = (key, fn, args)

    @property
    def pending(self) -> int:
        return len(self._futures) + len(self._ready)

    def next_done(self):
        while not self._ready:
            done, _ = wait(list(self._futures), return_when=FIRST_COMPLETED)
            if any(isinstance(f.exception(), BrokenProcessPool) for f in done):
                self._recover()
                continue
            for future in done:
                key, _, _ = self._futures.pop(future)
                error = future.exception()
                self._ready.append((key, None if error else future.result(), error))
        return self._ready.popleft()

    def _recover(self) -> None:
        """A worker died: every rank that had not finished goes to a new pool, while rebuilds
        are left; then it fails as lost (not retried: it may be the rank killing workers)."""
        unfinished = []
        for future, task in self._futures.items():
            if future.done() and not isinstance(future.exception(), BrokenProcessPool):
                error = future.exception()
                self._ready.append((task[0], None if error else future.result(), error))
            else:
                unfinished.append(task)
        self._futures.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._rebuilds_left <= 0:
            lost = WorkerLost(f"a worker died {self.rebuilds + 1} times (killed, or out of memory)")
            self._ready.extend((key, None, lost) for key, _, _ in unfinished)
            return
        self._rebuilds_left -= 1
        self.rebuilds += 1
        self._pool = _new_pool(self.workers)
        for key, fn, args in unfinished:
            self.submit(key, fn, args)

    def cancel(self) -> None:
        """Ctrl-C: the ranks not started are dropped and the workers killed, so none goes on
        with a rank nobody waits for (a terminal's Ctrl-C reaches them; a `kill -INT` of this
        process alone does not). Python 3.11's pool has no public way: its process table."""
        for future in self._futures:
            future.cancel()
        self._futures.clear()
        self._ready.clear()
        for process in list((getattr(self._pool, "_processes", None) or {}).values()):
            process.kill()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _new_pool(workers: int) -> ProcessPoolExecutor:
    # forkserver (spawn where there is none): no copy of this process's memory or threads.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    return ProcessPoolExecutor(max_workers=workers, mp_context=context)
