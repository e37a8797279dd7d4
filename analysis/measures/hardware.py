"""The device a run ran on and the size of its job: from gapscope's manifest, else from what a foreign trace says of itself (deviceProperties, distributedInfo)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from gapscope.analysis.events.trace import KERNEL, MEMCPY, MEMSET, Trace

_GIB = float(1 << 30)


@dataclass
class Hardware:
    device: str | None            # product name ("NVIDIA A100-SXM4-40GB"), or the CPU's
    memory_gib: float | None = None
    sms: int | None = None        # streaming multiprocessors
    compute: str | None = None    # compute capability, "8.0"
    world_size: int = 1           # processes of the job; 1 where nothing says it is distributed
    source: str = "manifest"      # or "trace"

    def describe(self) -> str:
        """'NVIDIA A100-SXM4-40GB (39.4 GiB, 108 SMs)'."""
        facts = [f"{self.memory_gib:.1f} GiB" if self.memory_gib else None,
                 f"{self.sms} SMs" if self.sms else None]
        facts = [f for f in facts if f]
        return f"{self.device or 'unknown device'}" + (f" ({', '.join(facts)})" if facts else "")

    def same_device(self, other: "Hardware") -> bool:
        """Unknown on either side is not a difference: there is nothing to warn with."""
        if not (self.device and other.device):
            return True
        return self.device.strip().lower() == other.device.strip().lower()

    def to_json_dict(self) -> dict:
        return dict(self.__dict__)


def hardware(manifest: dict, trace: Trace | None) -> Hardware:
    found = _trace_hardware(trace) if trace is not None else Hardware(None, source="trace")
    device = manifest.get("device")
    if isinstance(device, str) and device:
        if found.device and found.device.strip().lower() == device.strip().lower():
            found.source = "manifest"  # the same device: keep the trace's memory and SMs too
        else:  # the manifest's word; the trace's figures may be another GPU's
            found = Hardware(device, world_size=found.world_size)
    world = manifest.get("world_size")
    if _count(world):
        found.world_size = world
    return found


def _trace_hardware(trace: Trace) -> Hardware:
    """The deviceProperties entry of the device the trace's kernels ran on: a trace lists every
    GPU the process could see (8 on a DGX node), and its kernel events name their device in
    their pid."""
    info = trace.metadata.get("distributed_info") or {}
    world = info.get("world_size") if isinstance(info, dict) else None
    world = world if _count(world) else 1
    props = [p for p in trace.metadata.get("device_properties") or [] if isinstance(p, dict)]
    entry = None
    if props:
        used = _device_ids(trace)
        by_id = {str(p.get("id")): p for p in props}
        entry = next((by_id[d] for d in used if d in by_id), props[0])
    if entry is None or not isinstance(entry.get("name"), str):
        return Hardware(None, world_size=world, source="trace")
    memory, sms = entry.get("totalGlobalMem"), entry.get("numSms")
    major, minor = entry.get("computeMajor"), entry.get("computeMinor")
    return Hardware(entry["name"],
                    round(memory / _GIB, 1) if _count(memory) else None,
                    sms if _count(sms) else None,
                    f"{major}.{minor}" if _count(major) and isinstance(minor, int) else None,
                    world, "trace")


def _device_ids(trace: Trace) -> list[str]:
    """The device ids (track pids) of the trace's kernels and copies, the busiest first."""
    columns = trace.columns
    per_where = np.bincount(columns.where, minlength=len(columns.wheres))
    rows = Counter()
    for where, (kind, track) in enumerate(columns.wheres):
        if kind in (KERNEL, MEMCPY, MEMSET) and track.startswith("device/"):
            rows[track.split("/")[1]] += int(per_where[where])
    return [device for device, _ in rows.most_common()]


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
