"""Decodes one chunk of a torch trace's events into plain columns: the part of reading that runs in parallel."""
from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, field

import msgspec

from gapscope.analysis.events.columns import NONE
from gapscope.analysis.events.event import ANNOTATION, HOST_OP, KERNEL, MEMCPY, MEMSET, OTHER, RUNTIME, STEP
from gapscope.analysis.readers import lenient_decode, torch_records, validate


class _Args(msgspec.Struct, gc=False):
    # Only the fields an analyzer needs: decoding skips every other key without building it.
    # Each key of an event's args is looked up among these fields, and a real trace's args hold
    # many keys no analyzer reads: each field costs the decode about 1 %, so those only some
    # events need are in the kinds below, decoded where a chunk holds such events.
    correlation: int | None = None
    nbytes: int | None = msgspec.field(default=None, name="bytes")  # gpu_memcpy / gpu_memset
    # The autograd sequence number that links a backward node to the forward op that made it
    # (per-layer backward time).
    sequence: int | float | str | None = msgspec.field(default=None, name="Sequence number")
    # ROCm (roctracer) puts a copy's size on its runtime call (hipMemcpyAsync, "size": "4096"),
    # not on the device copy, which has no bytes.
    size: int | float | str | None = None
    # A `gapscope trace` export: a step's number, and a process's name in its "M" event.
    step_num: int | float | str | None = None
    name: str | int | float | None = None


class _CommArgs(_Args, gc=False):
    # What a collective moved, as record_param_comms and NCCL kernels say it.
    collective: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: int | float | str | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: int | float | str | None = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | None = None
    group_size: int | float | str | None = msgspec.field(default=None, name="Group size")
    finished: bool | int | str | None = None  # false: the profiler stopped before its end


class _MemoryArgs(_CommArgs, gc=False):
    # A `[memory]` instant's (profile_memory): six more keys cost every event's decode some
    # 15 %, so only the chunks of a trace that holds such instants are decoded with these.
    memory_bytes: int | float | None = msgspec.field(default=None, name="Bytes")
    allocated: int | float | None = msgspec.field(default=None, name="Total Allocated")
    reserved: int | float | None = msgspec.field(default=None, name="Total Reserved")
    device_type: int | None = msgspec.field(default=None, name="Device Type")
    device_id: int | None = msgspec.field(default=None, name="Device Id")
    addr: int | None = msgspec.field(default=None, name="Addr")


class _ShapedArgs(_MemoryArgs, gc=False):
    # A gloo range says its size only in its inputs' types and dims (with record_shapes).
    # Every op of such a trace carries them, and keeping them raw costs a third of the
    # decode, so only the chunks that hold a gloo range are decoded with these.
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")


class RawEvent(msgspec.Struct, gc=False):
    # gc=False: millions of these live at once; tracking them made the collector run for
    # about half of the decode time. None marks a missing ts/dur (counted, not read as 0).
    # In the order Kineto writes the keys: the decoder looks for the next field first (7 %).
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: float | None = None
    dur: float | None = None
    args: _Args | None = None


class CommRawEvent(RawEvent, gc=False):
    args: _CommArgs | None = None


class MemoryRawEvent(RawEvent, gc=False):
    args: _MemoryArgs | None = None


class ShapedRawEvent(RawEvent, gc=False):
    args: _ShapedArgs | None = None


# The event types by what a chunk needs decoded, each a superset of the one before: the usual
# fields; a collective's too; a `[memory]` instant's too; a gloo range's input shapes too.
PLAIN, COMM, MEMORY, SHAPED = KINDS = (RawEvent, CommRawEvent, MemoryRawEvent, ShapedRawEvent)  # by number: chunk_pool's
# Lax (strict=False): a numeric string where a number belongs is read as that number in the
# decoder itself (roctracer's "bytes": "128"), as fast as a strict decode; a value that does
# not fit even so raises, and that chunk is read by lenient_decode, field by field.
_DECODERS = {kind: msgspec.json.Decoder(list[kind], strict=False) for kind in KINDS}
GLOO_PREFIX = "gloo:"  # a gloo range's name: its shapes say its size
# torch 1.8-1.10 (Kineto's first schema) wrote Kernel, Memcpy, Memset, Operator and Runtime
# for today's kernel, gpu_memcpy, gpu_memset, cpu_op and cuda_runtime (its Trace is the
# whole session's range, read as other, as today's).
# Other accelerators: MTIA's device work is mtia_ccp_events, its calls mtia_runtime (and XPU's,
# PrivateUse1's: xpu_runtime, privateuse1_runtime); any `*_runtime`/`*_driver` is a runtime call.
DEVICE_CATEGORIES = {"kernel": KERNEL, "gpu_memcpy": MEMCPY, "gpu_memset": MEMSET,
                     "gpu_user_annotation": ANNOTATION, "mtia_ccp_events": KERNEL,
                     "Kernel": KERNEL, "Memcpy": MEMCPY, "Memset": MEMSET}
