"""The allocator's level over time on one device: bytes in use after each event, and at any instant."""
from __future__ import annotations

import bisect
from collections import Counter

from gapscope.analysis.events.memory_event import MemoryEvent


class Levels:
    """Events of one device in time order with the level after each. Where the trace gives the
    allocator's own total (Total Allocated, bytes_allocated) it is taken; else the running sum."""

    def __init__(self, events: list[MemoryEvent]):
        self.events = sorted(events, key=lambda e: e.ts_us)
        self.times = [e.ts_us for e in self.events]
        self.allocated: list[int] = []
        self.reserved: list[int | None] = []
        running = 0
        for event in self.events:
            running = event.allocated if event.allocated is not None else running + event.nbytes
            self.allocated.append(running)
            self.reserved.append(event.reserved or None)  # 0: the allocator does not say
        first = self.events[0] if self.events else None
        # Before the first event: its level less its own bytes.
        self.base = 0 if first is None else self.allocated[0] - first.nbytes

    def index_before(self, t: float) -> int:
        """Index of the last event before instant t (-1: none)."""
        return bisect.bisect_left(self.times, t) - 1

    def at(self, t: float) -> int:
        """The level just before instant t."""
        i = self.index_before(t)
        return self.base if i < 0 else self.allocated[i]

    def reserved_at(self, t: float) -> int | None:
        i = self.index_before(t)
        return None if i < 0 else self.reserved[i]

    def between(self, start: float, end: float) -> range:
        """Indices of the events in [start, end)."""
        return range(bisect.bisect_left(self.times, start), bisect.bisect_left(self.times, end))


def main_device(events: list[MemoryEvent]) -> str | None:
    """The device whose allocator the figures follow: an accelerator where one allocated, since
    its memory is the one that runs out; else the host."""
    devices = Counter(e.device for e in events)
    if not devices:
        return None
    accelerators = [d for d in devices if d != "cpu"]
    return max(accelerators, key=devices.__getitem__) if accelerators else "cpu"
