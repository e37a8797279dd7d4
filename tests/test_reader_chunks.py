"""The torch reader decodes a trace a chunk of events at a time: chunk edges must change nothing."""
import gzip
import json

import pytest

from gapscope.analysis.readers import chunk_pool, torch_trace
from gapscope.analysis.readers.torch_trace import read_torch_trace

# Strings and nested values that look like the gap between two events, where the reader cuts.
TRICKY_NAMES = ["aten::mm", 'x}, {"ph": "X"', "}, {", "},{", 'quote " and }\\n,{', "ünïcødé ✓", ""]


def _events(n: int) -> list[dict]:
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    for i in range(n):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}",
                       "pid": 1, "tid": 1, "ts": 1000 + 100 * i, "dur": 100})
        events.append({"ph": "X", "cat": "cpu_op", "name": TRICKY_NAMES[i % len(TRICKY_NAMES)],
                       "pid": 1, "tid": "main", "ts": 1010 + 100 * i, "dur": 20,
                       "args": {"nested": [{"a": 1}, {"b": {"c": "}, {"}}], "correlation": i}})
        events.append({"ph": "s", "id": i, "pid": 1, "tid": 1, "ts": 1010 + 100 * i,
                       "cat": "ac2g", "name": "ac2g"})
        events.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7,
                       "ts": 1030 + 100 * i, "dur": 5.5, "args": {"correlation": i, "bytes": 64}})
    return events


def _documents():
    events = _events(40)
    yield "kineto layout", json.dumps({"schemaVersion": 1, "deviceProperties": [{"id": 0}],
                                       "traceEvents": events, "traceName": "x"}, indent=2)
    yield "compact", json.dumps({"traceEvents": events}, separators=(",", ":"))
    yield "keys after the array", json.dumps({"traceEvents": events, "deviceProperties": [{"id": 1}],
                                              "baseTimeNanoseconds": 123})
    yield "a nested traceEvents key first", json.dumps(
        {"distributedInfo": {"traceEvents": [1, 2]}, "traceEvents": events})


def _as_tuples(trace):
    return [tuple(getattr(e, f) for f in e.__struct_fields__) for e in trace.events]


@pytest.mark.parametrize("label,text", list(_documents()), ids=[d[0] for d in _documents()])
@pytest.mark.parametrize("chunk", [1, 7, 64, 300])
def test_chunk_edges_change_nothing(tmp_path, monkeypatch, label, text, chunk):
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(text)
    whole = read_torch_trace(path)  # default chunks: this small file is decoded in one piece
    monkeypatch.setattr(torch_trace, "_CHUNK", chunk)
    monkeypatch.setattr(torch_trace, "_BLOCK", max(1, chunk // 2))
    chunked = read_torch_trace(path)
    assert _as_tuples(chunked) == _as_tuples(whole)
    assert chunked.metadata == whole.metadata
    assert len(whole.events) == 120
    gz = tmp_path / "w.1.pt.trace.json.gz"
    gz.write_bytes(gzip.compress(text.encode()))
    assert _as_tuples(read_torch_trace(gz)) == _as_tuples(whole)


def test_header_and_trailing_keys_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(torch_trace, "_CHUNK", 64)
    monkeypatch.setattr(torch_trace, "_BLOCK", 16)
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": _events(3), "deviceProperties": [{"id": 1}],
                                "baseTimeNanoseconds": 123}))
    trace = read_torch_trace(path)
    # The categories of the complete events (the flow arrows' ac2g is no event kept).
    assert trace.metadata == {"device_properties": [{"id": 1}], "base_time_ns": 123,
                              "categories": ["cpu_op", "kernel", "user_annotation"]}


def test_garbage_after_the_array_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(torch_trace, "_CHUNK", 64)
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": _events(3)}) + " trailing")
    with pytest.raises(torch_trace.TraceFormatError, match="not a torch profiler trace"):
        read_torch_trace(path)


_RSS_CHILD = """
import sys
from gapscope.analysis.readers.torch_trace import read_torch_trace

def peak():  # VmHWM: this process's own peak RSS (ru_maxrss starts at the parent's at fork)
    status = open("/proc/self/status").read()
    return int(status.split("VmHWM:")[1].split()[0]) * 1024

before = peak()
trace = read_torch_trace(sys.argv[1])
print(len(trace.events), peak() - before)
"""


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_memory_stays_bounded_by_the_chunk_not_the_file(tmp_path, gzipped):
    # 192 MB of trace whose events carry long args the reader does not keep: a reader that
    # holds the whole text (or every raw event) at once grows by the file's size; this one
    # by a chunk per decoding process, a few blocks read ahead and the few events it keeps.
    import subprocess
    import sys
    from pathlib import Path
    pad = "x" * 16_000
    event = ('{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": %d, '
             '"dur": 5, "args": {"Input Dims": "%s"}}')
    count = (192 << 20) // len(event % (0, pad))
    body = ",\n".join(event % (1000 + 10 * i, pad) for i in range(count))
    text = '{"traceEvents": [' + body + "]}"
    path = tmp_path / ("big.pt.trace.json" + (".gz" if gzipped else ""))
    path.write_bytes(gzip.compress(text.encode(), 1) if gzipped else text.encode())
    del text, body
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(path)], cwd=root, check=True,
                         capture_output=True, text=True, timeout=300).stdout.split()
    events, grew = int(out[0]), int(out[1])
    assert events == count
    # Past its first 64 MB the file is read in rounds of a chunk for each decoding process
    # (chunk_pool): each process beyond the reader holds one more chunk here meanwhile.
    bound = (96 << 20) + (chunk_pool.workers() - 1) * torch_trace._CHUNK
    assert grew < bound, f"reading 192 MB grew the process by {grew >> 20} MB"


@pytest.fixture
def parallel_reads(monkeypatch):
    """Every chunk past the first decoded by two worker processes (chunk_pool), however small."""
    monkeypatch.setenv(chunk_pool.WORKERS_ENV, "2")
    monkeypatch.setattr(torch_trace, "PARALLEL_AFTER", 0)
    cores = chunk_pool._cores()
    monkeypatch.setattr(chunk_pool, "_cores", lambda: max(2, cores))  # two, on a 1-core runner too
    yield
    chunk_pool.discard()


