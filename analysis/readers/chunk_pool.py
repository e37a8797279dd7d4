"""The worker processes that decode a big trace's chunks at once, one per core, for the length of one read."""
from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import pickle
import struct
import subprocess
import sys

from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.environment import importing_this_gapscope

WORKERS_ENV = "GAPSCOPE_READ_WORKERS"  # how many processes decode a trace's chunks; 1: none
MAX_WORKERS = 8  # past this the reading process, which cuts and merges, is the bottleneck
# Set in the workers themselves: a worker that reads a trace (never, today) reads it alone.
_IN_WORKER_ENV = "GAPSCOPE_CHUNK_WORKER"
_LENGTH = struct.Struct("<Q")
# A length no chunk has: what follows is a range of a file for the worker to read itself.
_RANGE = (1 << 64) - 1
_workers: list["Worker"] = []
_alone = 0  # depth of alone() blocks in this process
_capped_noted = False  # the note on a WORKERS_ENV above the cores is given once a process


class WorkerLost(Exception):
    """A worker died, or answered with something else than a chunk's columns."""


class RangeUnreadable(Exception):
    """A worker could not read a range of the file itself (no such file where it looked, another
    file there, a file shorter than said): the reading process reads the rest."""


def file_source(fd: int) -> tuple[str, int, int] | None:
    """How a worker reads this process's open regular file `fd` itself, by its offsets: the
    descriptor's /proc path (the file opened, however it was named or renamed since) and its
    device and inode, which the worker checks; None where there is no /proc (chunks then go
    through the pipes)."""
    path = f"/proc/{os.getpid()}/fd/{fd}"
    if not os.path.exists(path):
        return None
    info = os.fstat(fd)
    return path, info.st_dev, info.st_ino


def workers() -> int:
    """How many processes may decode chunks: WORKERS_ENV, at most the cores this process may
    use (a note says so, once), else those cores up to MAX_WORKERS; 1 inside a worker of
    another pool (a rank of a job): its siblings use the other cores."""
    global _capped_noted
    raw = os.environ.get(WORKERS_ENV, "").strip()
    cores = _cores()
    if raw:
        if not (raw.isascii() and raw.isdigit() and 0 < len(raw) <= 4 and 0 < int(raw) <= 1024):
            raise GapscopeInputError(f"{WORKERS_ENV}={raw[:40]!r}: give a whole number of processes (1: none)")
        if int(raw) > cores:
            # Each worker holds a chunk and its columns: 40 workers on 2 cores took 1.97 GB of
            # RSS for a 295 MB trace, for no speed.
            if not _capped_noted:
                sys.stderr.write(f"gapscope: note: {WORKERS_ENV}={int(raw)} capped at {cores}, the cores "
                                 "this process may use (more workers add memory, not speed)\n")
                _capped_noted = True
            return cores
        return int(raw)
    if _alone or multiprocessing.parent_process() is not None or os.environ.get(_IN_WORKER_ENV):
        return 1
    return min(cores, MAX_WORKERS)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def alone():
    """Reads inside decode in this process only: one rank of a job among others on the cores
    (a Ray worker is no multiprocessing child, so workers() cannot tell by itself)."""
    global _alone
    _alone += 1
    try:
        yield
    finally:
        _alone -= 1


def pool(size: int) -> list["Worker"]:
    """`size` workers, started at a big read (torch_trace stops them at its end, before the
    analysis' peak; a pool left running by another caller is reused)."""
    for worker in [worker for worker in _workers if not worker.ready()]:
        worker.stop()  # dead, or left with an answer nobody read (a read that raised)
        _workers.remove(worker)
    while len(_workers) < size:
        _workers.append(Worker())
    return _workers[:size]


