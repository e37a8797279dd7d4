"""Pauses Python's cyclic garbage collector around builds of millions of acyclic objects."""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def collector_paused():
    """Reading a trace and segmenting it allocate millions of tuples and lists, none of them in
    a reference cycle; the collector would still walk them again and again as the heap grows
    (a fifth of a 250 MB read while it built an Event per event). Nested use is fine: the
    outermost restores."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
