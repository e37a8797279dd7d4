"""A torch.profiler trace's allocator and shape records: the `[memory]` instants (profile_memory=True) the chunk decoder keeps, as MemoryEvents, and matrix products' Input Dims (record_shapes=True), read apart."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import msgspec

from gapscope.analysis.events.memory_event import MemoryEvent
from gapscope.analysis.readers import safe_files
from gapscope.profilers.errors import TraceFormatError

_BLOCK = 4 << 20
# Bytes kept before a block's unread end: an op's event is some hundreds of bytes, so its start
# lies well within this of its name, and a name cut by the block's end is found in the next round.
_KEEP = 4096
# Kineto's Device Type: c10::DeviceType's numbers (0 CPU, 1 CUDA).
_DEVICE_TYPES = {0: "cpu", 1: "cuda", 8: "ipu", 9: "xla", 12: "xpu", 13: "mps", 17: "privateuse1"}


# The matrix products whose FLOPs their input shapes give (2·M·N·K): aten::linear runs addmm.
PRODUCTS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm")
_PRODUCT = re.compile(rb'"name": ?"aten::(?:addmm|mm|bmm|baddbmm)"')


class _ShapeArgs(msgspec.Struct, gc=False):
    dims: list | None = msgspec.field(default=None, name="Input Dims")


class _ShapeRaw(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    ts: float | None = None
    pid: int | str = 0
    tid: int | str = 0
    args: _ShapeArgs | None = None


_DECODE_SHAPES = msgspec.json.Decoder(_ShapeRaw, strict=False).decode


@dataclass(frozen=True)
class OpShapes:
    """One matrix product op with the shapes of its inputs (record_shapes' Input Dims)."""

    name: str
    start_us: float
    track: str
    dims: list


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


def read_op_shapes(path: str | Path) -> list[OpShapes]:
    """Every matrix product op (PRODUCTS) of the trace with its Input Dims (empty: recorded
    without record_shapes, or none ran). Read apart, so that the main decode keeps no shapes
    (they would cost it a third): only `--layers` on a trace without layer specs asks for them."""
    path = Path(path)
    found: list = []
    pending = b""
    try:
        with safe_files.open_stream(path) as stream, safe_files.ReadAhead(stream, path, _BLOCK) as blocks:
            while True:
                block = blocks.read()
                data = pending + block
                done = _scan(data, found, not block)
                if not block:
                    break
                pending = data[done:]
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return found


def _scan(data: bytes, found: list, final: bool) -> int:
    """Decodes the matrix products whose whole object lies in `data`; returns where the next
    round starts (before the first event left incomplete, else `_KEEP` from the end)."""
    position = 0
    while True:
        match = _PRODUCT.search(data, position)
        hit = match.start() if match else -1
        if hit < 0:
            return len(data) if final else max(position, len(data) - _KEEP)
        start, end = _object_around(data, hit)
        if end is None:
            return len(data) if final else (start if start is not None else hit)
        if start is not None:
            event = _shapes(data[start:end])
            if event is not None:
                found.append(event)
        position = end


def _object_around(data: bytes, hit: int) -> tuple[int | None, int | None]:
    """The bounds of the innermost JSON object around `hit`: an op's event nests only its args.
    Found by jumping from brace to brace (a byte-by-byte walk took 85 % of a run's memory read)."""
    lo, hi = max(0, hit - _KEEP + 1), min(len(data), hit + _KEEP)
    start, depth, at = None, 0, hit
    while True:
        opening, closing = data.rfind(b"{", lo, at), data.rfind(b"}", lo, at)
        if opening < 0 and closing < 0:
            break
        if closing > opening:
            depth, at = depth + 1, closing
        elif depth == 0:
            start = opening
            break
        else:
            depth, at = depth - 1, opening
    depth, at = 0, hit
    while True:
        opening, closing = data.find(b"{", at, hi), data.find(b"}", at, hi)
        if closing < 0:
            return start, None
        if 0 <= opening < closing:
            depth, at = depth + 1, opening + 1
        elif depth == 0:
            return start, closing + 1
        else:
            depth, at = depth - 1, closing + 1


def _shapes(text: bytes) -> OpShapes | None:
    try:
        raw = _DECODE_SHAPES(text)
    except msgspec.DecodeError:
        return None
    if raw.ph != "X" or raw.name not in PRODUCTS or raw.ts is None or raw.args is None \
            or not isinstance(raw.args.dims, list):
        return None
    return OpShapes(raw.name, float(raw.ts), f"host/{raw.pid}/{raw.tid}", raw.args.dims)


def _int(value) -> int | None:
    return None if value is None else int(value)
