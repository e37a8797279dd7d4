"""Reads torch.profiler Chrome-trace JSON (.pt.trace.json[.gz]) into the neutral Trace."""
from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import msgspec

from profilers.errors import GapscopeInputError, TraceFormatError
from analysis.events.columns import NONE, ColumnsBuilder
from analysis.events.gc_pause import collector_paused
from analysis.readers import lenient_decode, safe_files, validate
from profilers.phases import LAYER_RANGE_PREFIX
from analysis.events.trace import (ANNOTATION, HOST_OP, KERNEL, MEMCPY, MEMSET, OTHER, RUNTIME, STEP,
                            Event, Trace)


class _Args(msgspec.Struct, gc=False):
    # Only the fields an analyzer needs: decoding skips every other key without building it.
    correlation: int | None = None
    nbytes: int | None = msgspec.field(default=None, name="bytes")  # gpu_memcpy / gpu_memset
    # What a collective moved, as record_param_comms and NCCL kernels say it: kept for comm
    # events only (other events lack these keys, which costs their decode nothing).
    collective: str | None = msgspec.field(default=None, name="Collective name")
    in_nelems: int | float | str | None = msgspec.field(default=None, name="In msg nelems")
    out_nelems: int | float | str | None = msgspec.field(default=None, name="Out msg nelems")
    dtype: str | None = None
    group_size: int | float | str | None = msgspec.field(default=None, name="Group size")
    finished: bool | int | str | None = None  # false: the profiler stopped before its end
    # ROCm (roctracer) puts a copy's size on its runtime call (hipMemcpyAsync, "size": "4096"),
    # not on the device copy, which has no bytes.
    size: int | float | str | None = None
    # A `gapscope trace` export: a step's number, and a process's name in its "M" event.
    step_num: int | float | str | None = None
    name: str | int | float | None = None
    # The autograd sequence number that links a backward node to the forward op that made it
    # (per-layer backward time); kept once the trace has shown a layer range.
    sequence: int | float | str | None = msgspec.field(default=None, name="Sequence number")


class _ShapedArgs(_Args, gc=False):
    # A gloo range says its size only in its inputs' types and dims (with record_shapes).
    # Every op of such a trace carries them, and keeping them raw costs a third of the
    # decode, so only the chunks that hold a gloo range are decoded with these.
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input type")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(), name="Input Dims")


class _RawEvent(msgspec.Struct, gc=False):
    # gc=False: millions of these live at once; tracking them made the collector run for
    # about half of the decode time. None marks a missing ts/dur (counted, not read as 0).
    ph: str = ""
    name: str = ""
    cat: str = ""
    ts: float | None = None
    dur: float | None = None
    pid: int | str = 0
    tid: int | str = 0
    args: _Args | None = None


class _ShapedRawEvent(_RawEvent, gc=False):
    args: _ShapedArgs | None = None


class _RawTrace(msgspec.Struct):
    traceEvents: list[_RawEvent]
    deviceProperties: list[dict] = []
    baseTimeNanoseconds: int | None = None
    distributedInfo: msgspec.Raw = msgspec.Raw()  # backend, rank, world_size of a DDP rank


class _ShapedRawTrace(_RawTrace):
    traceEvents: list[_ShapedRawEvent]


class _Header(msgspec.Struct):
    # What precedes traceEvents, decoded on its own; traceEvents' value is left undecoded.
    traceEvents: msgspec.Raw
    deviceProperties: list[dict] = []
    baseTimeNanoseconds: int | None = None
    distributedInfo: msgspec.Raw = msgspec.Raw()


