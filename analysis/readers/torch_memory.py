"""A torch.profiler trace's allocator records: the `[memory]` instants (profile_memory=True) the chunk decoder keeps, as MemoryEvents."""
from __future__ import annotations

from gapscope.analysis.events.memory_event import MemoryEvent

# Kineto's Device Type: c10::DeviceType's numbers (0 CPU, 1 CUDA).
_DEVICE_TYPES = {0: "cpu", 1: "cuda", 8: "ipu", 9: "xla", 12: "xpu", 13: "mps", 17: "privateuse1"}


def memory_events(rows: list[tuple]) -> list[MemoryEvent]:
    """The `[memory]` instants trace_chunks kept ((ts, bytes, allocated, reserved, device type,
    device id, addr, pid, tid), in the order written) as MemoryEvents."""
    events, devices, tracks = [], {}, {}
    for ts, nbytes, allocated, reserved, device_type, device_id, addr, pid, tid in rows:
        device = devices.get((device_type, device_id))
        if device is None:  # one string per device and per thread, shared by their events
            device = devices[device_type, device_id] = _device(device_type, device_id)
        track = tracks.get((pid, tid))
        if track is None:
            track = tracks[pid, tid] = f"host/{pid}/{tid}"
        events.append(MemoryEvent(float(ts), int(nbytes), _int(allocated), _int(reserved), device, track, addr=addr))
    return events


def _device(device_type: int | None, device_id: int | None) -> str:
    device = _DEVICE_TYPES.get(device_type, f"device{device_type}") if device_type is not None else "cpu"
    if device != "cpu" and device_id is not None and device_id >= 0:
        device = f"{device}:{device_id}"
    return device


def _int(value) -> int | None:
    return None if value is None else int(value)
