"""Collectives and their exposed time: hand-made NCCL fixtures with a known overlap, a gloo trace cut from a real DDP run, and a real 2-rank gloo job."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gapscope.analysis.measures.collectives import Collective, communication, find_collectives
from gapscope.analysis.readers.torch_trace import read_torch_trace
from gapscope.analysis.events.timeline import phase_timeline

FIXTURES = Path(__file__).parent / "fixtures" / "distributed"
ROOT = Path(__file__).resolve().parent.parent
NCCL_RANK0 = FIXTURES / "nccl_rank0_two_steps.pt.trace.json"
GLOO = {rank: FIXTURES / f"gloo_rank{rank}_two_steps.pt.trace.json" for rank in (0, 1)}


def _read(path):
    trace = read_torch_trace(path)
    return trace, phase_timeline(trace)


def test_nccl_fixture_collectives_kinds_bytes_steps_and_phases():
    trace, timeline = _read(NCCL_RANK0)
    found = find_collectives(trace, timeline)
    assert found == [
        # Bytes from the kernel's own args: 1000 floats.
        Collective("all_reduce", 1100.0, 1160.0, 4000, 0, "backward", "nccl", 0),
        # No args on the kernel: the record_param_comms op around its launch (250 bfloat16).
        Collective("all_reduce", 1185.0, 1195.0, 500, 0, "optimizer", "nccl", 1),
        # An all-gather moves its output: the larger of in (100) and out (200) floats.
        Collective("all_gather", 1300.0, 1340.0, 800, 1, "backward", "nccl", 2),
        # Nothing says its size.
        Collective("reduce_scatter", 1320.0, 1360.0, None, 1, "backward", "nccl", 3),
    ]


def test_nccl_fixture_overlap_and_exposure_to_the_microsecond():
    # By hand (µs). Step 1 [1000, 1200): the all-reduce [1100, 1160) on stream 20 overlaps
    # compute [1100, 1120) and [1125, 1140) = 35; exposed [1120, 1125) + [1140, 1160) = 25,
    # of which the host was in backward until 1150 (15) and in optimizer after (10). The
    # second all-reduce [1185, 1195) runs alone: exposed 10, optimizer until 1190, then
    # other. The kernel on device 1 [1140, 1160) is another GPU's, no compute of this one.
    # Step 2 [1200, 1400): all-gather [1300, 1340) and reduce-scatter [1320, 1360) on two
    # streams: in flight [1300, 1360) = 60; compute [1300, 1330) + [1355, 1360) = 35;
    # exposed [1330, 1355) = 25: backward until 1350 (20), optimizer (5).
    trace, timeline = _read(NCCL_RANK0)
    comm = communication(trace, timeline)
    us = 1e-3
    assert comm.steps == 2 and comm.source == "nccl"
    assert comm.comm_ms == pytest.approx((70 + 60) / 2 * us, abs=1e-9)
    assert comm.overlapped_ms == pytest.approx((35 + 35) / 2 * us, abs=1e-9)
    assert comm.exposed_ms == pytest.approx((35 + 25) / 2 * us, abs=1e-9)
    assert comm.exposed_by_phase == pytest.approx(
        {"data_load": 0.0, "forward": 0.0, "backward": (15 + 20) / 2 * us,
         "optimizer": (15 + 5) / 2 * us, "other": 5 / 2 * us}, abs=1e-9)
    assert sum(comm.exposed_by_phase.values()) == comm.exposed_ms
    expected = {
        "all_reduce": {"count": 1.0, "bytes": (4000 + 500) / 2, "ms": (60 + 10) / 2 * us},
        "all_gather": {"count": 0.5, "bytes": 800 / 2, "ms": 40 / 2 * us},
        "reduce_scatter": {"count": 0.5, "bytes": None, "ms": 40 / 2 * us},
    }
    assert list(comm.per_kind) == list(expected)
    for kind, figures in expected.items():
        assert comm.per_kind[kind] == pytest.approx(figures, abs=1e-9), kind
    assert json.loads(json.dumps(comm.to_json_dict()))["exposed_ms"] == pytest.approx(0.03)


def test_reader_keeps_args_of_comm_events_only_and_distributed_info():
    trace = read_torch_trace(NCCL_RANK0)
    columns = trace.columns
    kept = {columns.names[columns.name[row]] for row in columns.stats}
    assert kept == {"ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclDevKernel_AllGather_RING_LL",
                    "record_param_comms"}
    assert trace.metadata["distributed_info"] == {"backend": "nccl", "rank": 0, "world_size": 2}
    row = next(r for r in columns.stats if columns.names[columns.name[r]] == "record_param_comms")
    assert columns.event(row).stats == {"collective": "allreduce", "dtype": "BFloat16",
                                        "in_nelems": 250, "out_nelems": 250, "group_size": 2}


def test_a_trace_without_collectives_has_no_communication():
    trace, timeline = _read(Path(__file__).parent / "fixtures" / "marked_two_steps.pt.trace.json")
    assert find_collectives(trace, timeline) == []
    assert communication(trace, timeline) is None


def _param_bytes() -> int:
    from tests.dist_gloo_job import model
    return sum(p.numel() * p.element_size() for p in model().parameters())


def _oracle(path: Path) -> dict:
    """comm, exposed and exposed-by-phase in µs per step, straight from the JSON on a 1 µs
    grid (the fixture's times are whole µs): in flight while a gloo range runs; computing
    while an op of the training thread (tid 1) runs that is no c10d dispatch, outside every
    c10d dispatch; the phase is the gapscope range around the instant."""
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    def spans(test):
        return [(e["ts"], e["ts"] + e["dur"]) for e in events if test(e)]
    def inside(t, found):
        return any(s <= t < e for s, e in found)
    steps = sorted(spans(lambda e: e["name"].startswith("ProfilerStep#")))
    gloo = spans(lambda e: e["name"].startswith("gloo:"))
    ops = spans(lambda e: e["tid"] == 1 and e["cat"] == "cpu_op" and not e["name"].startswith("c10d::"))
    waits = spans(lambda e: e["tid"] == 1 and e["name"].startswith("c10d::"))
    phases = [(e["ts"], e["ts"] + e["dur"], e["name"].split("/")[1]) for e in events
              if e["name"].startswith("gapscope/")]
    comm = exposed = 0
    by_phase: dict[str, int] = {}
    for lo, hi in steps:
        for t in range(int(lo), int(hi)):
            if not inside(t, gloo):
                continue
            comm += 1
            if inside(t, ops) and not inside(t, waits):
                continue
            exposed += 1
            phase = next((p for s, e, p in phases if s <= t < e), "other")
            by_phase[phase] = by_phase.get(phase, 0) + 1
    n = len(steps)
    return {"comm": comm / n, "exposed": exposed / n, "by_phase": {p: v / n for p, v in by_phase.items()}}


@pytest.mark.parametrize("rank", [0, 1])
def test_gloo_fixture_cut_from_a_real_run_matches_a_brute_force_count(rank):
    trace, timeline = _read(GLOO[rank])
    found = find_collectives(trace, timeline)
    # The real run: DDP with bucket_cap_mb 0.25 splits the MLP's parameters in two buckets,
    # each all-reduced once per step, issued from backward; with record_shapes the gloo
    # range says its float input's size: the two buckets together are every parameter.
    assert [c.kind for c in found] == ["all_reduce"] * 4
    assert [c.step for c in found] == [0, 0, 1, 1]
    assert {c.phase for c in found} == {"backward"}
    assert {c.source for c in found} == {"gloo"}
    per_step = [sum(c.nbytes for c in found if c.step == step) for step in (0, 1)]
    assert per_step == [_param_bytes()] * 2
    # The ranges run on gloo's worker threads, not the training thread (tid 1).
    events = json.loads(GLOO[rank].read_text())["traceEvents"]
    assert {e["tid"] for e in events if e["name"].startswith("gloo:")}.isdisjoint({1})
    comm = communication(trace, timeline)
    expected = _oracle(GLOO[rank])
    assert comm.comm_ms * 1000 == pytest.approx(expected["comm"], abs=1e-6)
    assert comm.exposed_ms * 1000 == pytest.approx(expected["exposed"], abs=1e-6)
    assert {p: v * 1000 for p, v in comm.exposed_by_phase.items() if v} == pytest.approx(
        expected["by_phase"], abs=1e-6)
    assert comm.per_kind["all_reduce"]["count"] == 2
    assert comm.per_kind["all_reduce"]["bytes"] == _param_bytes()


def _buckets(sizes_bytes: list[int], cap_bytes: int) -> list[int]:
    """DDP's bucketing: parameters in reverse order (the order backward produces their
    gradients), a bucket closed as soon as it holds at least the cap."""
    buckets, current = [], 0
    for size in reversed(sizes_bytes):
        current += size
        if current >= cap_bytes:
            buckets.append(current)
            current = 0
    return buckets + ([current] if current else [])


def test_real_two_rank_gloo_job_counts_one_all_reduce_per_bucket(tmp_path):
    from tests.dist_gloo_job import model
    cap_mb = 0.01  # 10 KiB: the last layer's weight closes the first bucket
    sizes = [p.numel() * p.element_size() for p in model().parameters()]
    buckets = _buckets(sizes, int(cap_mb * 1024 * 1024))
    assert len(buckets) == 3
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(ROOT / "tests" / "dist_gloo_job.py"), str(tmp_path), "--bucket-cap-mb", str(cap_mb),
         "--steps", "3", "--record-shapes"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    for rank in (0, 1):
        trace, timeline = _read(tmp_path / f"rank{rank}.pt.trace.json")
        assert trace.metadata["distributed_info"]["rank"] == rank
        assert trace.metadata["distributed_info"]["world_size"] == 2
        assert trace.metadata["distributed_info"]["backend"] == "gloo"
        comm = communication(trace, timeline)
        assert comm.steps == 3 and comm.source == "gloo"
        assert comm.per_kind["all_reduce"]["count"] == len(buckets)
        assert comm.per_kind["all_reduce"]["bytes"] == sum(sizes)
        found = [c for c in find_collectives(trace, timeline) if c.step is not None]
        for step in range(3):
            assert sorted(c.nbytes for c in found if c.step == step) == sorted(buckets)
        assert {c.phase for c in found} == {"backward"}  # DDP's hooks fire during backward
        assert 0 <= comm.exposed_ms <= comm.comm_ms
        assert comm.overlapped_ms == pytest.approx(comm.comm_ms - comm.exposed_ms)
        assert sum(comm.exposed_by_phase.values()) == comm.exposed_ms


def test_tf_multi_worker_collectives_from_a_real_xplane():
    # Worker 0 of a real 2-worker MultiWorkerMirroredStrategy run on the CPU (TF 2.21, a
    # tf.function step whose replica all-reduces its gradients in a gapscope_backward
    # scope, 4 traced steps). TF packs the gradients into one tensor (ConcatV2), runs one
    # CollectiveReduceV2 on a collective_ops thread, and splits the result: the optimizer
    # waits on it, so none of it overlaps compute.
    from gapscope.analysis.readers.xplane import read_xplane
    trace = read_xplane(FIXTURES / "tf_mwms_worker0_four_steps.xplane.pb")
    timeline = phase_timeline(trace)
    found = find_collectives(trace, timeline)
    assert [(c.kind, c.step, c.phase, c.source) for c in found] == [
        ("all_reduce", step, "backward", "tf") for step in range(4)]
    assert {c.nbytes for c in found} == {None}  # the XPlane says no size
    comm = communication(trace, timeline)
    assert comm.steps == 4
    assert comm.per_kind["all_reduce"]["count"] == 1.0
    assert comm.overlapped_ms == 0.0
    assert comm.exposed_ms == pytest.approx(comm.comm_ms)
    assert comm.comm_ms > 0.5
    assert list(comm.exposed_by_phase) == ["data_load", "forward", "backward", "optimizer", "other"]
    assert comm.exposed_by_phase["backward"] > 0.99 * comm.exposed_ms


@pytest.mark.parametrize("chunk", [256, 4096])
def test_comm_args_survive_any_chunking_of_the_trace(monkeypatch, chunk):
    # The reader decodes a chunk of events at a time, with the shapes only where the chunk
    # holds a gloo range: cut anywhere, the same collectives keep the same bytes.
    from gapscope.analysis.readers import torch_trace
    whole = find_collectives(*_read(GLOO[1]))
    nccl = find_collectives(*_read(NCCL_RANK0))
    monkeypatch.setattr(torch_trace, "_CHUNK", chunk)
    monkeypatch.setattr(torch_trace, "_BLOCK", chunk // 2)
    assert find_collectives(*_read(GLOO[1])) == whole
    assert find_collectives(*_read(NCCL_RANK0)) == nccl
    assert {c.nbytes for c in whole} == {1071144, 526336}


@pytest.mark.parametrize("name, expected", [
    ("gloo:all_reduce", ("gloo", "all_reduce")),
    ("gloo:all_gather", ("gloo", "all_gather")),
    ("gloo:reduce_scatter", ("gloo", "reduce_scatter")),
    ("gloo:broadcast", ("gloo", "broadcast")),
    ("gloo:barrier", ("gloo", "barrier")),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", ("nccl", "all_reduce")),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ("nccl", "all_reduce")),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", ("nccl", "reduce_scatter")),
    ("ncclDevKernel_AllGather_RING_LL", ("nccl", "all_gather")),
    ("ncclDevKernel_Broadcast_RING_LL", ("nccl", "broadcast")),
    ("ncclDevKernel_SendRecv", ("nccl", "send")),
    ("void ncclAllReduceRingLLKernel_sum_float(ncclColl)", ("nccl", "all_reduce")),
    ("replica/gapscope_backward/CollectiveReduceV2:CollectiveReduceV2", ("tf", "all_reduce")),
    ("CollectiveGatherV2:CollectiveGatherV2", ("tf", "all_gather")),
    ("x/CollectiveBcastRecvV2:CollectiveBcastRecvV2", ("tf", "broadcast")),
    ("NcclAllReduce", ("tf", "all_reduce")),
    # Not collectives themselves: the dispatcher op, NCCL's host range, TF's executor.
    ("c10d::allreduce_", None), ("nccl:all_reduce", None), ("record_param_comms", None),
    ("CollectiveOpV2Kernel::Run", None), ("aten::mm", None),
])
def test_collective_names_normalise_to_one_kind(name, expected):
    from gapscope.analysis.measures.collectives import _classify
    assert _classify(name) == expected
