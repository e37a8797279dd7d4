"""Traces read ahead of their run, to learn what a gzip's head does not say (distributedInfo comes after the events), handed to the run that reads the same unchanged file next: a gzip is inflated once."""
from __future__ import annotations

import os
from pathlib import Path

from gapscope.analysis.events.trace import Trace

# By file identity (device, inode, size, mtime), not by path: a run names a file its own way.
_kept: dict[tuple, Trace] = {}


def read_ahead(path: Path, read) -> Trace:
    """`read(path)`'s trace, kept for the next take() of the same file (read once however many
    looks at it come first)."""
    key = _identity(path)
    trace = _kept.get(key) if key is not None else None
    if trace is None:
        trace = read(path)
        if key is not None:
            _kept[key] = trace
    return trace


def take(path: Path) -> Trace | None:
    """The trace read ahead of this file, if it has not changed since: handed over once, and
    no longer kept."""
    key = _identity(path)
    return _kept.pop(key, None) if key is not None else None


def _identity(path: Path) -> tuple | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns
