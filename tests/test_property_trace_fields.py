"""Property tests over the torch trace schema's fields: a wrongly typed value in any one of them never
rejects the trace. A numeric string reads as its number; a value that cannot be coerced is left out
and counted by its JSON path, the rest of the trace read as it would be without it."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gapscope.analysis.readers import torch_trace, trace_chunks
from gapscope.analysis.readers.torch_trace import read_torch_trace

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def _fields(struct_type) -> list[str]:
    return [f.encode_name for f in msgspec.structs.fields(struct_type) if f.type is not msgspec.Raw]


# Every field of the schema a value can be wrong in (a Raw field takes any JSON): those every
# event's decode reads (a memory instant's and a gloo range's are read where those are).
ARG_FIELDS = _fields(trace_chunks._Args)
COMM_FIELDS = [f for f in _fields(trace_chunks._CommArgs) if f not in ARG_FIELDS]
MEMORY_FIELDS = [f for f in _fields(trace_chunks._MemoryArgs) if f not in ARG_FIELDS + COMM_FIELDS]
EVENT_FIELDS = [f for f in _fields(trace_chunks.RawEvent) if f != "args"]
TRACE_FIELDS = [f for f in _fields(torch_trace._RawTrace) if f != "traceEvents"]
# Numbers (int-typed in some field) that the coercion must read back from their string.
INT_FIELDS = ["correlation", "bytes", "size"]


def _trace(**changes) -> dict:
    """Two 1000 µs steps; each with an op launching a 300 µs kernel and a 4096-byte copy (the last one is
    the event changed)."""
    events = []
    for step, start in ((1, 1000), (2, 2000)):
        corr = step * 10
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
             "ts": start, "dur": 1000},
            {"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": start + 100,
             "dur": 400, "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": start + 200,
             "dur": 300, "args": {"correlation": corr}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7,
             "ts": start + 600, "dur": 100, "args": {"correlation": corr + 1, "bytes": 4096}}]
    trace = {"deviceProperties": [{"id": 0, "name": "GPU"}], "baseTimeNanoseconds": 1000,
             "traceEvents": events}
    for where, value in changes.items():
        if where == "event":
            events[7].update(value)
        elif where == "args":
            events[7]["args"].update(value)
        else:
            trace.update(value)
    return trace


def _read(trace: dict):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.pt.trace.json"
        path.write_text(json.dumps(trace))
        return read_torch_trace(path)


def _summary(trace) -> tuple:
    columns = trace.columns
    return (len(columns), sorted(columns.nbytes.items()), sum(columns.dur_us),
            [e.correlation for e in trace.events])


BASE = _summary(_read(_trace()))
# Values no field of the schema takes: arrays where a scalar belongs, objects where a number does.
bad_values = st.one_of(st.lists(st.integers(), min_size=1, max_size=3),
                       st.lists(st.text(max_size=3), min_size=1, max_size=2))


@SETTINGS
@given(field=st.sampled_from(ARG_FIELDS), value=bad_values)
def test_a_bad_args_field_is_left_out_and_counted(field, value):
    trace = _read(_trace(args={field: value}))
    assert trace.metadata["dropped_fields"] == {f"args.{field}": 1}
    summary = _summary(trace)
    if field == "correlation":  # the kernel loses its launcher, nothing else changes
        assert summary[:3] == BASE[:3]
    elif field == "bytes":  # the copy's size is gone, its time is kept
        assert summary[0] == BASE[0] and len(summary[1]) == len(BASE[1]) - 1
    else:
        assert summary == BASE


@SETTINGS
@given(field=st.sampled_from(EVENT_FIELDS), value=bad_values)
def test_a_bad_event_field_is_left_out_and_counted(field, value):
    trace = _read(_trace(event={field: value}))
    assert trace.metadata["dropped_fields"] == {field: 1}
    rows = len(trace.columns)
    if field in ("ts", "dur", "ph"):  # the event itself cannot be placed: it is not kept
        assert rows == BASE[0] - 1
    else:
        assert rows == BASE[0]


@SETTINGS
@given(field=st.sampled_from(TRACE_FIELDS), value=st.one_of(bad_values.map(lambda v: [v]), st.sampled_from(["", "n/a", "x1"])))
def test_a_bad_trace_field_is_left_out_and_counted(field, value):
    trace = _read(_trace(trace={field: value}))
    assert trace.metadata["dropped_fields"] == {field: 1}
    assert _summary(trace) == BASE


@pytest.mark.parametrize("field", COMM_FIELDS)
def test_a_bad_collective_field_is_left_out_and_counted(field):
    """A collective's fields are decoded where a chunk holds one (the chunk again, with them):
    one of the wrong type is left out and counted, and the others still read."""
    trace = _trace()
    good = {"Collective name": "allreduce", "In msg nelems": 256, "Out msg nelems": 256,
            "dtype": "Float", "Group size": 2, "finished": True}
    trace["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1,
                                 "tid": 1, "ts": 1520, "dur": 10, "args": {**good, field: [0]}})
    read = _read(trace)
    assert read.metadata["dropped_fields"] == {f"args.{field}": 1}
    (kept,) = read.columns.stats.values()
    # What it moved, less the bad field (a finished collective's `finished` is not kept).
    assert sorted(COMM_KEYS[key] for key in kept) == sorted(set(COMM_KEYS.values()) - {field})


COMM_KEYS = {"collective": "Collective name", "in_nelems": "In msg nelems",
             "out_nelems": "Out msg nelems", "dtype": "dtype", "group_size": "Group size"}


@pytest.mark.parametrize("field", MEMORY_FIELDS)
def test_a_bad_memory_field_is_left_out_and_counted(field):
    """A `[memory]` instant's fields are decoded with the events (the chunk again, with them):
    one of the wrong type is left out and counted; without its bytes the instant says nothing."""
    trace = _trace()
    args = {"Bytes": 512, "Total Allocated": 512, "Total Reserved": 0, "Device Type": 1,
            "Device Id": 0, "Addr": 77}
    memory = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1,
              "tid": 1, "ts": 1150}
    trace["traceEvents"] += [{**memory, "args": args}, {**memory, "ts": 1160, "args": {**args, field: [0]}}]
    read = _read(trace)
    assert read.metadata["dropped_fields"] == {f"args.{field}": 1}
    assert _summary(read) == BASE
    events = read.metadata["memory_events"]
    assert events[0].nbytes == 512 and events[0].device == "cuda:0" and events[0].addr == 77
    if field == "Bytes":
        assert len(events) == 1
    else:
        assert len(events) == 2 and events[1].ts_us == 1160.0 and events[1].nbytes == 512


@SETTINGS
@given(field=st.sampled_from(INT_FIELDS), number=st.integers(0, 10**12))
def test_a_numeric_string_reads_as_its_number(field, number):
    as_int = _read(_trace(args={field: number}))
    as_text = _read(_trace(args={field: str(number)}))
    assert "dropped_fields" not in as_text.metadata
    assert _summary(as_text) == _summary(as_int)


@pytest.mark.parametrize("chunk", [96, 400, 1500])
def test_chunked_reads_coerce_and_count_alike(monkeypatch, chunk):
    """A big trace is decoded a chunk at a time: a chunk with a wrongly typed field is read
    leniently, and a cut inside a string is still not taken for one."""
    monkeypatch.setattr(torch_trace, "_CHUNK", chunk)
    monkeypatch.setattr(torch_trace, "_BLOCK", max(1, chunk // 2))
    trace = _trace(args={"bytes": "4096", "correlation": [1]})
    for event in trace["traceEvents"][1:4]:
        event["name"] += " }, {"  # a cut candidate inside a string
    read = _read(trace)
    assert read.metadata["dropped_fields"] == {"args.correlation": 1}
    assert sorted(read.columns.nbytes.items()) == BASE[1]
    assert len(read.columns) == BASE[0]


def test_a_bad_header_field_before_the_events_is_left_out(tmp_path):
    """Keys before traceEvents are decoded on their own: a wrong type there is left out too."""
    path = tmp_path / "w.pt.trace.json"
    body = json.dumps(_trace()["traceEvents"])
    path.write_text('{"baseTimeNanoseconds": "12", "deviceProperties": 5, "traceEvents": ' + body + "}")
    read = read_torch_trace(path)
    assert read.metadata["dropped_fields"] == {"deviceProperties": 1}
    assert read.metadata["base_time_ns"] == 12
    assert _summary(read) == BASE


def test_what_is_not_json_is_still_refused(tmp_path):
    from gapscope.profilers.errors import TraceFormatError
    path = tmp_path / "w.pt.trace.json"
    path.write_text(json.dumps(_trace())[:-20])
    with pytest.raises(TraceFormatError, match="not a torch profiler trace"):
        read_torch_trace(path)


def test_a_correlation_past_64_bits_links_nothing():
    """msgspec reads 2**70 as an int; the columns hold 64 bits: the copy keeps its row, unlinked."""
    trace = _read(_trace(args={"correlation": 2 ** 70}))
    assert _summary(trace)[:3] == BASE[:3]
    assert [e.correlation for e in trace.events][-1] is None
