"""Reads torch.profiler Chrome-trace JSON (.pt.trace.json[.gz]) into the neutral Trace."""
from __future__ import annotations

import io
import os
import re
from array import array
from collections import Counter, deque
from pathlib import Path

import msgspec
import numpy as np

from gapscope.profilers.errors import GapscopeInputError, TraceFormatError
from gapscope.analysis.events.columns import ColumnsBuilder
from gapscope.analysis.events.gc_pause import collector_paused
from gapscope.analysis.events.phase_rules import BACKWARD_NODE, MODULE_RANGE_PREFIX
from gapscope.analysis.readers import chunk_pool, lenient_decode, safe_files, torch_records, trace_chunks, validate
from gapscope.analysis.readers.trace_chunks import (DEVICE_CATEGORIES, NONE, ROLE_DEVICE, ROLE_HOST, ROLE_RUNTIME,
                                           ROLE_SKIP, ROLE_STEPS, STEP_KINDS, STEP_PREFIXES, describe)
from gapscope.profilers.phases import LAYER_RANGE_PREFIX
from gapscope.analysis.events.trace import KERNEL, MEMCPY, MEMSET, OTHER, STEP, Event, Trace


class _RawTrace(msgspec.Struct):
    traceEvents: msgspec.Raw  # decoded by trace_chunks, as a chunk's events are
    deviceProperties: list[dict] = []
    baseTimeNanoseconds: int | None = None
    distributedInfo: msgspec.Raw = msgspec.Raw()  # backend, rank, world_size of a DDP rank


class _Header(msgspec.Struct):
    # What precedes traceEvents, decoded on its own; traceEvents' value is left undecoded.
    traceEvents: msgspec.Raw
    deviceProperties: list[dict] = []
    baseTimeNanoseconds: int | None = None
    distributedInfo: msgspec.Raw = msgspec.Raw()
    with_modules: msgspec.Raw = msgspec.Raw()  # torch.profiler's own flag, written as 1
    # Kineto writes the flags that are on beside its trace_id: with it and without these, the
    # trace holds no Input Dims, or no `nn.Module: …` ranges for their FLOPs to count in.
    record_shapes: msgspec.Raw = msgspec.Raw()
    trace_id: msgspec.Raw = msgspec.Raw()


# Lax, as trace_chunks' decoders: numeric strings read as numbers in the decoder itself.
_DECODER = msgspec.json.Decoder(_RawTrace, strict=False)
_HEADER_DECODER = msgspec.json.Decoder(_Header, strict=False)

# A process Kineto names after a device ("GPU 0", "MTIA 1", "XPU 0", a `gapscope trace` export's
# "device 0"): whatever the categories of its events, they ran on the device.
_DEVICE_PROCESS = re.compile(r"(?:device|gpu|mtia|xpu|hpu|npu|tpu|ipu|accelerator)\b", re.IGNORECASE)

