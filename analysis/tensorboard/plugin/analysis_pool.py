"""Runs analysed in worker processes, one per core: plain /runs over 200 runs took 72 s on one."""
from __future__ import annotations

import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from typing import Callable

from gapscope.analysis.readers import chunk_pool
from gapscope.analysis.tensorboard.plugin.run_analysis import analyse_run
from gapscope.profilers.environment import importing_this_gapscope

# Fewer runs than this are analysed in the asking process: a worker's start (a fresh
# interpreter importing the analysers, about 0.4 s) costs more than it saves.
POOL_FROM_RUNS = 4
_LENGTH = struct.Struct("<Q")


class AnalysisPool:
    """Worker processes kept between requests (the page asks every few seconds), started at the
    first batch big enough to need them. Plain child processes, as the trace reader's: a
    multiprocessing one re-imports the caller's main script or forks a threaded server."""

    def __init__(self):
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []

    def map(self, items: list[tuple], done: Callable) -> list[tuple]:
        """Calls `done(analysis)` for each (name, entry) of `items` as a worker finishes it;
        returns the items no worker analysed (too few to pool, or a worker lost) for the caller
        to analyse itself."""
        size = min(chunk_pool.workers(), len(items))
        if len(items) < POOL_FROM_RUNS or size < 2:
            return items
        todo: queue.SimpleQueue = queue.SimpleQueue()
        for item in items:
            todo.put(item)
        left: list[tuple] = []
        threads = [threading.Thread(target=self._drain, args=(worker, todo, done, left), daemon=True)
                   for worker in self._started(size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return left

    def _drain(self, worker: "_Worker", todo: queue.SimpleQueue, done: Callable, left: list) -> None:
        while True:
            try:
                item = todo.get_nowait()
            except queue.Empty:
                return
            try:
                analysis = worker.analyse(item)
            except _WorkerLost:  # killed (out of memory?): this one and the rest go to the caller
                left.append(item)
                while True:
                    try:
                        left.append(todo.get_nowait())
                    except queue.Empty:
                        return
            done(analysis)

    def _started(self, size: int) -> list["_Worker"]:
        with self._lock:
            for worker in [w for w in self._workers if w.process.poll() is not None]:
                self._workers.remove(worker)
            while len(self._workers) < size:
                self._workers.append(_Worker())
            return self._workers[:size]

    def close(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.stop()


class _WorkerLost(Exception):
    """The worker died, or answered with something else than an analysis."""


class _Worker:
    """One process running this module: a pickled (name, entry) in on stdin, the run's
    analysis out on stdout, until stdin closes."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                        env=importing_this_gapscope(dict(os.environ)))

    def analyse(self, item: tuple):
        try:
            _write(self.process.stdin, item)
            return _read(self.process.stdout)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):  # ValueError: stdin closed
            raise _WorkerLost from None

    def stop(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


def _write(stream, value) -> None:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(payload)) + payload)
    stream.flush()


def _read(stream):
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError
    (length,) = _LENGTH.unpack(head)
    payload = stream.read(length)
    if len(payload) < length:
        raise EOFError
    return pickle.loads(payload)


def _serve() -> None:
    while True:
        try:
            name, entry = _read(sys.stdin.buffer)
        except EOFError:
            return
        # analyse_run answers every error of the run's own as its problem. Its trace is read
        # in this process alone: the pool's other workers have the other cores.
        with chunk_pool.alone():
            _write(sys.stdout.buffer, analyse_run(name, entry))


if __name__ == "__main__":
    _serve()