_HOST_CATEGORIES = {"cpu_op": HOST_OP, "user_annotation": ANNOTATION,
                    "cuda_runtime": RUNTIME, "cuda_driver": RUNTIME,
                    "Operator": HOST_OP, "Runtime": RUNTIME}
_RUNTIME_SUFFIXES = ("_runtime", "_driver")
# ROCm traces use the same categories (Kineto's roctracer logger writes cuda_runtime for the HIP
# calls, kernel and gpu_memcpy for the device side); only the names differ (hipLaunchKernel).
# `gapscope trace` writes the neutral kinds as categories: read back as what they were. Its
# annotations are on the device where their process is a "device" one.
_EXPORTED_DEVICE = {"memcpy": MEMCPY, "memset": MEMSET}
_EXPORTED_HOST = {"host_op": HOST_OP, "annotation": ANNOTATION, "runtime": RUNTIME, "step": STEP}
# The export's own steps, phases and layers: derived from the events, so derived again, never read.
_EXPORT_VIEWS = ("gapscope.step", "gapscope.phase", "gapscope.layer")
# The kinds a step range comes as: an annotation today, an op (Operator) in the old schema.
STEP_KINDS = (ANNOTATION, HOST_OP)
# What a track's events need beyond their columns, decided once per track: a host event may be
# a step range (by its name), a device one carries bytes, a runtime call a ROCm copy's size, an
# exported step track holds steps; the export's own views are skipped.
ROLE_HOST, ROLE_DEVICE, ROLE_RUNTIME, ROLE_STEPS, ROLE_SKIP = range(5)
# Ranges torch itself emits once per step; gapscope's own step ranges take the same role.
STEP_PREFIXES = ("ProfilerStep#", "gapscope/step#")


def describe(key: tuple, device_pids: set) -> tuple:
    """What a track of (cat, pid, tid) holds: (kind, track name, role). `device_pids`: the
    processes an export names "device ...", whose annotations ran on the device."""
    cat, pid, tid = key
    if cat in _EXPORT_VIEWS:
        return None, None, ROLE_SKIP
    device = cat in DEVICE_CATEGORIES or cat in _EXPORTED_DEVICE or (
        cat == "annotation" and pid in device_pids)
    kind = (DEVICE_CATEGORIES.get(cat) or _EXPORTED_DEVICE.get(cat) or _HOST_CATEGORIES.get(cat)
            or _EXPORTED_HOST.get(cat) or (RUNTIME if cat.endswith(_RUNTIME_SUFFIXES) else OTHER))
    track = f"{'device' if device else 'host'}/{pid}/{tid}"
    role = (ROLE_DEVICE if device else ROLE_STEPS if kind == STEP else
            ROLE_RUNTIME if kind == RUNTIME else ROLE_HOST)
    return kind, track, role


# Events whose args say what a collective moved: gloo's ranges and the c10d dispatcher ops on
# the CPU, NCCL's kernels and host ranges on the GPU, and record_param_comms for either.
_COMM_PREFIXES = ("gloo:", "nccl:", "hccl:", "c10d::", "record_param_comms")