# Lax (strict=False): a numeric string where a number belongs is read as that number in the
# decoder itself (roctracer's "bytes": "128"), as fast as a strict decode; a value that does
# not fit even so raises, and that chunk is read by lenient_decode, field by field.
_DECODER = msgspec.json.Decoder(_RawTrace, strict=False)
_HEADER_DECODER = msgspec.json.Decoder(_Header, strict=False)
_EVENTS_DECODER = msgspec.json.Decoder(list[_RawEvent], strict=False)
_SHAPED_DECODER = msgspec.json.Decoder(_ShapedRawTrace, strict=False)
_SHAPED_EVENTS_DECODER = msgspec.json.Decoder(list[_ShapedRawEvent], strict=False)
_GLOO = b'"gloo:'  # in a chunk: it holds a gloo range, whose shapes say its size
# Searched in every 16 MB chunk: re finds it in 5 ms where bytearray.find takes 8 (JSON is full
# of the '"' and ':' that find's skip table keys on).
_GLOO_SEARCH = re.compile(re.escape(_GLOO)).search

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
# A process Kineto names after a device ("GPU 0", "MTIA 1", "XPU 0", a `gapscope trace` export's
# "device 0"): whatever the categories of its events, they ran on the device.
_DEVICE_PROCESS = re.compile(r"(?:device|gpu|mtia|xpu|hpu|npu|tpu|ipu|accelerator)\b", re.IGNORECASE)
# ROCm traces use the same categories (Kineto's roctracer logger writes cuda_runtime for the HIP
# calls, kernel and gpu_memcpy for the device side); only the names differ (hipLaunchKernel).
# `gapscope trace` writes the neutral kinds as categories: read back as what they were. Its
# annotations are on the device where their process is a "device" one.
_EXPORTED_DEVICE = {"memcpy": MEMCPY, "memset": MEMSET}
_EXPORTED_HOST = {"host_op": HOST_OP, "annotation": ANNOTATION, "runtime": RUNTIME, "step": STEP}
# The export's own steps and phases: derived from the events, so derived again, never read.
_EXPORT_VIEWS = ("gapscope.step", "gapscope.phase")
# The kinds a step range comes as: an annotation today, an op (Operator) in the old schema.
_STEP_KINDS = (ANNOTATION, HOST_OP)
# What a track's events need beyond their columns, decided once per track: a host event may be
# a step range (by its name), a device one carries bytes, a runtime call a ROCm copy's size, an
# exported step track holds steps; the export's own views are skipped.
_HOST, _DEVICE, _RUNTIME, _STEPS, _SKIP = range(5)
# Ranges torch itself emits once per step; gapscope's own step ranges take the same role.
_STEP_PREFIXES = ("ProfilerStep#", "gapscope/step#")

# The file is decoded a chunk of whole events at a time, so memory holds one chunk of raw
# events plus the columns kept, never the whole text or every raw event at once.
_BLOCK = 4 << 20
_CHUNK = 16 << 20
_MAX_HEADER = 64 << 20     # keys before traceEvents: deviceProperties, distributedInfo, ...
_MAX_EVENT = 256 << 20     # no single event is this large: a file that says so is garbage
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# Between two events: "}", a comma, "{" (whitespace allowed). Inside a string or a nested
# object this may match too; decoding the chunk then fails and the previous match is tried.
_BETWEEN = re.compile(rb"\}\s*,\s*\{")
_RETRIES = 8
_TAIL = 64 << 10  # where the last cuts are looked for first: some hundred events' worth
# Events read cost memory (~150 bytes each, kept as columns) that a small gzip of tiny events
# can multiply: 8.7 MB inflated to 20 M events took 3 GB. Real traces hold one event per
# 40-400 bytes of file even gzipped; a file may hold one per BYTES_PER_EVENT, and at least
# MIN_EVENTS, unless MAX_EVENTS_ENV says how many.
BYTES_PER_EVENT = 4
MIN_EVENTS = 2_000_000
MAX_EVENTS_ENV = "GAPSCOPE_MAX_TRACE_EVENTS"


def read_torch_trace(path: str | Path) -> Trace:
    path = Path(path)
    reader = _Reader(path, event_budget(path))
    try:
        with collector_paused(), safe_files.open_stream(path) as stream, \
                safe_files.ReadAhead(stream, path, _BLOCK) as blocks:
            header = reader.read(blocks)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # ValidationError is a DecodeError
        raise TraceFormatError(f"{path}: not a torch profiler trace ({_short(exc)})") from None
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None

    reader.sizes_from_runtime()
    reader.device_tracks()
    columns = reader.columns.build()
    dropped = reader.dropped
    if not len(columns) and not dropped and not reader.dropped_fields:
        raise TraceFormatError(f"{path}: torch profiler trace holds no complete events")
    validate.refuse_mostly_garbage(path, len(columns), dropped)
    steps = [step for _, step in reader.steps]
    kept, step_problems = validate.check_steps(path, steps, dropped)
    if len(kept) < len(steps):
        kept_ids = {id(step) for step in kept}
        columns = columns.without(row for row, step in reader.steps if id(step) not in kept_ids)
    metadata = {"device_properties": header.deviceProperties,
                "base_time_ns": header.baseTimeNanoseconds}
    distributed = _distributed_info(header.distributedInfo)
    if distributed is not None:
        metadata["distributed_info"] = distributed
    if dropped:
        metadata["dropped_events"] = dict(dropped)
    if reader.dropped_fields:
        metadata["dropped_fields"] = dict(reader.dropped_fields)
    if step_problems:
        metadata["step_problems"] = step_problems
    return Trace("torch", str(path), None, metadata, columns=columns)


