"""The one reader of gapscope's own JSON files (manifest.json, ab.json, matrix.json, sweep.json): regular files only, size, depth and number checks, a one-line refusal."""
from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

from gapscope.profilers.errors import GapscopeInputError

# A manifest is a few kB and a matrix state of a thousand rows under a MB: far above both.
MAX_BYTES = 64 << 20
# gapscope nests its files 4 levels deep; 10,000 nested lists overflow the decoder's stack
# and later every recursive walk over the document (RecursionError, a traceback).
MAX_DEPTH = 32
# Whole numbers gapscope writes (steps, pids, ports, repeats) have a few digits; a 5,000-digit
# one is no count, and int() of it or float() of it fails far from here.
MAX_INT_DIGITS = 19


class StateFileError(GapscopeInputError, ValueError):
    """A state file that is no valid gapscope JSON. A ValueError too, so that a caller that took
    any JSON error for a corrupt file still does."""


def load(path: str | Path, max_bytes: int = MAX_BYTES):
    """The JSON document in `path`, or a one-line StateFileError saying what is wrong with it.
    A missing file is a FileNotFoundError, as open() gives, so callers can tell absent from bad."""
    path = Path(path)
    # O_NONBLOCK: a FIFO named manifest.json must not block; its type is checked on the
    # descriptor, so a file swapped in after a check cannot slip through.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if path.is_symlink():
            raise StateFileError(f"{path}: dangling symlink to {os.readlink(path)}") from None
        raise
    except OSError as exc:
        raise StateFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise StateFileError(f"{path}: cannot read ({_kind(info.st_mode)}, not a regular file)")
        if info.st_size > max_bytes:
            raise StateFileError(f"{path}: {info.st_size:,} bytes, over the {max_bytes:,} "
                                 "a gapscope state file may hold")
        data = handle.read(max_bytes + 1)
    return loads(data, path)


def loads(data: bytes | str, source: str | Path = "JSON"):
    """`data` decoded with gapscope's checks: no NaN/Infinity literal, no number that overflows
    to infinity or has more than MAX_INT_DIGITS digits, nesting at most MAX_DEPTH deep."""
    try:
        document = json.loads(data, parse_constant=_no_constant, parse_float=_finite_float,
                              parse_int=_short_int)
    except RecursionError:
        raise StateFileError(f"{source}: corrupt JSON (nested deeper than {MAX_DEPTH} levels)") from None
    except StateFileError as exc:
        raise StateFileError(f"{source}: corrupt JSON ({exc})") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise StateFileError(f"{source}: corrupt JSON ({_short(exc)})") from None
    if _depth(document) > MAX_DEPTH:
        raise StateFileError(f"{source}: corrupt JSON (nested deeper than {MAX_DEPTH} levels)")
    return document


def whole_number(value, name: str, source: str | Path, low: int = 0, high: int = 10**9) -> int:
    """`value` if it is a whole number in [low, high], else a one-line StateFileError: "two",
    1e40, true or -1 repeats are no count."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise StateFileError(f"{source}: {name} should be a whole number from {low:,} to "
                             f"{high:,}, not {repr(value)[:40]}")
    return value


def number(value, name: str, source: str | Path, low: float, high: float) -> int | float:
    """`value` if it is a number in [low, high], else a one-line StateFileError (a sweep value
    of 1e40 or -1 is no batch size or width)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise StateFileError(f"{source}: {name} should be a number from {low:g} to {high:g}, "
                             f"not {repr(value)[:40]}")
    return value


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _no_constant(name: str):
    raise StateFileError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StateFileError(f"number {text[:24]} overflows")
    return value


def _short_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise StateFileError(f"a whole number of {len(text.lstrip('-')):,} digits")
    return int(text)


def _depth(document) -> int:
    """Nesting depth, walked without recursion (a deep document is what it guards against)."""
    deepest, stack = 0, [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, depth)
            if depth > MAX_DEPTH:
                return depth
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:160] + "..."