def test_read_workers_above_the_cores_are_capped_with_one_note(tmp_path):
    """Issue 47 item 6: GAPSCOPE_READ_WORKERS=1024 started 1024 processes (40 took 1.97 GB for
    a 295 MB trace); now the cores this process may use, said once, and the read goes on."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    cores = len(os.sched_getaffinity(0))
    child = ("from gapscope.analysis.readers import chunk_pool; print(chunk_pool.workers(), chunk_pool.workers())")
    done = subprocess.run([sys.executable, "-c", child], cwd=root, capture_output=True, text=True, timeout=60,
                          env={**os.environ, chunk_pool.WORKERS_ENV: "1024"})
    assert done.returncode == 0 and done.stdout.split() == [str(cores)] * 2, done.stderr
    assert done.stderr == (f"gapscope: note: {chunk_pool.WORKERS_ENV}=1024 capped at {cores}, the cores this "
                           "process may use (more workers add memory, not speed)\n")
    done = subprocess.run([sys.executable, "-c", child], cwd=root, capture_output=True, text=True, timeout=60,
                          env={**os.environ, chunk_pool.WORKERS_ENV: str(cores)})
    assert done.stdout.split() == [str(cores)] * 2 and done.stderr == ""


@pytest.mark.parametrize("label,text", list(_documents()), ids=[d[0] for d in _documents()])
@pytest.mark.parametrize("chunk", [64, 300])
def test_chunks_decoded_by_workers_read_as_in_one_process(tmp_path, monkeypatch, parallel_reads,
                                                          label, text, chunk):
    # The tricky names put places that look like a cut inside strings: a worker given such a
    # cut fails to decode, and the reader goes on in one process from that chunk.
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(text)
    monkeypatch.setenv(chunk_pool.WORKERS_ENV, "1")
    whole = read_torch_trace(path)
    monkeypatch.setenv(chunk_pool.WORKERS_ENV, "2")
    monkeypatch.setattr(torch_trace, "_CHUNK", chunk)
    monkeypatch.setattr(torch_trace, "_BLOCK", chunk // 2)
    split = read_torch_trace(path)
    assert _as_tuples(split) == _as_tuples(whole)
    assert split.metadata == whole.metadata
    assert len(split.events) == 120


def _plain_document(steps: int) -> str:
    # Nothing inside an event looks like a cut (no such string, no list of objects): every
    # chunk is decoded by a worker, none falls back.
    events = [event for event in _events(steps) if event.get("name") not in TRICKY_NAMES[1:5]]
    for event in events:
        event.get("args", {}).pop("nested", None)
    return json.dumps({"traceEvents": events, "deviceProperties": [{"id": 1}]}, indent=1)


def _alone_then_split(tmp_path, monkeypatch):
    """A plain document read in one process; then set to be read in 2 kB chunks by workers."""
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(_plain_document(60))
    monkeypatch.setenv(chunk_pool.WORKERS_ENV, "1")
    whole = read_torch_trace(path)
    monkeypatch.setenv(chunk_pool.WORKERS_ENV, "2")
    monkeypatch.setattr(torch_trace, "_CHUNK", 2048)
    monkeypatch.setattr(torch_trace, "_BLOCK", 1024)  # else the first block holds the whole file
    return path, whole


def test_every_chunk_of_a_plain_file_is_decoded_by_the_workers(tmp_path, monkeypatch, parallel_reads):
    path, whole = _alone_then_split(tmp_path, monkeypatch)
    decoded_here, ranges = [], []
    original = torch_trace._Reader._decode_chunk
    monkeypatch.setattr(torch_trace._Reader, "_decode_chunk",
                        lambda self, buf: decoded_here.append(1) or original(self, buf))
    send_range = chunk_pool.Worker.send_range
    monkeypatch.setattr(chunk_pool.Worker, "send_range",
                        lambda self, source, offset, length, *how: ranges.append((offset, length))
                        or send_range(self, source, offset, length, *how))
    monkeypatch.setattr(chunk_pool.Worker, "send", None)  # no chunk's bytes go through a pipe
    split = read_torch_trace(path)
    assert _as_tuples(split) == _as_tuples(whole)
    assert split.metadata == whole.metadata
    assert decoded_here == []  # nothing fell back to the reading process
    assert chunk_pool._workers == []  # stopped at the end of the read, before the analysis
    # The workers read the file's ranges themselves: consecutive, each under a chunk, from the
    # first event past the first cut to the tail (the last chunk and what follows the array).
    size = path.stat().st_size
    assert len(ranges) > 10 and all(0 < length <= 2048 for _, length in ranges)
    assert all(a + n < b for (a, n), (b, _) in zip(ranges, ranges[1:]))
    text = path.read_bytes()
    assert all(text[a:a + n].lstrip()[:1] == b"{" and text[a + n - 1:a + n] == b"}" for a, n in ranges)
    assert size - (ranges[-1][0] + ranges[-1][1]) < 2048 + 64


def test_a_gzip_goes_through_the_pipes_inflated_once(tmp_path, monkeypatch, parallel_reads):
    """A gzip's chunks cannot be read by offset: they go to the workers through the pipes, the
    inflated bytes, each once (the chunks sent are the inflated text's events, in order, once)."""
    path, whole = _alone_then_split(tmp_path, monkeypatch)
    packed = tmp_path / "w.2.pt.trace.json.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    from gapscope.analysis.readers import gunzip
    sent, inflations = [], []
    send = chunk_pool.Worker.send
    monkeypatch.setattr(chunk_pool.Worker, "send", lambda self, data, *how: sent.append(bytes(data)) or send(self, data, *how))
    monkeypatch.setattr(chunk_pool.Worker, "send_range", None)
    start = gunzip.ChildGunzip.__init__
    monkeypatch.setattr(gunzip.ChildGunzip, "__init__",
                        lambda self, *args: inflations.append(1) or start(self, *args))
    split = read_torch_trace(packed)
    assert _as_tuples(split) == _as_tuples(whole)
    assert inflations == [1] and len(sent) > 10
    text, cursor = path.read_bytes(), 0
    for chunk in sent:  # each chunk's events lie in the text after the last one's: sent once
        found = text.find(chunk[1:-1], cursor)
        assert found >= cursor
        cursor = found + len(chunk) - 2


def test_a_worker_lost_mid_read_leaves_the_rest_to_the_reading_process(tmp_path, monkeypatch,
                                                                       parallel_reads):
    path, whole = _alone_then_split(tmp_path, monkeypatch)
    for worker in chunk_pool.pool(2):
        worker.process.kill()  # SIGKILL, as the OOM killer would
        worker.process.wait()
    monkeypatch.setattr(chunk_pool, "pool", lambda size: chunk_pool._workers[:size])
    split = read_torch_trace(path)
    assert _as_tuples(split) == _as_tuples(whole)


def test_broken_json_is_worded_as_in_one_process(tmp_path, monkeypatch, parallel_reads):
    text = _plain_document(60)
    middle = len(text) // 2
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(text[:middle] + "@@" + text[middle:])
    monkeypatch.setenv(chunk_pool.WORKERS_ENV, "1")
    with pytest.raises(torch_trace.TraceFormatError) as alone:
        read_torch_trace(path)
    monkeypatch.setenv(chunk_pool.WORKERS_ENV, "2")
    monkeypatch.setattr(torch_trace, "_CHUNK", 2048)
    with pytest.raises(torch_trace.TraceFormatError) as split:
        read_torch_trace(path)
    assert str(split.value) == str(alone.value)


def test_the_event_budget_holds_with_workers_and_the_next_read_is_whole(tmp_path, monkeypatch,
                                                                        parallel_reads):
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(_plain_document(60))
    monkeypatch.setattr(torch_trace, "_CHUNK", 2048)
    monkeypatch.setenv(torch_trace.MAX_EVENTS_ENV, "100")
    with pytest.raises(torch_trace.TraceFormatError, match="over 100 events"):
        read_torch_trace(path)
    monkeypatch.delenv(torch_trace.MAX_EVENTS_ENV)
    complete = sum(event["ph"] == "X" for event in json.loads(path.read_text())["traceEvents"])
    assert len(read_torch_trace(path).events) == complete == 145


@pytest.mark.parametrize("value", ["0", "two", "-1", "99999"])
def test_a_bad_worker_count_is_one_line(tmp_path, monkeypatch, value):
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(_plain_document(2))
    monkeypatch.setenv(chunk_pool.WORKERS_ENV, value)
    with pytest.raises(torch_trace.GapscopeInputError, match=chunk_pool.WORKERS_ENV):
        read_torch_trace(path)


def test_a_rank_of_a_job_reads_its_trace_alone(monkeypatch):
    # A job's ranks share the cores (a Ray worker is no multiprocessing child): no chunk workers.
    monkeypatch.delenv(chunk_pool.WORKERS_ENV, raising=False)
    monkeypatch.setattr(chunk_pool.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert chunk_pool.workers() == 4
    with chunk_pool.alone():
        assert chunk_pool.workers() == 1
    assert chunk_pool.workers() == 4


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_concatenated_trace_is_refused_at_the_files_byte_not_a_chunks(tmp_path, monkeypatch,
                                                                         parallel_reads, workers):
    """Issue 47 item 8: two traces in one file (590 MB there) were refused "at byte N" of the
    chunk being decoded. Read in 2 kB chunks, alone and by workers, the byte is the file's:
    the second document's first byte (msgspec counts from 1)."""
    document = _plain_document(60)
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(document + document)
    monkeypatch.setenv(chunk_pool.WORKERS_ENV, workers)
    monkeypatch.setattr(torch_trace, "_CHUNK", 2048)
    with pytest.raises(torch_trace.TraceFormatError) as refused:
        read_torch_trace(path)
    assert str(refused.value).endswith(f"trailing characters (byte {len(document) + 1:,}))")