class Worker:
    """One process running this module's main: it reads a chunk's bytes on stdin and writes its
    columns, pickled, on stdout, until stdin closes. A plain child process rather than a
    multiprocessing one: those re-import the caller's main script (a user's loop without a
    __main__ guard would run again in every worker) or fork a process whose threads may hold
    locks (the read-ahead's, TensorFlow's)."""

    def __init__(self):
        env = importing_this_gapscope({**os.environ, _IN_WORKER_ENV: "1"})
        # Its errors are answered as a lost worker (the reader then decodes the rest itself):
        # stderr is dropped, and a Ctrl-C that reaches the whole process group prints nothing.
        self.process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.busy = False

    def ready(self) -> bool:
        return self.process.poll() is None and not self.busy

    def send(self, data: bytes, kind: int = 0, products: bool = True) -> None:
        """Has the worker decode `data`, a chunk's events, with trace_chunks.KINDS[kind] (and
        its matrix products' FLOPs where `products`)."""
        try:
            self.process.stdin.write(_LENGTH.pack(len(data)) + bytes((kind, products)))
            self.process.stdin.write(data)
            self.process.stdin.flush()
        except OSError:
            raise WorkerLost from None
        self.busy = True

    def send_range(self, source: tuple[str, int, int], offset: int, length: int, kind: int = 0,
                   products: bool = True) -> None:
        """Has the worker read `length` bytes of the file at `offset` itself and decode them as
        a chunk's events (as send does): no chunk is copied into the pipe, nor held here meanwhile."""
        request = pickle.dumps((source, offset, length, kind, products), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.process.stdin.write(_LENGTH.pack(_RANGE) + _LENGTH.pack(len(request)) + request)
            self.process.stdin.flush()
        except OSError:
            raise WorkerLost from None
        self.busy = True

    def receive(self):
        """The columns of the chunk last sent (a decode error is raised here)."""
        self.busy = False
        head = self.process.stdout.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            raise WorkerLost
        (length,) = _LENGTH.unpack(head)
        payload = self.process.stdout.read(length)
        if len(payload) < length:
            raise WorkerLost
        ok, value = pickle.loads(payload)
        if ok is None:  # raised in the worker, whose module is __main__: sent as its words
            raise RangeUnreadable(value)
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        try:
            self.process.stdin.close()
        except OSError:
            pass
        if self.busy:  # decoding a chunk nobody will read
            self.process.kill()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def discard() -> None:
    """Stop the workers (one was lost mid-read, or at exit); the next big read starts others."""
    while _workers:
        _workers.pop().stop()


def _serve() -> None:
    from gapscope.analysis.readers.trace_chunks import KINDS, decode_chunk

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    opened: dict[tuple, int] = {}  # the file of the ranges asked last, kept open for the next
    while True:
        head = stdin.read(_LENGTH.size)
        if len(head) < _LENGTH.size:
            return
        (length,) = _LENGTH.unpack(head)
        try:
            if length == _RANGE:
                source, offset, length, kind, products = pickle.loads(stdin.read(_LENGTH.unpack(stdin.read(_LENGTH.size))[0]))
                data = _read_range(opened, source, offset, length)
            else:
                kind, products = stdin.read(2)
                data = stdin.read(length)
            answer = (True, decode_chunk(data, KINDS[kind], bool(products)))
        except RangeUnreadable as exc:
            answer = (None, str(exc))
        except Exception as exc:  # noqa: BLE001 - a decode error goes back to the reader
            answer = (False, exc)
        payload = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.write(_LENGTH.pack(len(payload)))
        stdout.write(payload)
        stdout.flush()


def give_back_freed_memory() -> None:
    """Return the heap's freed pages to the system (glibc keeps them otherwise); no-op elsewhere."""
    global _trim
    if _trim is None:
        import ctypes
        try:
            _trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):  # not glibc
            _trim = False
    if _trim:
        _trim(0)


_trim = None  # glibc's malloc_trim, once looked up (False: none)


def _read_range(opened: dict, source: tuple[str, int, int], offset: int, length: int) -> bytearray:
    """The file's bytes at `offset` as a chunk's array: "[" + them + "]", read straight into the
    one buffer the decoder is given."""
    fd = opened.get(source)
    if fd is None:
        for stale in opened.values():
            os.close(stale)
        opened.clear()
        path, device, inode = source
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise RangeUnreadable(str(exc)) from None
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != (device, inode):
            os.close(fd)
            raise RangeUnreadable(f"{path} is another file")
        opened[source] = fd
    chunk = bytearray(length + 2)
    chunk[0], chunk[-1] = 0x5B, 0x5D
    with memoryview(chunk) as view:
        done = 0
        while done < length:
            got = os.preadv(fd, [view[1 + done:1 + length]], offset + done)
            if got <= 0:
                raise RangeUnreadable(f"the file ends before byte {offset + length:,}")
            done += got
    return chunk


atexit.register(discard)

if __name__ == "__main__":
    _serve()
