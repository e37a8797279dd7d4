"""The allocator's level as Chrome trace counter events ("C"), which Perfetto and chrome://tracing draw as a track."""
from __future__ import annotations

from collections import defaultdict

from gapscope.analysis.measures.memory.levels import Levels

MB = 1e6


def memory_counters(events: list, pid: int) -> list[dict]:
    """One counter track per device ("memory cpu", "memory cuda:0"): the bytes in use after
    each allocator event in MB, and the reserved bytes where the allocator says them."""
    by_device = defaultdict(list)
    for event in events:
        by_device[event.device].append(event)
    counters = []
    for device, mine in sorted(by_device.items()):
        levels = Levels(mine)
        for event, allocated, reserved in zip(levels.events, levels.allocated, levels.reserved):
            args = {"allocated MB": round(allocated / MB, 6)}
            if reserved is not None:
                args["reserved MB"] = round(reserved / MB, 6)
            counters.append({"name": f"memory {device}", "ph": "C", "pid": pid, "ts": event.ts_us,
                             "args": args})
    return counters
