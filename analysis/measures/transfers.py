"""Copies and sets of the traced steps: count, bytes, time and bandwidth per direction, and per
direction in each phase (the phase of the host call that issued them)."""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from gapscope.analysis.measures.kernels import DEVICE_KERNELS, NOT_TRACED, Work, WorkItem
from gapscope.analysis.events.trace import MEMSET

CPU_ONLY = "no transfers: CPU-only run"
NONE_RECORDED = "no host-device copies in the traced steps"
NOT_TRACED_NOTE = "copies not traced: no device activity was traced"

# Kineto: "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoD
# (Device -> Device)"; XPlane: "MemcpyH2D", "MemcpyD2H", "MemcpyD2D"; older ROCm Kineto, roctracer's
# own op names: "CopyHostToDevice", "CopyDeviceToHost", "CopyDeviceToDevice".
_DIRECTIONS = (("H2D", re.compile(r"HtoD|H2D|HostToDevice")), ("D2H", re.compile(r"DtoH|D2H|DeviceToHost")),
               ("D2D", re.compile(r"DtoD|D2D|DeviceToDevice")), ("P2P", re.compile(r"PtoP|P2P")))


MEMSET_WAY = "memset"


def direction(name: str) -> str:
    return next((d for d, pattern in _DIRECTIONS if pattern.search(name)), "other")


def copy_way(item: WorkItem) -> str:
    """A copy's direction, or `memset` for a set (it moves no data between memories)."""
    return MEMSET_WAY if item.kind == MEMSET else direction(item.name)


def host_memory(name: str) -> str:
    """Pinned host memory is copied by DMA at full speed; pageable memory is staged first."""
    return "pinned" if "Pinned" in name else "pageable" if "Pageable" in name else "n/a"


@dataclass
class TransferStats:
    """Per steady-state step means; empty `by_direction` with a `note` when there were none."""

    cpu_only: bool
    steps: int
    by_direction: dict[str, dict] = field(default_factory=dict)
    by_phase: dict[str, dict] = field(default_factory=dict)  # {phase: {direction: figures}}
    note: str | None = None

    def to_json_dict(self) -> dict:
        return dict(self.__dict__)


def transfer_stats(work: Work) -> TransferStats:
    if work.source == NOT_TRACED:
        return TransferStats(False, work.steps, note=NOT_TRACED_NOTE)
    if work.source != DEVICE_KERNELS:
        return TransferStats(True, work.steps, note=CPU_ONLY)
    copies = work.transfers()
    if not copies:
        return TransferStats(False, work.steps, note=NONE_RECORDED)
    n = max(work.steps, 1)
    groups, phases = defaultdict(list), defaultdict(lambda: defaultdict(list))
    for copy in copies:
        groups[copy_way(copy)].append(copy)
        phases[copy.phase][copy_way(copy)].append(copy)
    by_direction = {}
    for way, group in sorted(groups.items()):
        nbytes = sum(c.nbytes or 0 for c in group)
        busy_us = sum(c.busy_us for c in group)
        memory = defaultdict(int)
        for c in group:
            memory[host_memory(c.name)] += 1
        by_direction[way] = {
            **_figures(group, n),
            # bytes per microsecond = MB/s; / 1000 = GB/s
            "gb_per_s": round(nbytes / busy_us / 1000.0, 3) if busy_us else None,
            "host_memory": dict(sorted(memory.items())),
            "bytes_known": all(c.nbytes is not None for c in group),
        }
    by_phase = {phase: {d: _figures(g, n) for d, g in sorted(ways.items())}
                for phase, ways in sorted(phases.items())}
    return TransferStats(False, work.steps, by_direction, by_phase)


def _figures(group: list[WorkItem], n: int) -> dict:
    """Means per step of a group of copies: how many, bytes, device time, and the host time of
    the runtime calls that issued them (a blocking cudaMemcpy waits there for its copy)."""
    return {"count_per_step": round(len(group) / n, 6),
            "bytes_per_step": round(sum(c.nbytes or 0 for c in group) / n, 3),
            "ms_per_step": round(sum(c.busy_us for c in group) / n / 1000.0, 6),
            "calls_ms_per_step": round(sum(c.launch.dur_us for c in group if c.launch) / n / 1000.0, 6)}
