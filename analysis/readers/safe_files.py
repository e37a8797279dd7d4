"""Opens input files so that no read runs away: regular files only, with a cap on the bytes read."""
from __future__ import annotations

import errno
import gzip
import io
import os
import queue
import re
import stat
import threading
import zlib
from pathlib import Path

from gapscope.analysis.readers.gunzip import ChildGunzip
from gapscope.profilers.errors import TraceFormatError

# A symlink to /dev/zero or /dev/urandom reads forever and a FIFO blocks forever: anything
# but a regular file is refused. Sizes are capped well above the largest real trace (a few GB)
# so that a wrong file fails in one line instead of exhausting memory or time.
MAX_FILE_BYTES = 8 << 30
MAX_DECOMPRESSED_BYTES = 32 << 30
# manifest.json, steps.csv, matrix.json: a few MB even for a million steps.
MAX_SIDE_FILE_BYTES = 512 << 20
_GZIP_MAGIC = b"\x1f\x8b"
# A gzip trace inflated whole for its tail only up to this size (about 1 s here).
MAX_TAIL_GZIP_BYTES = 32 << 20
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def is_readable_regular_file(path: str | Path) -> bool:
    """True for a regular file (or a symlink to one) this process may read; False for FIFOs,
    devices, sockets, folders, dangling or looping symlinks. Never blocks, never raises."""
    return why_unreadable(path) is None


def why_unreadable(path: str | Path) -> str | None:
    """Why `path` is no regular file this process may read ("a FIFO", "dangling symlink to
    /x", ...), or None when it is one. For scanning folders: stats, never opens."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return _why(path, exc)
    except ValueError:  # a NUL byte in the name
        return "not a valid file name"
    if not stat.S_ISREG(mode):
        return f"{_kind(mode)}, not a regular file"
    if not os.access(path, os.R_OK):
        return "permission denied"
    return None


def unreadable_under(folder: str | Path, names: re.Pattern) -> list[tuple[Path, str]]:
    """Files under `folder` whose name matches `names` but that are no readable regular file,
    with why; symlinked folders are not followed (a loop would never end)."""
    found = []
    for root, _, files in os.walk(folder, followlinks=False):
        for name in files:
            if names.search(name):
                problem = why_unreadable(Path(root, name))
                if problem:
                    found.append((Path(root, name), problem))
    return sorted(found)


def open_regular(path: str | Path, max_bytes: int | None = None) -> io.BufferedReader:
    """Open `path` for binary reading, or raise a one-line TraceFormatError saying why not."""
    path = Path(path)
    max_bytes = MAX_FILE_BYTES if max_bytes is None else max_bytes
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the type is checked on the
        # opened descriptor, so a file swapped in between check and open cannot slip through.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({_why(path, exc)})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TraceFormatError(f"{path}: cannot read ({_kind(info.st_mode)}, not a regular file)")
        if info.st_size > max_bytes:
            raise TraceFormatError(f"{path}: a file of {_size(info.st_size)} is over the "
                                   f"{_size(max_bytes)} gapscope reads")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, max_bytes: int | None = None) -> bytes:
    """The whole (small) file, e.g. an .xplane.pb or an HLO dump, with the same checks."""
    with open_regular(path, max_bytes) as handle:
        return handle.read()


def is_gzip(path: str | Path) -> bool:
    """Whether the file's content is gzip (by its magic bytes, whatever its name)."""
    with open_regular(path) as handle:
        try:
            return handle.peek(2)[:2] == _GZIP_MAGIC
        except OSError as exc:
            raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_head(path: str | Path, nbytes: int) -> bytes:
    """The first `nbytes` of the file's content, gunzipped in-process when it is gzip (by its
    magic bytes): enough to tell what a file is without reading all of it."""
    with open_regular(path) as handle:
        try:
            if handle.peek(2)[:2] != _GZIP_MAGIC:
                return handle.read(nbytes)
            with gzip.GzipFile(fileobj=handle) as stream:
                return stream.read(nbytes)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None


