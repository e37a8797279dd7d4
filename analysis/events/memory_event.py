"""One allocator event of a trace, independent of the framework: bytes taken or given back, and the level after it."""
from __future__ import annotations

import msgspec


class MemoryEvent(msgspec.Struct, gc=False, frozen=True):
    """An allocation (nbytes > 0) or a free (nbytes < 0) at one instant, in µs on the trace's
    own clock, as the allocator reported it."""

    ts_us: float
    nbytes: int
    allocated: int | None    # the allocator's bytes in use after this event (None: not said)
    reserved: int | None     # bytes the allocator holds from the system (a caching allocator's)
    device: str              # "cpu", "cuda:0", ...: each device's allocator counts on its own
    track: str               # "host/<pid>/<tid>": the thread whose op allocated
    op: str | None = None    # the op that allocated, where the trace names it
    addr: int | None = None  # the block's address: pairs a free with its allocation