def event_budget(path: Path) -> int:
    """How many events `path` may hold: MAX_EVENTS_ENV if set, else by its size on disk."""
    raw = os.environ.get(MAX_EVENTS_ENV, "").strip()
    if raw:
        if not (raw.isascii() and raw.isdigit() and 0 < len(raw) <= 12 and int(raw) > 0):
            raise GapscopeInputError(f"{MAX_EVENTS_ENV}={raw[:40]!r}: give a whole number of events")
        return int(raw)
    try:
        size = path.stat().st_size
    except (OSError, ValueError):  # open_stream says why the file cannot be read
        size = 0
    return max(MIN_EVENTS, size // BYTES_PER_EVENT)


class _Reader:
    """Splits the traceEvents array into chunks of whole events, decodes each chunk and keeps
    the complete events as columns (names and tracks as ids, no object per event)."""

    def __init__(self, path: Path, max_events: int):
        self.path = path
        self.max_events, self._decoded = max_events, 0
        self.columns = ColumnsBuilder()
        self.dropped: Counter = Counter()
        self.dropped_fields: Counter = Counter()  # JSON path -> values of a wrong type left out
        self.steps: list[tuple[int, Event]] = []  # (row, event) of each step, for the step checks
        self._tracks: dict[tuple, tuple] = {}
        self._comm_names: set[int] = set()  # name ids of collectives, whose args are kept
        self._step_names: set[int] = set()  # name ids of step ranges (ProfilerStep#N)
        self._keep_sequences = False  # set at the first layer range: other traces keep none
        self._device_pids: set = set()  # processes an export names "device ..."
        self._named_devices: set = set()  # processes named after a device (GPU 0, MTIA 1)
        self._copy_sizes: dict[int, int] = {}  # correlation -> bytes, from ROCm runtime calls
        self._sizeless: list[tuple[int, int]] = []  # (row, correlation) of copies without bytes

    def read(self, blocks: safe_files.ReadAhead):
        buf = _Window(_CHUNK + _BLOCK)
        eof, searched, head_error = False, 0, None
        while True:
            match = _EVENTS_KEY.search(buf.data, searched, buf.end)
            if match is None:
                if len(buf) > _MAX_HEADER:
                    if head_error is not None:
                        raise head_error
                    raise TraceFormatError(f"{self.path}: no traceEvents array in the first "
                                           f"{_MAX_HEADER >> 20} MB: not a torch profiler trace")
                if eof:
                    # No array where torch writes it: decode what there is, for the decoder's
                    # own word on what is wrong (or a valid but unusual layout).
                    whole = self._decode_trace(buf.contents())
                    self._keep(whole.traceEvents)
                    return whole
                searched = max(0, len(buf) - 64)  # the key may straddle two blocks
                eof = self._fill(blocks, buf, len(buf) + _BLOCK)
                continue
            # The keys before the array, closed as if traceEvents were empty: a decode failure
            # means the match was not the top-level key (one nested in an earlier value) or
            # the head is not JSON; the next match is tried.
            try:
                head = self._decode_header(bytes(buf.data[:match.start()]) + b'"traceEvents": []}')
                break
            except msgspec.DecodeError as exc:
                head_error, searched = exc, match.end()
        buf.keep_from(match.end() - 1)  # the buffer now starts with the array's "["
        while not eof:
            # A buffer left whole by the last decode (one event larger than a chunk) grows.
            eof = self._fill(blocks, buf, max(_CHUNK, len(buf) + 1))
            if not eof:
                self._decode_chunk(buf)
        # The rest: the last events, "]", and the keys after the array.
        tail = self._decode_trace(b'{"traceEvents":' + buf.contents())
        self._keep(tail.traceEvents)
        if not head.deviceProperties:
            head.deviceProperties = tail.deviceProperties
        if head.baseTimeNanoseconds is None:
            head.baseTimeNanoseconds = tail.baseTimeNanoseconds
        if not len(head.distributedInfo):
            head.distributedInfo = tail.distributedInfo
        return head

    def _decode_trace(self, contents: bytes) -> _RawTrace:
        """A whole trace object (or the array's tail and the keys after it): typed, and leniently
        where a field has the wrong type; the strict decoder's error where neither reads it."""
        shaped = _GLOO in contents
        try:
            return (_SHAPED_DECODER if shaped else _DECODER).decode(contents)
        except msgspec.ValidationError as exc:
            try:
                return lenient_decode.decode_trace(contents, _ShapedRawTrace if shaped else _RawTrace,
                                                   self.dropped_fields, self.dropped)
            except msgspec.DecodeError:
                raise exc from None

    def _decode_header(self, contents: bytes) -> _Header:
        try:
            return _HEADER_DECODER.decode(contents)
        except msgspec.ValidationError as exc:
            try:
                value = msgspec.json.decode(contents)
            except msgspec.DecodeError:
                raise exc from None
            if not isinstance(value, dict):
                raise exc from None
            value["traceEvents"] = msgspec.Raw(b"[]")
            return lenient_decode.to_struct(value, _Header, self.dropped_fields)

    def _fill(self, blocks: safe_files.ReadAhead, buf: "_Window", size: int) -> bool:
        """Read until `buf` holds `size` bytes; True at the end of the stream."""
        while len(buf) < size:
            block = blocks.read()
            if not block:
                return True
            buf.add(block)
        return False

    def _decode_chunk(self, buf: "_Window") -> None:
        """Decode the whole events at the front of `buf` ("[" + events + ...) and remove them,
        leaving "[" + the rest; a buffer with no complete event is left to grow."""
        data, end = buf.data, buf.end
        candidates = []
        start = max(0, end - _TAIL)
        while True:
            candidates = [m.start() for m in _BETWEEN.finditer(data, start, end)]
            if candidates or start == 0:
                break
            start = 0  # one huge event: look through the whole buffer
        error = None
        for close in reversed(candidates[-_RETRIES:]):
            # Decode "[" + events + "]" in place: the byte after the event's "}" is set to "]"
            # for the decode and put back after, which saves copying the chunk.
            saved = data[close + 1]
            data[close + 1] = 0x5D
            try:
                with memoryview(data) as view, view[:close + 2] as events:
                    shaped = _GLOO_SEARCH(data, 0, close + 2) is not None
                    try:
                        raws = (_SHAPED_EVENTS_DECODER if shaped else _EVENTS_DECODER).decode(events)
                    except msgspec.ValidationError as exc:
                        # Valid JSON with a value of the wrong type that no coercion fits
                        # (checked only now, so the usual decode pays nothing for it), or a
                        # cut inside a string.
                        try:
                            raws = lenient_decode.decode_events(
                                events, _ShapedRawEvent if shaped else _RawEvent,
                                self.dropped_fields, self.dropped)
                        except msgspec.DecodeError:
                            error = exc
                            continue
                    except msgspec.DecodeError as exc:
                        error = exc
                        continue
                    # The raw args (shapes) refer into the chunk: used and dropped before
                    # its view is released, or the buffer could not be cut down after.
                    self._keep(raws)
                    del raws
            finally:
                data[close + 1] = saved
            next_event = data.index(b"{", close + 1, end)
            data[next_event - 1] = 0x5B  # a comma or a blank between events becomes the "["
            buf.keep_from(next_event - 1)
            return
        # No cut decoded: the matches were all inside one event still being read (left to
        # grow), or the JSON is broken, which shows once the buffer is past any real event.
        if len(buf) > _MAX_EVENT:
            if error is not None:
                raise error
            raise TraceFormatError(f"{self.path}: an event of over {_MAX_EVENT >> 20} MB: "
                                   "not a torch profiler trace")

    def _keep(self, raws: list[_RawEvent]) -> None:
        """Complete events that pass the time checks become rows; the others are counted."""
        self._decoded += len(raws)
        if self._decoded > self.max_events:
            raise TraceFormatError(
                f"{self.path}: over {self.max_events:,} events, more than a file of its size "
                f"holds (a gzip of tiny events fills memory): refusing; set "
                f"{MAX_EVENTS_ENV}=N to read up to N events")
        columns, tracks, dropped = self.columns, self._tracks, self.dropped
        names = columns.names
        # Bound appends: this loop runs once per event of the trace (millions).
        add_start, add_dur = columns.start_us.append, columns.dur_us.append
        add_where, add_name = columns.where.append, columns.name.append
        add_correlation = columns.correlation.append
        max_ts, max_dur = validate.MAX_TS_US, validate.MAX_DUR_US
        comm_names, step_names = self._comm_names, self._step_names
        keep_sequences = self._keep_sequences  # a local: tested once per host event
        last_key, where = None, None
        for raw in raws:
            if raw.ph != "X":
                if raw.ph == "M" and raw.name == "process_name":
                    self._process_name(raw)
                continue
            ts, dur = raw.ts, raw.dur
            # One chained comparison covers the usual case; None and NaN fail it too.
            if ts is None or dur is None or not (0.0 <= ts <= max_ts and 0.0 <= dur <= max_dur):
                dropped[validate.time_problem(ts, dur)] += 1
                continue
            name = raw.name
            name_id = names.get(name)
            if name_id is None:
                # What a name is (a collective, a step range) is looked at once per name, not
                # once per event: the loop below tests ids in sets.
                name_id = columns.name_id(name)
                if is_comm_name(name):
                    comm_names.add(name_id)
                if name.startswith(_STEP_PREFIXES):
                    step_names.add(name_id)
                if not keep_sequences and is_layer_range(name):
                    keep_sequences = self._keep_sequences = True
            key = (raw.cat, raw.pid, raw.tid)
            if key != last_key:  # runs of events on one track: most events skip the lookup
                where = tracks.get(key)
                if where is None:
                    where = self._track(*key)
                last_key = key
            kind, track, where_id, role = where
            args = raw.args
            correlation = args.correlation if args is not None else None
            if name_id in comm_names and args is not None:
                kept = _comm_stats(args)
                if kept:
                    columns.stats[len(columns.start_us)] = kept
            # One test of the track's role (set once per track) picks the work an event needs.
            if role == _HOST:
                if name_id in step_names and kind in _STEP_KINDS:
                    where_id = self._step(raw, name, track, correlation)
                elif keep_sequences and args is not None and args.sequence is not None:
                    sequence = _count(args.sequence)
                    if sequence is not None:
                        columns.stats.setdefault(len(columns.start_us), {})[SEQUENCE] = sequence
            elif role == _DEVICE:
                if args is not None and args.nbytes is not None:
                    columns.nbytes[len(columns.start_us)] = args.nbytes
                elif kind == MEMCPY and correlation is not None:
                    self._sizeless.append((len(columns.start_us), correlation))
            elif role == _RUNTIME:
                if args is not None and args.size is not None and correlation is not None:
                    size = _count(args.size)
                    if size is not None:
                        self._copy_sizes[correlation] = size
            elif role == _STEPS:
                where_id = self._step(raw, name, track, correlation)
            else:  # _SKIP
                continue
            add_start(ts)
            add_dur(dur)
            add_where(where_id)
            add_name(name_id)
            if correlation is None:
                add_correlation(NONE)
            else:
                try:  # inline of ColumnsBuilder.add_correlation: one call less per GPU event
                    add_correlation(correlation)
                except OverflowError:  # an id past 64 bits is garbage: no link
                    add_correlation(NONE)

    def _step(self, raw: _RawEvent, name: str, track: str, correlation) -> int:
        """A step range: its number noted for the step checks; returns its where id."""
        columns, args = self.columns, raw.args
        number = args.step_num if args is not None and args.step_num is not None \
            else name.rpartition("#")[2]
        row, number = len(columns.start_us), validate.step_number(str(number))
        columns.step_nums[row] = number
        self.steps.append((row, Event(name, STEP, raw.ts, raw.dur, track, number, correlation)))
        return columns.where_id(STEP, track)

    def sizes_from_runtime(self) -> None:
        """Copies without bytes take them from their runtime call (ROCm), where it said them."""
        for row, correlation in self._sizeless:
            size = self._copy_sizes.get(correlation)
            if size is not None:
                self.columns.nbytes[row] = size

    def _process_name(self, raw: _RawEvent) -> None:
        name = raw.args.name if raw.args is not None else None
        if isinstance(name, str) and name.startswith("device "):
            self._device_pids.add(raw.pid)
        if isinstance(name, str) and _DEVICE_PROCESS.match(name):
            self._named_devices.add(raw.pid)

    def device_tracks(self) -> None:
        """Events of categories the reader does not know (another accelerator's) are the device's
        where their process is one: named after a device, or holding device events of known
        categories. Done once the whole file is read, as Kineto names its processes last."""
        wheres = self.columns.wheres
        device_pids = self._named_devices | {pid for (cat, pid, _), where in self._tracks.items()
                                             if where[3] == _DEVICE and cat in DEVICE_CATEGORIES}
        moved = {}
        for (cat, pid, tid), (kind, track, where_id, role) in self._tracks.items():
            if kind == OTHER and role == _HOST and pid in device_pids:
                lowered = cat.lower()
                kind = MEMCPY if "memcpy" in lowered else MEMSET if "memset" in lowered else KERNEL
                key = (kind, f"device/{pid}/{tid}")
                if key not in wheres and key not in moved.values():
                    moved[where_id] = key
        if moved:
            self.columns.wheres = {moved.get(i, key): i for key, i in wheres.items()}

    def _track(self, cat: str, pid, tid) -> tuple:
        if cat in _EXPORT_VIEWS:
            where = self._tracks[(cat, pid, tid)] = (None, None, None, _SKIP)
            return where
        device = cat in DEVICE_CATEGORIES or cat in _EXPORTED_DEVICE or (
            cat == "annotation" and pid in self._device_pids)
        kind = (DEVICE_CATEGORIES.get(cat) or _EXPORTED_DEVICE.get(cat) or _HOST_CATEGORIES.get(cat)
                or _EXPORTED_HOST.get(cat) or (RUNTIME if cat.endswith(_RUNTIME_SUFFIXES) else OTHER))
        track = f"{'device' if device else 'host'}/{pid}/{tid}"
        role = _DEVICE if device else _STEPS if kind == STEP else _RUNTIME if kind == RUNTIME else _HOST
        where = self._tracks[(cat, pid, tid)] = (kind, track, self.columns.where_id(kind, track), role)
        return where


class _Window:
    """The bytes read and not yet decoded, at the front of one bytearray that keeps its memory:
    a bytearray cut down after each chunk and grown again was reallocated, and its pages
    faulted in afresh, every chunk (a fifth of the read's time went to the kernel)."""

    def __init__(self, capacity: int):
        self.data = bytearray(capacity)
        self.end = 0

    def __len__(self) -> int:
        return self.end

    def add(self, block: bytes) -> None:
        end = self.end + len(block)
        if end > len(self.data):  # one event larger than a chunk: grow, by doubling
            self.data.extend(bytes(max(end, 2 * len(self.data)) - len(self.data)))
        self.data[self.end:end] = block
        self.end = end

    def keep_from(self, position: int) -> None:
        """Drop the bytes before `position`; the rest (a part of one chunk) moves to the front."""
        rest = self.data[position:self.end]
        self.data[:len(rest)] = rest
        self.end = len(rest)

    def contents(self) -> bytes:
        with memoryview(self.data) as view:
            return bytes(view[:self.end])


# Events whose args say what a collective moved: gloo's ranges and the c10d dispatcher ops on
# the CPU, NCCL's kernels and host ranges on the GPU, and record_param_comms for either.
_COMM_PREFIXES = ("gloo:", "nccl:", "hccl:", "c10d::", "record_param_comms")


# Layer ranges: gapscope's own (profilers.layer_ranges) and torch.profiler's with_modules.
LAYER_RANGE_PREFIXES = (LAYER_RANGE_PREFIX, "nn.Module: ")
SEQUENCE = "sequence"  # the Event.stats key of an autograd sequence number


def is_layer_range(name: str) -> bool:
    return name.startswith(LAYER_RANGE_PREFIXES)


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
        value = _count(getattr(args, key))
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


def _count(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


def _distributed_info(raw: msgspec.Raw) -> dict | None:
    """torch.profiler's distributedInfo (backend, rank, world_size, ...) when it is an object."""
    if not len(raw):
        return None
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


def _short(exc: Exception) -> str:
    """One line, however long the decoder's message (it may quote the offending input)."""
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."