def read_tail(path: str | Path, nbytes: int, max_gzip_bytes: int = MAX_TAIL_GZIP_BYTES) -> bytes:
    """The last `nbytes` of the file's content: a seek for a plain file; a gzip file is
    inflated through (the reader's own limits apply), keeping only its end, where it is at
    most `max_gzip_bytes` (else b""): a gzip has no end to seek to, and a look at a folder
    must not cost a full read of every large trace in it. Kineto writes some keys after
    traceEvents (distributedInfo among them)."""
    with open_regular(path) as handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            if handle.peek(2)[:2] != _GZIP_MAGIC:
                handle.seek(max(0, size - nbytes))
                return handle.read(nbytes)
        except OSError as exc:
            raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if size > max_gzip_bytes:
        return b""
    kept = b""
    with open_stream(path) as stream:
        while block := read_block(stream, 1 << 20, path):
            kept = (kept + block)[-nbytes:]
    return kept


def open_stream(path: str | Path, max_bytes: int | None = None,
                max_decompressed: int | None = None) -> io.RawIOBase:
    """A binary stream of the file's content, gunzipped on the fly when it is gzip (by its
    magic bytes, whatever its name), refusing to inflate past `max_decompressed` bytes."""
    handle = open_regular(path, max_bytes)
    try:
        is_gzip = handle.peek(2)[:2] == _GZIP_MAGIC
    except OSError as exc:
        handle.close()
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not is_gzip:
        return handle
    limit = MAX_DECOMPRESSED_BYTES if max_decompressed is None else max_decompressed
    try:
        inner = ChildGunzip(handle, Path(path))
    except OSError as exc:  # no process could be started
        handle.close()
        raise TraceFormatError(f"{path}: cannot inflate ({exc.strerror or exc})") from None
    return _Capped(inner, handle, limit, Path(path))


def read_block(stream, size: int, path: str | Path) -> bytes:
    """One block of a stream from open_stream; a failed read becomes a TraceFormatError."""
    try:
        return stream.read(size)
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None


class ReadAhead:
    """The blocks of a stream from open_stream, read on a thread while the caller decodes the
    previous ones (a read from a file or from the gunzip child's pipe gives up the GIL).
    Holds at most `depth` blocks."""

    def __init__(self, stream, path: str | Path, block: int, depth: int = 2):
        self._stream, self._path, self._block = stream, path, block
        self._queue: queue.Queue = queue.Queue(depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="gapscope-read-ahead", daemon=True)
        self._done = False

    def __enter__(self) -> "ReadAhead":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        # Before the stream closes: the thread may be inside a read of it.
        self._stop.set()
        self._thread.join()

    def read(self) -> bytes:
        """The next block; b"" at the end. An error of the read is raised here."""
        if self._done:
            return b""
        item = self._queue.get()
        if isinstance(item, BaseException):
            self._done = True
            raise item
        self._done = not item
        return item

    def _produce(self) -> None:
        try:
            while not self._stop.is_set():
                block = read_block(self._stream, self._block, self._path)
                self._put(block)
                if not block:
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
            self._put(exc)

    def _put(self, item) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


class _Capped(io.RawIOBase):
    """A gzip stream that fails once it has inflated more than its limit (a gzip bomb)."""

    def __init__(self, inner: io.RawIOBase, raw, limit: int, path: Path):
        self._inner, self._raw, self._left, self._path = inner, raw, limit, path
        self._limit = limit

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = self._left + 1 if size is None or size < 0 else min(size, self._left + 1)
        data = self._inner.read(want)
        self._left -= len(data)
        if self._left < 0:
            raise TraceFormatError(f"{self._path}: gzip content inflates past the "
                                   f"{_size(self._limit)} gapscope reads")
        return data

    def close(self) -> None:
        self._inner.close()
        self._raw.close()
        super().close()


def _why(path: Path, exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno == errno.ENOENT and path.is_symlink():
        return f"dangling symlink to {os.readlink(path)}"
    if exc.errno == errno.ENXIO:  # a socket, or a FIFO opened for writing
        return "not a regular file"
    return exc.strerror or str(exc)
