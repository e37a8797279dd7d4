"""Matrix products' FLOPs from record_shapes' Input Dims are found in the one pass that decodes
the trace (readers.torch_records): every chunk's products, none kept from a trace without shapes,
and `--layers` on a foreign trace opens the file once."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from gapscope.analysis.model.run import load_run
from gapscope.analysis.readers import safe_files, torch_records, torch_trace
from gapscope.analysis.readers.sessions import read_combined
from gapscope.analysis.results.layers import layer_breakdown

SHAPES = Path(__file__).parent / "fixtures" / "foreign" / "module_shapes"


def _op(name: str, ts: float, dims: list | None, **args) -> dict:
    if dims is not None:
        args["Input Dims"] = dims
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 7, "tid": 8, "ts": ts, "dur": 1.0,
            "args": args}


def test_a_chunks_products_are_found_past_one_too_large_to_bound_and_in_any_buffer():
    """addmm 64x256·256x512 = 2·64·256·512 = 16,777,216; bmm 4x8x16·4x16x2 = 2·4·8·16·2 = 2,048.
    A product whose args pass the reach (a long string) is skipped, not the end of the scan; one
    without Input Dims, or with shapes that do not multiply, gives none."""
    events = [_op("aten::addmm", 10.0, [[512], [64, 256], [256, 512], [], []]),
              _op("aten::mm", 20.0, [[3, 4], [4, 5]], note="x" * 9000),
              _op("aten::mm", 30.0, None),
              _op("aten::mm", 35.0, [[3, 4], [5, 6]]),
              _op("aten::relu", 40.0, [[64, 512]]),
              _op("aten::bmm", 50.0, [[4, 8, 16], [4, 16, 2]])]
    data = json.dumps(events).encode()
    for buffer in (data, bytearray(data), memoryview(data)):
        starts, flops = torch_records.product_flops_in(buffer)
        assert list(starts) == [10.0, 50.0] and list(flops) == [16_777_216, 2_048]
    plain = json.dumps([_op("aten::mm", 1.0, None)] * 3).encode()
    assert [list(column) for column in torch_records.product_flops_in(plain)] == [[], []]


@pytest.fixture(scope="module")
def big_gzip(tmp_path_factory) -> Path:
    """12 MB inflated, so events straddle the reader's 4 MB chunks: 30,000 addmm of
    2·8·16·32 = 8,192 FLOPs each between ops without shapes."""
    events = []
    for i in range(30_000):
        events.append(_op("aten::addmm", 1000.0 + 2 * i, [[32], [8, 16], [16, 32], [], []],
                          **{"External id": i, "Sequence number": i}))
        events.append(_op("aten::empty", 1001.0 + 2 * i, [[]], **{"External id": i}))
    path = tmp_path_factory.mktemp("shapes") / "big.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}, indent=1).encode()))
    return path


def test_every_chunks_products_come_back_from_one_inflation(big_gzip, monkeypatch):
    opened = []
    open_stream = safe_files.open_stream
    monkeypatch.setattr(safe_files, "open_stream", lambda p: opened.append(p) or open_stream(p))
    trace = torch_trace.read_torch_trace(big_gzip)
    starts, flops = trace.metadata[torch_records.FLOPS_KEY]
    assert opened == [big_gzip]
    assert len(trace.columns) == 60_000 and len(flops) == 30_000
    assert int(flops.sum()) == 30_000 * 8_192
    assert np.array_equal(starts, 1000.0 + 2 * np.arange(30_000))


def test_successive_sessions_keep_each_ones_products_on_the_one_clock(big_gzip, tmp_path):
    """Two windows whose bases lie 5 ms apart: the later one's products move by 5,000 µs."""
    docs = []
    for n, base in enumerate((1_000_000_000, 1_005_000_000)):
        doc = {"baseTimeNanoseconds": base, "traceEvents": [
            _op("aten::mm", 10.0, [[2, 3], [3, 4]]),
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 7, "tid": 8,
             "ts": 5.0, "dur": 20.0}]}
        docs.append(tmp_path / f"w.{n}.pt.trace.json")
        docs[-1].write_text(json.dumps(doc))
    trace, _ = read_combined(docs, torch_trace.read_torch_trace)
    starts, flops = trace.metadata[torch_records.FLOPS_KEY]
    assert list(starts) == [10.0, 5010.0] and list(flops) == [48, 48]


def test_layers_of_a_foreign_record_shapes_trace_read_the_file_once(monkeypatch):
    run = load_run(SHAPES)  # its trace is read on first use (locating it may read its head)
    opened = []
    open_stream = safe_files.open_stream
    monkeypatch.setattr(safe_files, "open_stream", lambda p: opened.append(p) or open_stream(p))
    layers = layer_breakdown(run)
    assert len(opened) == 1 and opened[0].name.endswith(".pt.trace.json.gz")
    assert {r.name: r.forward_gflop for r in layers.rows}["Linear_0"] == pytest.approx(0.016777, abs=1e-6)


def _kineto_document(flags: dict, copies: int = 40) -> str:
    """A trace as Kineto writes it: its flags beside trace_id before traceEvents, addmm of
    2·2·3·4 = 48 FLOPs with their Input Dims."""
    events = [_op("aten::addmm", 10.0 + i, [[4], [2, 3], [3, 4], [], []]) for i in range(copies)]
    return json.dumps({"schemaVersion": 1, "trace_id": "A1", **flags, "traceEvents": events}, indent=1)


@pytest.mark.parametrize("flags, looked_for", [({"record_shapes": 1, "with_modules": 1}, True),
                                               ({"record_shapes": 1}, False), ({"with_modules": 1}, False)])
def test_products_are_looked_for_where_the_header_says_shapes_and_module_ranges(tmp_path, flags, looked_for):
    """Kineto writes the flags that are on: without with_modules there are no module ranges for
    the FLOPs to count in, without record_shapes no Input Dims (a stray one is not searched for)."""
    path = tmp_path / "k.pt.trace.json"
    path.write_text(_kineto_document(flags))
    found = torch_trace.read_torch_trace(path).metadata.get(torch_records.FLOPS_KEY)
    assert (found is not None) == looked_for
    if looked_for:
        assert list(found[1]) == [48] * 40


@pytest.mark.parametrize("packed", [False, True])
def test_the_workers_find_the_products_of_the_chunks_they_decode(tmp_path, monkeypatch, packed):
    """A plain file's ranges (read by the workers) and a gzip's chunks (sent through the pipes)."""
    from gapscope.analysis.readers import chunk_pool
    path = tmp_path / "k.pt.trace.json"
    path.write_text(_kineto_document({"record_shapes": 1, "with_modules": 1}, copies=300))
    if packed:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(path.with_suffix("").read_bytes()))
    monkeypatch.setenv(chunk_pool.WORKERS_ENV, "2")
    monkeypatch.setattr(torch_trace, "PARALLEL_AFTER", 0)
    monkeypatch.setattr(chunk_pool, "_cores", lambda: 2)
    monkeypatch.setattr(torch_trace, "_CHUNK", 4096)
    monkeypatch.setattr(torch_trace, "_BLOCK", 2048)
    decoded_here = []
    original = torch_trace._Reader._decode_chunk
    monkeypatch.setattr(torch_trace._Reader, "_decode_chunk",
                        lambda self, buf: decoded_here.append(1) or original(self, buf))
    try:
        trace = torch_trace.read_torch_trace(path)
    finally:
        chunk_pool.discard()
    starts, flops = trace.metadata[torch_records.FLOPS_KEY]
    assert decoded_here == [] and list(flops) == [48] * 300 and list(starts) == [10.0 + i for i in range(300)]
