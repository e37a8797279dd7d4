"""Host↔device copies of the traced steps: count, bytes, time and bandwidth per direction and phase."""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from analysis.measures.kernels import DEVICE_KERNELS, Work
from analysis.events.trace import MEMCPY

CPU_ONLY = "no transfers: CPU-only run"
NONE_RECORDED = "no host-device copies in the traced steps"

# Kineto: "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoD
# (Device -> Device)"; XPlane: "MemcpyH2D", "MemcpyD2H", "MemcpyD2D"; older ROCm Kineto, roctracer's
# own op names: "CopyHostToDevice", "CopyDeviceToHost", "CopyDeviceToDevice".
_DIRECTIONS = (("H2D", re.compile(r"HtoD|H2D|HostToDevice")), ("D2H", re.compile(r"DtoH|D2H|DeviceToHost")),
               ("D2D", re.compile(r"DtoD|D2D|DeviceToDevice")), ("P2P", re.compile(r"PtoP|P2P")))


def direction(name: str) -> str:
    return next((d for d, pattern in _DIRECTIONS if pattern.search(name)), "other")


def host_memory(name: str) -> str:
    """Pinned host memory is copied by DMA at full speed; pageable memory is staged first."""
    return "pinned" if "Pinned" in name else "pageable" if "Pageable" in name else "n/a"


@dataclass
class TransferStats:
    """Per steady-state step means; empty `by_direction` with a `note` when there were none."""

    cpu_only: bool
    steps: int
    by_direction: dict[str, dict] = field(default_factory=dict)
    by_phase: dict[str, dict] = field(default_factory=dict)
    note: str | None = None

    def to_json_dict(self) -> dict:
        return dict(self.__dict__)


def transfer_stats(work: Work) -> TransferStats:
    if work.source != DEVICE_KERNELS:
        return TransferStats(True, work.steps, note=CPU_ONLY)
    copies = [w for w in work.transfers() if w.kind == MEMCPY]
    if not copies:
        return TransferStats(False, work.steps, note=NONE_RECORDED)
    n = max(work.steps, 1)
    groups, phases = defaultdict(list), defaultdict(list)
    for copy in copies:
        groups[direction(copy.name)].append(copy)
        phases[copy.phase].append(copy)
    by_direction = {}
    for way, group in sorted(groups.items()):
        nbytes = sum(c.nbytes or 0 for c in group)
        busy_us = sum(c.busy_us for c in group)
        memory = defaultdict(int)
        for c in group:
            memory[host_memory(c.name)] += 1
        by_direction[way] = {
            "count_per_step": round(len(group) / n, 6),
            "bytes_per_step": round(nbytes / n, 3),
            "ms_per_step": round(busy_us / n / 1000.0, 6),
            # bytes per microsecond = MB/s; / 1000 = GB/s
            "gb_per_s": round(nbytes / busy_us / 1000.0, 3) if busy_us else None,
            "host_memory": dict(sorted(memory.items())),
            "bytes_known": all(c.nbytes is not None for c in group),
        }
    by_phase = {phase: {"count_per_step": round(len(g) / n, 6),
                        "bytes_per_step": round(sum(c.nbytes or 0 for c in g) / n, 3),
                        "ms_per_step": round(sum(c.busy_us for c in g) / n / 1000.0, 6)}
                for phase, g in sorted(phases.items())}
    return TransferStats(False, work.steps, by_direction, by_phase)
