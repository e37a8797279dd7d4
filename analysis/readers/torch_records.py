"""What the chunk pass keeps of a torch.profiler trace beside its events: the `[memory]` instants (profile_memory) as MemoryEvents, and matrix products' FLOPs from record_shapes' Input Dims, found in a chunk's bytes while the chunk is decoded (a trace is read once, and no op's shapes are kept)."""
from __future__ import annotations

import re
from array import array

import msgspec

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

# The matrix products whose FLOPs their input shapes give (2·M·N·K): aten::linear runs addmm.
PRODUCTS = ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm")
# The quoted names, then the key before them: a regex that starts at `"name":` stops at every
# event (2.1 ms of a 4 MB chunk whose decode takes 10.6 ms), at `"aten::` at every op (1.6 ms);
# four bytes.find calls took 4.6 ms on the 2-core EPYC, whose multi-byte find is slow.
_QUOTED = re.compile(rb'"aten::(?:addmm|mm|bmm|baddbmm)"')
_NAME_KEY = re.compile(rb'"name": ?$')
_DIMS = re.compile(rb'"Input Dims"')
# An op's event is some hundreds of bytes: its braces lie well within this of its name.
_REACH = 4096
# Where a trace keeps what was found: Trace.metadata[FLOPS_KEY] = (starts µs, FLOPs), arrays.
FLOPS_KEY = "matrix_product_flops"
_MAX_FLOPS = (1 << 63) - 1  # what an int64 column holds; more is no shape a trace recorded


class _ShapeArgs(msgspec.Struct, gc=False):
    dims: list | None = msgspec.field(default=None, name="Input Dims")


class _ShapeRaw(msgspec.Struct, gc=False):
    ph: str = ""
    name: str = ""
    ts: float | None = None
    args: _ShapeArgs | None = None


_DECODE_SHAPES = msgspec.json.Decoder(_ShapeRaw, strict=False).decode


def holds_products(names) -> bool:
    """Whether a chunk's event names (a dict or set) hold a matrix product."""
    return any(name in names for name in PRODUCTS)


def product_flops_in(data) -> tuple[array, array]:
    """The start (µs) and FLOPs of every matrix product in `data`, a chunk of whole events, whose
    Input Dims give them; empty where the chunk has no Input Dims (no record_shapes). Only the
    products are decoded again, from their own bytes: keeping every op's shapes in the chunk's
    decode would cost every read a third of it."""
    starts, flops = array("d"), array("q")
    if _DIMS.search(data) is None:
        return starts, flops
    if not isinstance(data, (bytes, bytearray)):  # a memoryview or msgspec.Raw: find needs bytes
        data = bytes(memoryview(data))
    for hit in _product_names(data):
        start, end = _object_around(data, hit)
        if start is None or end is None:  # args larger than _REACH: no shape gapscope reads
            continue
        found = _product(data[start:end])
        if found is not None:
            starts.append(found[0])
            flops.append(found[1])
    return starts, flops


def _product_names(data: bytes):
    """Where a matrix product's name is an event's name (not a value elsewhere in its args)."""
    for match in _QUOTED.finditer(data):
        hit = match.start()
        if _NAME_KEY.search(data, max(0, hit - 8), hit):
            yield hit


def product_flops(name: str, dims: list) -> int | None:
    """A matrix product op's FLOPs from its Input Dims (2·M·N·K, times the batch for bmm):
    aten::addmm [bias, [M, K], [K, N], …], aten::mm [[M, K], [K, N]], aten::bmm [[B, M, K],
    [B, K, N]], aten::baddbmm [bias, [B, M, K], [B, K, N], …]; None where the shapes are not so."""
    at = 1 if name in ("aten::addmm", "aten::baddbmm") else 0
    if len(dims) < at + 2:
        return None
    left, right = dims[at], dims[at + 1]
    if not (isinstance(left, list) and isinstance(right, list) and len(left) == len(right) in (2, 3)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in left + right)):
        return None
    if left[-1] != right[-2] or (len(left) == 3 and left[0] != right[0]):
        return None
    batch = left[0] if len(left) == 3 else 1
    return 2 * batch * left[-2] * left[-1] * right[-1]


def _product(text: bytes) -> tuple[float, int] | None:
    try:
        raw = _DECODE_SHAPES(text)
    except msgspec.DecodeError:
        return None
    if raw.ph != "X" or raw.name not in PRODUCTS or raw.ts is None or raw.args is None \
            or not isinstance(raw.args.dims, list):
        return None
    flops = product_flops(raw.name, raw.args.dims)
    return None if flops is None or flops > _MAX_FLOPS else (float(raw.ts), flops)


def _object_around(data: bytes, hit: int) -> tuple[int | None, int | None]:
    """The bounds of the innermost JSON object around `hit`: an op's event nests only its args.
    Found by jumping from brace to brace (a byte-by-byte walk took 85 % of a run's memory read)."""
    lo, hi = max(0, hit - _REACH + 1), min(len(data), hit + _REACH)
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
