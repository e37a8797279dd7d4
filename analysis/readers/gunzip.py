"""Inflates a gzip file in a child process, so the inflate runs beside the decode instead of under Python's GIL."""
from __future__ import annotations

import fcntl
import io
import os
import subprocess
import sys
from pathlib import Path

from gapscope.profilers.errors import TraceFormatError

_PIPE_BYTES = 1 << 20  # fewer wake-ups than the default 64 KiB pipe
# The child: Python's gzip module (zlib), about three times as fast as gzip(1) here. Its last
# stderr line on a failure reads "<Error>: <why>".
_CHILD = ("import gzip, shutil, sys; "
          "shutil.copyfileobj(gzip.GzipFile(fileobj=sys.stdin.buffer), sys.stdout.buffer, 1 << 20)")


class ChildGunzip(io.RawIOBase):
    """The inflated content of an opened gzip file, read from a child process through a pipe.

    A thread inflating with the gzip module gained nothing here: zlib gives up the GIL only
    inside each small inflate call, and the JSON decode holds it for tens of milliseconds at a
    time, so the two took turns (a 1 GB gzipped trace took 3 s longer than the plain one). A
    child process inflates on the other core. It reads the already-opened regular file as its
    stdin, so no path is handed to it."""

    def __init__(self, handle, path: Path):
        self._handle, self._path = handle, path
        fd = handle.fileno()
        os.lseek(fd, 0, os.SEEK_SET)  # peeking at the magic bytes moved the descriptor on
        self._process = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CHILD], stdin=fd,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         close_fds=True)
        try:
            fcntl.fcntl(self._process.stdout.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:  # a smaller pipe only costs wake-ups
            pass

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._process.stdout.read(size)
        if not data:
            self._check_exit()
        return data

    def _check_exit(self) -> None:
        if self._process.wait() != 0:
            why = self._process.stderr.read().decode(errors="replace").strip().splitlines()
            reason = why[-1].split(": ", 1)[-1] if why else "the inflating process failed"
            raise TraceFormatError(f"{self._path}: corrupt gzip ({reason})")

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        self._process.stdout.close()
        self._process.stderr.close()
        self._handle.close()
        super().close()