# The file is decoded a chunk of whole events at a time, so memory holds one chunk of raw
# events plus the columns kept, never the whole text or every raw event at once.
_BLOCK = 4 << 20
_CHUNK = 4 << 20  # a worker holds one and its raw events: 16 MB made each ~120 MB of RSS, 4 MB ~55
_MAX_HEADER = 64 << 20     # keys before traceEvents: deviceProperties, distributedInfo, ...
_MAX_EVENT = 256 << 20     # no single event is this large: a file that says so is garbage
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# Between two events: "}", a comma, "{" (whitespace allowed). Inside a string or a nested
# object this may match too; decoding the chunk then fails and the previous match is tried.
_BETWEEN = re.compile(rb"\}\s*,\s*\{")
_RETRIES = 8
_TAIL = 64 << 10  # where the last cuts are looked for first: some hundred events' worth
# Bytes of events decoded in this process before the rest of the file goes to chunk_pool's
# workers: starting them (about 0.3 s) pays only past some hundred MB.
PARALLEL_AFTER = 64 << 20
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
            # A plain file's chunks are read by the workers themselves, at their offsets.
            header = reader.read(blocks, stream.fileno() if isinstance(stream, io.BufferedReader) else None)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # ValidationError is a DecodeError
        named = _other_format(path)
        if named:
            raise TraceFormatError(f"{path}: {named}, not a torch profiler trace: "
                                   f"{validate.OTHER_FORMAT_HINT}") from None
        raise TraceFormatError(f"{path}: not a torch profiler trace "
                               f"({_short(exc, reader.decoding_from)})") from None
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None

    # The analysis' peak comes next: the workers (~55 MB each, idle) stop, and the chunks'
    # freed objects' pages go back. (Kept, they cost the next big read its 0.3 s start only.)
    if reader.used_workers:
        chunk_pool.discard()
    chunk_pool.give_back_freed_memory()
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
                "base_time_ns": header.baseTimeNanoseconds,
                # Which event categories the file holds: a range profiler's say the device was
                # counted, not traced (measures.kernels.device_not_traced).
                "categories": sorted({key[0] for key in reader.tracks()})}
    if reader.memory_rows:  # decoded with the events: the memory figures read no second time
        metadata["memory_events"] = torch_records.memory_events(reader.memory_rows)
    if reader.product_flops:  # record_shapes: the matrix products' FLOPs, read in the same pass
        metadata[torch_records.FLOPS_KEY] = (np.frombuffer(reader.product_start_us, float),
                                   np.frombuffer(reader.product_flops, np.int64))
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


