"""TF's allocator events in an XSpace (MemoryAllocation / MemoryDeallocation host events) as MemoryEvents."""
from __future__ import annotations

from gapscope.analysis.events.memory_event import MemoryEvent

NAMES = ("MemoryAllocation", "MemoryDeallocation")


def memory_event(name: str, stats: dict, start_us: float, track: str) -> MemoryEvent | None:
    """One allocator event; None where it lacks a size. The size is the bytes the op asked for
    (`requested_bytes`), as torch reports its own: TF's block (`allocation_bytes`) may be
    larger by up to the free block it was taken from, and its level (`bytes_allocated`)
    counts those blocks, so the level is left to the running sum. `tf_op` names the op of an
    allocation."""
    size = _int(stats.get("requested_bytes"))
    if size is None:
        size = _int(stats.get("allocation_bytes"))
    if size is None:
        return None
    allocator = str(stats.get("allocator_name") or "")
    op = stats.get("tf_op")
    return MemoryEvent(start_us, size if name == NAMES[0] else -size, None,
                       _int(stats.get("bytes_reserved")), _device(allocator), track,
                       str(op) if op else None, _int(stats.get("addr")))


def _device(allocator: str) -> str:
    """TF's allocators by name: GPU_0_bfc is device 0's; mklcpu, cpu and the host-pinned ones the host's."""
    if allocator.startswith("GPU_") and not allocator.startswith("GPU_host"):
        return f"cuda:{allocator.split('_')[1]}"
    return "cpu"


def _int(value) -> int | None:
    try:
        return None if value is None or value == "" else int(value)
    except (TypeError, ValueError):
        return None