@dataclass
class ChunkColumns:
    """A chunk's complete events as columns, with ids local to the chunk (names and tracks in
    order of first appearance): what crosses from a worker process, a few arrays and dicts.
    Which events are steps, copies or runtime calls is decided by the reader, which knows the
    whole file's tracks; the chunk only keeps what those decisions need."""

    kind: type = RawEvent  # the event type decoded with (KINDS)
    decoded: int = 0  # events decoded, complete or not (the reader's budget counts them)
    start_us: array = field(default_factory=lambda: array("d"))
    dur_us: array = field(default_factory=lambda: array("d"))
    name: array = field(default_factory=lambda: array("i"))
    track: array = field(default_factory=lambda: array("i"))
    correlation: array = field(default_factory=lambda: array("q"))
    names: dict[str, int] = field(default_factory=dict)
    wanted: dict[int, int] = field(default_factory=dict)  # name id -> what its events keep
    tracks: dict[tuple, int] = field(default_factory=dict)  # (cat, pid, tid) -> local id
    track_first_rows: list[int] = field(default_factory=list)  # by local id
    track_wants: list[int] = field(default_factory=list)  # by local id: what its events keep
    sequences: dict[int, object] = field(default_factory=dict)  # row -> "Sequence number"
    nbytes: dict[int, int] = field(default_factory=dict)  # row -> the event's "bytes"
    sizes: dict[int, object] = field(default_factory=dict)  # row -> its "size" (ROCm runtime calls)
    step_nums: dict[int, object] = field(default_factory=dict)  # row -> its "step_num"
    comm: dict[int, dict] = field(default_factory=dict)  # row -> what a collective moved
    processes: list[tuple] = field(default_factory=list)  # (pid, name) of process_name events
    memory_events: int = 0  # `[memory]` instants (profile_memory) seen
    # Those decoded with MEMORY: (ts, bytes, allocated, reserved, device type, device id, addr,
    # pid, tid), for readers.torch_records.memory_events.
    memory: list[tuple] = field(default_factory=list)
    # Matrix products' starts (µs) and FLOPs, from their Input Dims (torch_records; record_shapes).
    product_start_us: array = field(default_factory=lambda: array("d"))
    product_flops: array = field(default_factory=lambda: array("q"))
    dropped: Counter = field(default_factory=Counter)
    dropped_fields: Counter = field(default_factory=Counter)


def decode_chunk(data, kind: type = PLAIN, products: bool = True) -> ChunkColumns:
    """A JSON array of events ("[" ... "]") as columns; a value of the wrong type is read
    leniently (coerced or left out, and counted); DecodeError where the bytes are no array.
    `kind`: the fields decoded (KINDS); a chunk that turns out to need more (a collective, a
    `[memory]` instant, a gloo range) is decoded again with them, and says so in its `kind`:
    the reader asks for that kind from then on (but SHAPED), so that a trace of them is
    decoded once. `products`: matrix products' FLOPs are looked for too (torch_records)."""
    chunk = _decode(data, kind)
    needed = _needed(chunk)
    if KINDS.index(needed) > KINDS.index(kind):
        chunk = _decode(data, needed)
    if products and torch_records.holds_products(chunk.names):
        chunk.product_start_us, chunk.product_flops = torch_records.product_flops_in(data)
    return chunk


def _needed(chunk: ChunkColumns) -> type:
    if any(name.startswith(GLOO_PREFIX) for name in chunk.names):
        return SHAPED
    if chunk.memory_events:
        return MEMORY
    if any(flags & _COMM for flags in chunk.wanted.values()):
        return COMM
    return PLAIN


def _decode(data, kind: type) -> ChunkColumns:
    chunk = ChunkColumns(kind=kind)
    try:
        raws = _DECODERS[kind].decode(data)
    except msgspec.ValidationError as exc:
        # Valid JSON with a value of the wrong type that no coercion fits (checked only now,
        # so the usual decode pays nothing for it), or a cut inside a string.
        try:
            raws = lenient_decode.decode_events(data, kind, chunk.dropped_fields, chunk.dropped)
        except msgspec.DecodeError:
            raise exc from None
    add_events(chunk, raws)
    return chunk