def _other_format(path: Path) -> str | None:
    """Another profiler's format the refused file is in, by its head (validate.other_format)."""
    try:
        return validate.other_format(safe_files.read_head(path, 4096))
    except (GapscopeInputError, OSError):
        return None


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
        self.decoding_from = 0  # where the bytes being decoded begin in the stream
        self.max_events, self._decoded = max_events, 0
        self.columns = ColumnsBuilder()
        self.dropped: Counter = Counter()
        self.dropped_fields: Counter = Counter()  # JSON path -> values of a wrong type left out
        self.steps: list[tuple[int, Event]] = []  # (row, event) of each step, for the step checks
        self._tracks: dict[tuple, tuple] = {}
        self._step_names: set[int] = set()  # name ids of step ranges (ProfilerStep#N)
        self._layer_names: set[int] = set()  # name ids of layer ranges
        self._node_names: set[int] = set()   # name ids of autograd nodes' ops (backward)
        self._keep_sequences = False  # set at the first layer range: other traces keep none
        self._sequences_from = 0  # the row of the chunk being kept where sequences start
        self._device_pids: set = set()  # processes an export names "device ..."
        self._named_devices: set = set()  # processes named after a device (GPU 0, MTIA 1)
        self._copy_sizes: dict[int, int] = {}  # correlation -> bytes, from ROCm runtime calls
        self._sizeless: list[tuple[int, int]] = []  # (row, correlation) of copies without bytes
        self.memory_rows: list[tuple] = []  # `[memory]` instants (trace_chunks.ChunkColumns.memory)
        self.product_start_us, self.product_flops = array("d"), array("q")  # readers.torch_records
        self._kind_number = 0  # what the next chunks are decoded with (trace_chunks.KINDS)
        self._products = True  # whether chunks are searched for matrix products (readers.torch_records)
        self.used_workers = False  # chunk_pool's workers decoded chunks of this read

    def read(self, blocks: safe_files.ReadAhead, fd: int | None = None):
        """The trace's keys; its events kept as columns. `fd`: the descriptor of a plain file
        (not a gzip's inflated stream), whose chunks the workers may then read themselves."""
        buf = _Window(_CHUNK + _BLOCK)
        self.decoding_from = 0
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
                    self.decoding_from = buf.base
                    whole = self._decode_trace(buf.contents())
                    self._merge(trace_chunks.decode_chunk(whole.traceEvents, self._kind(), self._products))
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
        if _says(head.with_modules):
            # Kineto writes the ops before the Python ranges (`nn.Module: …`): a trace whose head
            # says with_modules keeps its sequence numbers from the first event.
            self._keep_sequences = True
        # Matrix products' FLOPs count only inside layer ranges: looked for where the trace may
        # hold both, and not in every read of a trace of products without shapes (the search
        # costs a chunk's decode some 15 %, 20 % where it finds them).
        self._products = not len(head.trace_id) or (_says(head.record_shapes) and _says(head.with_modules))
        buf.keep_from(match.end() - 1)  # the buffer now starts with the array's "["
        consumed, size = 0, chunk_pool.workers()
        # A plain file says its size: one past PARALLEL_AFTER goes to the workers from its first
        # chunk (decoding the first 64 MB here left ~100 MB of freed small objects in this
        # process's heap, never given back, a third of its RSS at the end of a 200 MB read).
        if fd is not None and os.fstat(fd).st_size - buf.base >= PARALLEL_AFTER:
            consumed = PARALLEL_AFTER
        while not eof:
            # A big file's chunks are decoded by other processes, once it has shown itself big:
            # a small one never waits for them to start.
            if size > 1 and consumed >= PARALLEL_AFTER:
                self.used_workers = True
                source = None if fd is None else chunk_pool.file_source(fd)
                eof = self._read_ranges(fd, source, buf, size) if source is not None \
                    else self._read_parallel(blocks, buf, size)
                break
            # A buffer left whole by the last decode (one event larger than a chunk) grows.
            eof = self._fill(blocks, buf, max(_CHUNK, len(buf) + 1))
            if not eof:
                before = len(buf)
                self._decode_chunk(buf)
                consumed += before - len(buf)
        # The rest: the last events, "]", and the keys after the array.
        self.decoding_from = buf.base - len(b'{"traceEvents":')
        tail = self._decode_trace(b'{"traceEvents":' + buf.contents())
        self._merge(trace_chunks.decode_chunk(tail.traceEvents, self._kind(), self._products))
        if not head.deviceProperties:
            head.deviceProperties = tail.deviceProperties
        if head.baseTimeNanoseconds is None:
            head.baseTimeNanoseconds = tail.baseTimeNanoseconds
        if not len(head.distributedInfo):
            head.distributedInfo = tail.distributedInfo
        return head

    def _decode_trace(self, contents: bytes) -> _RawTrace:
        """A whole trace object (or the array's tail and the keys after it), its events left
        raw: typed, and leniently where a field has the wrong type; the strict decoder's error
        where neither reads it."""
        try:
            return _DECODER.decode(contents)
        except msgspec.ValidationError as exc:
            try:
                return lenient_decode.decode_trace(contents, _RawTrace, self.dropped_fields)
            except msgspec.DecodeError:
                raise exc from None

    def _kind(self, number: bool = False):
        """The fields to decode a chunk with (trace_chunks.KINDS, or its number there): those
        a chunk read before needed (a collective's, a `[memory]` instant's; a gloo range's are
        asked for by its own chunk alone, as they cost a third of the decode)."""
        return self._kind_number if number else trace_chunks.KINDS[self._kind_number]

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

    def _read_parallel(self, blocks: safe_files.ReadAhead, buf: "_Window", size: int) -> bool:
        """Chunks cut here are decoded by `size` worker processes, handed out and taken back in
        turn, so they merge in file order; True at the end of the stream. A chunk a worker cannot
        decode (a cut inside a string, broken JSON) or a lost worker sends the rest back through
        the one-process path, which tries earlier cuts and words the error as it always does."""
        workers, sent = chunk_pool.pool(size), deque()  # (worker, its chunk's cut), in order
        eof, turn = False, 0
        try:
            while True:
                while not eof and len(sent) < size:
                    eof = self._fill(blocks, buf, max(_CHUNK, len(buf) + 1))
                    if eof:
                        break
                    cut = self._cut(buf)
                    if cut is None:
                        self._decode_chunk(buf)  # only says when the buffer is past any event
                        continue
                    worker = workers[turn % size]
                    turn += 1
                    sent.append((worker, cut))  # first: a send that fails puts it back too
                    worker.send(cut[0], self._kind(number=True), self._products)
                if not sent:
                    return eof
                chunk = sent[0][0].receive()
                sent.popleft()
                self._merge(chunk)
        except (msgspec.DecodeError, chunk_pool.WorkerLost) as exc:
            if isinstance(exc, chunk_pool.WorkerLost):
                chunk_pool.discard()
            buf.put_back([cut for _, cut in sent], sent[0][1][2] if sent else None)
            self._stop_sent(sent)
            if not eof:
                self._decode_rest(blocks, buf)
            return True
        finally:
            for worker, _ in sent:  # a read that raised: their answers are never read
                worker.stop()

    @staticmethod
    def _stop_sent(sent: deque) -> None:
        for worker, _ in sent:  # those still decoding chunks: the rest is read here
            worker.stop()
        sent.clear()

    def _decode_rest(self, blocks, buf: "_Window") -> None:
        """The rest of the file read and decoded in this process: the workers' path failed."""
        eof = False
        while not eof:
            eof = self._fill(blocks, buf, max(_CHUNK, len(buf) + 1))
            if not eof:
                self._decode_chunk(buf)

    def _read_ranges(self, fd: int, source: tuple, buf: "_Window", size: int) -> bool:
        """_read_parallel for a plain file: each worker reads its chunk's byte range itself
        (chunk_pool.send_range); this process reads only around each cut, to find it. A chunk a
        worker cannot decode, a lost worker or a range it cannot read sends the rest, from that
        chunk on, through the one-process path, as _read_parallel does. At the end `buf` holds
        the array's last events and what follows it; True (the file is read). Reads by
        offset (pread) leave the read-ahead thread's position on `fd` alone."""
        end = os.fstat(fd).st_size
        workers, sent = chunk_pool.pool(size), deque()  # (worker, its chunk's offset), in order
        position, turn = buf.base + 1, 0  # the next event's first byte: buf holds "[" before it
        try:
            while True:
                while len(sent) < size:
                    cut = self._range_cut(fd, position, end)
                    if cut is None:
                        break
                    worker = workers[turn % size]
                    turn += 1
                    sent.append((worker, position))  # first: a send that fails is read here too
                    worker.send_range(source, position, cut[0] - position, self._kind(number=True), self._products)
                    position = cut[1]
                if not sent:
                    break
                chunk = sent[0][0].receive()
                sent.popleft()
                self._merge(chunk)
        except (msgspec.DecodeError, chunk_pool.WorkerLost, chunk_pool.RangeUnreadable, _Unsplit) as exc:
            if isinstance(exc, chunk_pool.WorkerLost):
                chunk_pool.discard()
            if sent:
                position = sent[0][1]
            self._stop_sent(sent)
            buf.restart(position - 1)
            self._decode_rest(_FileBlocks(fd, position, end), buf)
            return True
        finally:
            for worker, _ in sent:  # a read that raised: their answers are never read
                worker.stop()
        buf.restart(position - 1)
        self._fill(_FileBlocks(fd, position, end), buf, end - position + 1)
        return True

    @staticmethod
    def _range_cut(fd: int, position: int, end: int) -> tuple[int, int] | None:
        """Where the chunk from `position` ends (past its last event's "}") and the next event
        begins, at the last place that looks like one between two events before a chunk's
        length; None where less than a chunk is left (the array's tail, read here)."""
        target = position + _CHUNK
        if target >= end:
            return None
        start = max(position, target - _TAIL)
        while True:
            window = os.pread(fd, target - start, start)
            last = None
            for last in _BETWEEN.finditer(window):
                pass
            if last is not None:
                return start + last.start() + 1, start + last.end() - 1
            if start == position:  # one event longer than a chunk
                raise _Unsplit
            start = max(position, start - 2 * (target - start))

    def _cut(self, buf: "_Window") -> tuple[bytearray, bytes, int] | None:
        """The whole events at the front of `buf` as an array ("[" + events + "]"), removed from
        it at the last place that looks like one between two events, and the bytes found there
        (a comma and blanks, or a string's content where that place was inside one); None where
        the buffer holds no complete event yet; the third item: where the chunk began in the
        stream (for put_back)."""
        candidates = self._candidates(buf)
        if not candidates:
            return None
        close = candidates[-1]
        data = buf.data
        # The one copy (the buffer is reused meanwhile), closed as an array in place.
        events = bytearray(close + 2)
        with memoryview(data) as view:
            events[:close + 1] = view[:close + 1]
        events[close + 1] = 0x5D
        next_event = data.index(b"{", close + 1, buf.end)
        between = bytes(data[close + 1:next_event])
        data[next_event - 1] = 0x5B
        base = buf.base
        buf.keep_from(next_event - 1)
        return events, between, base

    def _candidates(self, buf: "_Window") -> list[int]:
        """Where an event may end and the next begin, in the buffer's last part (all of it where
        one event fills the buffer); a match inside a string is possible, so several are kept."""
        data, end = buf.data, buf.end
        start = max(0, end - _TAIL)
        while True:
            candidates = [m.start() for m in _BETWEEN.finditer(data, start, end)]
            if candidates or start == 0:
                return candidates
            start = 0

    def _decode_chunk(self, buf: "_Window") -> None:
        """Decode the whole events at the front of `buf` ("[" + events + ...) and remove them,
        leaving "[" + the rest; a buffer with no complete event is left to grow."""
        data, end = buf.data, buf.end
        candidates = self._candidates(buf)
        error = None
        self.decoding_from = buf.base
        for close in reversed(candidates[-_RETRIES:]):
            # Decode "[" + events + "]" in place: the byte after the event's "}" is set to "]"
            # for the decode and put back after, which saves copying the chunk.
            saved = data[close + 1]
            data[close + 1] = 0x5D
            try:
                with memoryview(data) as view, view[:close + 2] as events:
                    try:
                        chunk = trace_chunks.decode_chunk(events, self._kind(), self._products)
                    except msgspec.DecodeError as exc:
                        error = exc
                        continue
                self._merge(chunk)
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

    def _merge(self, chunk: trace_chunks.ChunkColumns) -> None:
        """A chunk's rows join the columns, in file order: its ids made the file's, and what each
        track is (host, device, runtime, steps, skipped) applied to its rows as arrays."""
        self._decoded += chunk.decoded
        if self._decoded > self.max_events:
            raise TraceFormatError(
                f"{self.path}: over {self.max_events:,} events, more than a file of its size "
                f"holds (a gzip of tiny events fills memory): refusing; set "
                f"{MAX_EVENTS_ENV}=N to read up to N events")
        self.dropped.update(chunk.dropped)
        self.dropped_fields.update(chunk.dropped_fields)
        self._kind_number = max(self._kind_number, min(trace_chunks.KINDS.index(chunk.kind),
                                                       trace_chunks.KINDS.index(trace_chunks.MEMORY)))
        self.memory_rows.extend(chunk.memory)
        self.product_start_us.extend(chunk.product_start_us)
        self.product_flops.extend(chunk.product_flops)
        for pid, name in chunk.processes:
            self._process_name(pid, name)
        if not len(chunk.start_us):
            return
        columns = self.columns
        name_ids = np.fromiter(map(self._name_id, chunk.names), np.int32, len(chunk.names))
        names = name_ids[np.frombuffer(chunk.name, np.int32)]
        tracks = np.frombuffer(chunk.track, np.int32)
        keys = list(chunk.tracks)
        kinds_roles = [self._kind_role(key) for key in keys]
        roles = np.array([role for _, role in kinds_roles], np.int8)[tracks]
        keep = roles != ROLE_SKIP
        rows_at = np.cumsum(keep) + (len(columns.start_us) - 1)  # kept rows' rows in the file
        step_wheres = self._register(chunk, keys, kinds_roles, names, tracks, rows_at)
        where_ids = np.array([-1 if self._tracks[key][2] is None else self._tracks[key][2]
                              for key in keys], np.int32)[tracks]
        for row, where_id in step_wheres.items():
            where_ids[row] = where_id
        correlations = np.frombuffer(chunk.correlation, np.int64)
        self._keep_stats(chunk, names, roles, step_wheres, rows_at)
        self._keep_sizes(chunk, kinds_roles, tracks, roles, correlations, rows_at)
        if keep.all():
            columns.start_us.extend(chunk.start_us)
            columns.dur_us.extend(chunk.dur_us)
            columns.correlation.extend(chunk.correlation)
        else:
            columns.start_us.frombytes(np.frombuffer(chunk.start_us, np.float64)[keep].tobytes())
            columns.dur_us.frombytes(np.frombuffer(chunk.dur_us, np.float64)[keep].tobytes())
            columns.correlation.frombytes(correlations[keep].tobytes())
        columns.name.frombytes(names[keep].tobytes())
        columns.where.frombytes(where_ids[keep].tobytes())

    def _name_id(self, name: str) -> int:
        """The file's id of a name; what a name is (a step range, a layer range) is looked at
        once per name."""
        name_id = self.columns.names.get(name)
        if name_id is None:
            name_id = self.columns.name_id(name)
            if name.startswith(STEP_PREFIXES):
                self._step_names.add(name_id)
            if is_layer_range(name):
                self._layer_names.add(name_id)
            elif name.startswith(BACKWARD_NODE):
                self._node_names.add(name_id)
        return name_id

    def tracks(self) -> list[tuple]:
        """The (cat, pid, tid) of every track the file's events came on."""
        return list(self._tracks)

    def _kind_role(self, key: tuple) -> tuple:
        known = self._tracks.get(key)
        if known is not None:
            return known[0], known[3]
        kind, _, role = describe(key, self._device_pids)
        return kind, role

    def _register(self, chunk, keys, kinds_roles, names, tracks, rows_at) -> dict[int, int]:
        """Registers the chunk's new tracks, and its steps, in file order (a track's where id at
        its first event, a step track's at its first step, as an event-by-event reader would);
        returns the step rows' where ids."""
        candidates = [local for local, (kind, role) in enumerate(kinds_roles) if role == ROLE_STEPS]
        step_names = list(self._step_names)
        maybe = np.isin(tracks, candidates) if candidates else np.zeros(len(tracks), bool)
        if step_names:
            maybe |= np.isin(names, step_names)
        firsts = sorted(zip(chunk.track_first_rows, range(len(keys))))
        step_wheres, f, local_names = {}, 0, None
        for row in np.flatnonzero(maybe).tolist():
            while f < len(firsts) and firsts[f][0] <= row:
                self._track_of(keys[firsts[f][1]])
                f += 1
            kind, track, _, role = self._tracks[keys[tracks[row]]]
            if role == ROLE_STEPS or (role == ROLE_HOST and names[row] in self._step_names
                                  and kind in STEP_KINDS):
                local_names = local_names or list(chunk.names)
                step_wheres[row] = self._step(chunk, row, int(rows_at[row]),
                                              local_names[chunk.name[row]], track)
        for _, local in firsts[f:]:
            self._track_of(keys[local])
        return step_wheres

    def _keep_stats(self, chunk, names, roles, step_wheres, rows_at) -> None:
        """What collectives moved, and autograd sequence numbers of host events from the first
        layer range on, and of autograd nodes wherever they lie (other traces keep no more):
        per-layer backward time links by them. On a GPU the autograd thread's events come first
        in the file, before the first layer range: its nodes' numbers were lost there."""
        stats = {row: kept for row, kept in chunk.comm.items() if roles[row] != ROLE_SKIP}
        if not self._keep_sequences and self._layer_names:
            layer_rows = np.flatnonzero(np.isin(names, list(self._layer_names)))
            if len(layer_rows):
                self._keep_sequences = True
                self._sequences_from = int(layer_rows[0])
        start = self._sequences_from if self._keep_sequences else None
        if chunk.sequences:  # a host event's, from `start` on, or an autograd node's anywhere
            rows = np.fromiter(chunk.sequences, np.int64, len(chunk.sequences))
            wanted = np.isin(names[rows], list(self._node_names))
            if start is not None:
                wanted |= rows >= start
            wanted &= roles[rows] == ROLE_HOST
            if step_wheres:
                wanted &= ~np.isin(rows, list(step_wheres))
            values = list(chunk.sequences.values())
            for index in np.flatnonzero(wanted).tolist():
                value = values[index]
                sequence = value if type(value) is int and value >= 0 else trace_chunks.count(value)
                if sequence is not None:
                    stats.setdefault(int(rows[index]), {})[SEQUENCE] = sequence
        if self._keep_sequences:
            self._sequences_from = 0  # later chunks keep theirs from their first row
        for row in sorted(stats):
            self.columns.stats[int(rows_at[row])] = stats[row]

    def _keep_sizes(self, chunk, kinds_roles, tracks, roles, correlations, rows_at) -> None:
        """Device events' bytes; a copy without any waits for its runtime call's size (ROCm)."""
        columns = self.columns
        for row, nbytes in chunk.nbytes.items():
            if roles[row] == ROLE_DEVICE:
                columns.nbytes[int(rows_at[row])] = nbytes
        memcpy = np.array([kind == MEMCPY and role == ROLE_DEVICE for kind, role in kinds_roles])
        sizeless = memcpy[tracks] & (correlations != NONE)
        for row in np.flatnonzero(sizeless).tolist():
            if row not in chunk.nbytes:
                self._sizeless.append((int(rows_at[row]), int(correlations[row])))
        for row, size in chunk.sizes.items():
            if roles[row] == ROLE_RUNTIME and correlations[row] != NONE:
                size = trace_chunks.count(size)
                if size is not None:
                    self._copy_sizes[int(correlations[row])] = size

    def _step(self, chunk, row: int, file_row: int, name: str, track: str) -> int:
        """A step range: its number noted for the step checks; returns its where id."""
        columns = self.columns
        number = chunk.step_nums.get(row)
        number = validate.step_number(str(name.rpartition("#")[2] if number is None else number))
        correlation = chunk.correlation[row]
        columns.step_nums[file_row] = number
        self.steps.append((file_row, Event(name, STEP, chunk.start_us[row], chunk.dur_us[row], track,
                                           number, None if correlation == NONE else correlation)))
        return columns.where_id(STEP, track)

    def sizes_from_runtime(self) -> None:
        """Copies without bytes take them from their runtime call (ROCm), where it said them."""
        for row, correlation in self._sizeless:
            size = self._copy_sizes.get(correlation)
            if size is not None:
                self.columns.nbytes[row] = size

    def _process_name(self, pid, name) -> None:
        if isinstance(name, str) and name.startswith("device "):
            self._device_pids.add(pid)
        if isinstance(name, str) and _DEVICE_PROCESS.match(name):
            self._named_devices.add(pid)

    def device_tracks(self) -> None:
        """Events of categories the reader does not know (another accelerator's) are the device's
        where their process is one: named after a device, or holding device events of known
        categories. Done once the whole file is read, as Kineto names its processes last."""
        wheres = self.columns.wheres
        device_pids = self._named_devices | {pid for (cat, pid, _), where in self._tracks.items()
                                             if where[3] == ROLE_DEVICE and cat in DEVICE_CATEGORIES}
        moved = {}
        for (cat, pid, tid), (kind, track, where_id, role) in self._tracks.items():
            # A range profiler's ranges are counters of the device, not work it ran.
            if kind == OTHER and role == ROLE_HOST and pid in device_pids and cat != RANGE_PROFILER:
                lowered = cat.lower()
                kind = MEMCPY if "memcpy" in lowered else MEMSET if "memset" in lowered else KERNEL
                key = (kind, f"device/{pid}/{tid}")
                if key not in wheres and key not in moved.values():
                    moved[where_id] = key
        if moved:
            self.columns.wheres = {moved.get(i, key): i for key, i in wheres.items()}

    def _track_of(self, key: tuple) -> tuple:
        """A track's (kind, track, where id, role), registered at its first event."""
        where = self._tracks.get(key)
        if where is None:
            kind, track, role = describe(key, self._device_pids)
            where_id = None if role == ROLE_SKIP else self.columns.where_id(kind, track)
            where = self._tracks[key] = (kind, track, where_id, role)
        return where


# Kineto's category for the CUPTI range profiler's ranges (measures.kernels reads it too).
RANGE_PROFILER = "cuda_profiler_range"
_BYTE = re.compile(r"\(byte (\d+)\)")


class _Unsplit(Exception):
    """No place between two events in a chunk's length of a file: the one-process path reads it."""


class _FileBlocks:
    """A plain file's blocks from `offset` on, read by offset (as ReadAhead's, without a thread)."""

    def __init__(self, fd: int, offset: int, end: int):
        self._fd, self._offset, self._end = fd, offset, end

    def read(self) -> bytes:
        block = os.pread(self._fd, min(_BLOCK, max(self._end - self._offset, 0)), self._offset)
        self._offset += len(block)
        return block


class _Window:
    """The bytes read and not yet decoded, at the front of one bytearray that keeps its memory:
    a bytearray cut down after each chunk and grown again was reallocated, and its pages
    faulted in afresh, every chunk (a fifth of the read's time went to the kernel)."""

    def __init__(self, capacity: int):
        self.data = bytearray(capacity)
        self.end = 0
        self.base = 0  # where data[0] lies in the stream: a decoder's error says the file's byte

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
        self.base += position

    def restart(self, base: int) -> None:
        """Empty but for an array's "[", standing at `base` in the stream."""
        self.end = 0
        self.add(b"[")
        self.base = base

    def contents(self) -> bytes:
        with memoryview(self.data) as view:
            return bytes(view[:self.end])

    def put_back(self, cuts: list[tuple[bytes, bytes, int]], base: int | None) -> None:
        """Chunks cut from the front (_Reader._cut's) return there, in order: the buffer holds
        the bytes it held before they were cut, from `base` (the first cut's) on."""
        rest = bytes(self.data[1:self.end])  # after the "[" the last cut left
        self.end = 0
        self.add(b"[" + b"".join(events[1:-1] + between for events, between, _ in cuts) + rest)
        if base is not None:
            self.base = base


# Layer ranges: gapscope's own (profilers.layer_ranges) and torch.profiler's with_modules.
LAYER_RANGE_PREFIXES = (LAYER_RANGE_PREFIX, MODULE_RANGE_PREFIX)
SEQUENCE = "sequence"  # the Event.stats key of an autograd sequence number


def is_layer_range(name: str) -> bool:
    return name.startswith(LAYER_RANGE_PREFIXES)


def _says(flag: msgspec.Raw) -> bool:
    """Whether a header flag (torch.profiler writes 1) is on."""
    return bytes(flag).strip() not in (b"", b"0", b"false", b"null")


def _distributed_info(raw: msgspec.Raw) -> dict | None:
    """torch.profiler's distributedInfo (backend, rank, world_size, ...) when it is an object."""
    if not len(raw):
        return None
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


def _short(exc: Exception, offset: int = 0) -> str:
    """One line, however long the decoder's message (it may quote the offending input); its
    "(byte N)", counted in the bytes one decode was given, made the file's by `offset` (a 590 MB
    concatenated trace was refused at a chunk's byte)."""
    text = " ".join(str(exc).split())
    if offset:
        text = _BYTE.sub(lambda m: f"(byte {int(m.group(1)) + offset:,})", text)
    return text if len(text) <= 200 else text[:197] + "..."