def add_events(chunk: ChunkColumns, raws: list[RawEvent]) -> None:
    """Complete events that pass the time checks become rows of `chunk`; the others are counted
    (process names and memory instants kept)."""
    chunk.decoded += len(raws)
    names, tracks, dropped, first_rows = chunk.names, chunk.tracks, chunk.dropped, chunk.track_first_rows
    # Bound appends: this loop runs once per event of the trace (millions). (Taking each field
    # in a C loop of its own, map and compress, cost more: some 15 passes over the events.)
    add_start, add_dur = chunk.start_us.append, chunk.dur_us.append
    add_name, add_track, add_correlation = chunk.name.append, chunk.track.append, chunk.correlation.append
    sequences, wanted = chunk.sequences, chunk.wanted
    max_ts, max_dur = validate.MAX_TS_US, validate.MAX_DUR_US
    last_key, wants = None, 0
    row = len(chunk.start_us)
    for raw in raws:
        if raw.ph != "X":
            _add_other(chunk, raw)
            continue
        ts, dur = raw.ts, raw.dur
        # One chained comparison covers the usual case; None and NaN fail it too.
        if ts is None or dur is None or not (0.0 <= ts <= max_ts and 0.0 <= dur <= max_dur):
            dropped[validate.time_problem(ts, dur)] += 1
            continue
        name = raw.name
        name_id = names.get(name)
        if name_id is None:
            name_id = names[name] = len(names)
            _note_name(chunk, name, name_id)
        key = (raw.cat, raw.pid, raw.tid)
        if key != last_key:  # runs of events on one track: most events skip the lookup
            track_id = tracks.get(key)
            if track_id is None:
                track_id = tracks[key] = len(tracks)
                first_rows.append(row)
                chunk.track_wants.append(_wants(key))
            wants = chunk.track_wants[track_id]
            last_key = key
        args = raw.args
        if args is None:
            add_correlation(NONE)
        else:
            correlation = args.correlation
            try:
                add_correlation(NONE if correlation is None else correlation)
            except OverflowError:  # an id past 64 bits is garbage: no link
                add_correlation(NONE)
            if args.sequence is not None:
                sequences[row] = args.sequence
            # A few tracks and names need more of their args (bytes, sizes, step numbers, what a
            # collective moved): one test of a per-track and a per-name flag finds them.
            if wants or name_id in wanted:
                _keep_args(chunk, row, args, wants | wanted.get(name_id, 0))
        add_start(ts)
        add_dur(dur)
        add_name(name_id)
        add_track(track_id)
        row += 1


def _add_other(chunk: ChunkColumns, raw: RawEvent) -> None:
    """What is kept of an event that is no complete one: a process's name, a memory instant."""
    if raw.ph == "M" and raw.name == "process_name":
        chunk.processes.append((raw.pid, raw.args.name if raw.args is not None else None))
    elif raw.ph == "i" and raw.name == "[memory]":
        chunk.memory_events += 1
        args = raw.args
        if isinstance(args, _MemoryArgs) and raw.ts is not None and args.memory_bytes is not None:
            chunk.memory.append((raw.ts, args.memory_bytes, args.allocated, args.reserved,
                                 args.device_type, args.device_id, args.addr, raw.pid, raw.tid))


# What a track's or a name's events keep of their args, beyond correlation and sequence.
_BYTES, _SIZE, _STEP_NUM, _COMM = 1, 2, 4, 8


def _wants(key: tuple) -> int:
    """A track's flags: a device event's bytes (an export's annotations may be the device's,
    which only its process names say), a runtime call's size, an exported step's number."""
    cat = key[0]
    _, _, role = describe(key, ())
    return ((_BYTES if role == ROLE_DEVICE or cat == "annotation" else 0)
            | (_SIZE if role == ROLE_RUNTIME else 0) | (_STEP_NUM if role == ROLE_STEPS else 0))


def _note_name(chunk: ChunkColumns, name: str, name_id: int) -> None:
    """A name's flags, looked at once per name: a step range keeps its number, a collective
    what it moved."""
    flags = (_STEP_NUM if name.startswith(STEP_PREFIXES) else 0) | (_COMM if is_comm_name(name) else 0)
    if flags:
        chunk.wanted[name_id] = flags


def _keep_args(chunk: ChunkColumns, row: int, args: _Args, flags: int) -> None:
    if flags & _BYTES and args.nbytes is not None:
        chunk.nbytes[row] = args.nbytes
    if flags & _SIZE and args.size is not None:
        chunk.sizes[row] = args.size
    if flags & _STEP_NUM and args.step_num is not None:
        chunk.step_nums[row] = args.step_num
    if flags & _COMM and isinstance(args, _CommArgs):  # else the chunk is decoded again, as COMM
        kept = _comm_stats(args)
        if kept:
            chunk.comm[row] = kept


def is_comm_name(name: str) -> bool:
    return name.startswith(_COMM_PREFIXES) or "nccl" in name[:16].lower()


def _comm_stats(args: _Args) -> dict:
    """The args of one comm event that say what it moved; garbage values read as absent."""
    kept = {}
    for key in ("collective", "dtype"):
        value = getattr(args, key)
        if isinstance(value, str):
            kept[key] = value
    for key in ("in_nelems", "out_nelems", "group_size"):
        value = count(getattr(args, key))
        if value is not None:
            kept[key] = value
    for key in ("input_type", "input_dims"):
        raw = getattr(args, key, None)
        if raw is not None and len(raw):
            try:
                kept[key] = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                pass
    if args.finished is False:
        kept["finished"] = False
    return kept


def count(value) -> int | None:
    """A non-negative whole number, whether written as an int, a whole float or digits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None
