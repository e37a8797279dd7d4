"""Breakdown of hand-made traces whose expected phase times follow from their round timestamps."""
import json

import pytest

from gapscope.analysis.results.breakdown import breakdown_from_timers, breakdown_from_trace

from gapscope.analysis.results.distributed_breakdown import breakdown_of
from gapscope.analysis.events.timeline import PRIORITY
from gapscope.analysis.readers.torch_trace import read_torch_trace
from gapscope.analysis.events.trace import HOST_OP, STEP, Event, Trace
from gapscope.profilers.phases import PHASES


def test_marked_torch_trace_two_steps(fixtures_dir):
    result = breakdown_from_trace(read_torch_trace(fixtures_dir / "marked_two_steps.pt.trace.json"))
    result.self_check()
    # Step 1: data 20, optimizer 5+10, forward 30, backward 30 of 100 us -> other 5.
    # Step 2: data 40, forward 30, backward 40, optimizer 5 of 120 us -> other 5.
    assert [s.step for s in result.steps] == [1, 2]
    assert result.steps[0].phase_ms == pytest.approx(
        {"data_load": 0.020, "forward": 0.030, "backward": 0.030, "optimizer": 0.015, "other": 0.005})
    assert result.steps[1].phase_ms == pytest.approx(
        {"data_load": 0.040, "forward": 0.030, "backward": 0.040, "optimizer": 0.005, "other": 0.005})
    doc = result.to_json_dict()
    assert doc["step_ms"]["mean"] == pytest.approx(0.110)
    assert {p: doc["phases"][p]["ms"] for p in PHASES} == pytest.approx(
        {"data_load": 0.030, "forward": 0.030, "backward": 0.035, "optimizer": 0.010, "other": 0.005})
    assert set(result.phase_sources.values()) == {"gapscope marks"}


def test_foreign_torch_trace_uses_torch_markers_and_infers_forward(fixtures_dir):
    result = breakdown_from_trace(read_torch_trace(fixtures_dir / "foreign_one_step.pt.trace.json"))
    result.self_check()
    (step,) = result.steps
    assert step.step == 5 and step.step_ms == pytest.approx(0.200)
    # data 0-50; forward ops 60-110 (aten::zero_ at 111 sits inside zero_grad: optimizer);
    # optimizer 110-115 + 175-195; backward 120-170; the rest of 200 us is other.
    assert step.phase_ms == pytest.approx(
        {"data_load": 0.050, "forward": 0.050, "backward": 0.050, "optimizer": 0.025, "other": 0.025})
    assert result.phase_sources == {"data_load": "framework markers", "forward": "inferred",
                                    "backward": "framework markers", "optimizer": "framework markers"}
    assert any("forward inferred" in note for note in result.notes)


def _op(name, start, dur, track="host/1/1"):
    return Event(name, HOST_OP, start, dur, track)


def test_overlapping_threads_count_each_instant_once():
    """TF runs ops on two threads at once; an instant claimed by two phases goes to the first in PRIORITY."""
    assert PRIORITY.index("forward") < PRIORITY.index("data_load")
    trace = Trace("xplane", "hand-made", [
        Event("train", STEP, 0, 100, "host/1/0", step_num=7),
        _op("StatefulPartitionedCall/gapscope_forward/dense/MatMul:MatMul", 10, 30, "host/1/1"),
        _op("IteratorGetNextOp::DoCompute", 0, 20, "host/1/2"),           # 0-20, overlaps forward 10-20
        _op("StatefulPartitionedCall/gradient_tape/gapscope_forward/dense/MatMul/MatMul_1:MatMul", 40, 20),
        _op("StatefulPartitionedCall/gapscope_optimizer/rm_sprop/Mul:Mul", 60, 10, "host/1/1"),
        _op("StatefulPartitionedCall/gapscope_optimizer/rm_sprop/Add:AddV2", 65, 10, "host/1/2"),  # 60-75
    ])
    result = breakdown_from_trace(trace)
    result.self_check()
    (step,) = result.steps
    assert step.step == 7
    assert step.phase_ms == pytest.approx(
        {"data_load": 0.010, "forward": 0.030, "backward": 0.020, "optimizer": 0.015, "other": 0.025})


def test_timers_exclude_warmup_and_traced_steps_and_report_compile():
    rows = [{"step": i, "warmup": i < 2, "traced": i in (2, 3), "step_ms": ms, "data_load_ms": 1.0,
             "forward_ms": 2.0, "backward_ms": 3.0, "optimizer_ms": 1.0, "loss": 2.0 - i / 10}
            for i, ms in enumerate([50.0, 12.0, 20.0, 20.0, 10.0, 10.0])]
    result = breakdown_from_timers(rows, warmup_steps=2)
    result.self_check()
    assert [s.step for s in result.steps] == [4, 5]
    assert result.phase_means()["other"] == pytest.approx(3.0)
    # steady median 15 (of 20, 20, 10, 10): warm-up excess (50-15) + 0
    assert result.compile_ms == pytest.approx(35.0)


def test_json_contract_keys_and_sum(fixtures_dir):
    doc = json.loads(json.dumps(breakdown_of(fixtures_dir / "marked_two_steps.pt.trace.json").to_json_dict()))
    for key in ("run_id", "workload", "framework", "variant", "device", "source", "steps",
                "step_ms", "phases", "compile_ms"):
        assert key in doc
    assert set(doc["step_ms"]) >= {"mean", "median", "p10", "p90"}
    assert set(doc["phases"]) == set(PHASES)
    assert sum(doc["phases"][p]["ms"] for p in PHASES) == pytest.approx(doc["step_ms"]["mean"], abs=1e-9)
    assert sum(doc["phases"][p]["share"] for p in PHASES) == pytest.approx(1.0, abs=1e-5)
    assert doc["source"] == "trace, raw" and doc["steps"] == 2 and doc["framework"] == "torch"
    assert doc["compile_ms"] is None


def test_the_step_after_the_trace_window_is_not_an_unprofiled_step():
    from gapscope.analysis.results.breakdown import recorded_rows
    from gapscope.profilers.run_dir import mark_rows
    rows = mark_rows([{"step": i} for i in range(8)], 1, range(2, 5))
    assert [r["step"] for r in rows if r["traced"]] == [2, 3, 4, 5]
    # Only the window's steps are the ones the trace holds.
    assert [r["step"] for r in recorded_rows(rows, [3, 4])] == [3, 4]
    # Keras traces whole calls (here 2 updates each): the whole call after them is traced too.
    calls = [{"step": i, "execution_first_step": i - i % 2} for i in range(8)]
    marked = mark_rows(calls, 0, {2}, "execution_first_step")
    assert [r["step"] for r in marked if r["traced"]] == [2, 3, 4, 5]
    assert recorded_rows(marked, [2, 3], steps_per_execution=2) == [r for r in marked if r["traced"]]


def test_steps_that_hold_none_of_the_work_are_said(fixtures_dir, tmp_path):
    """Hardening: ProfilerStep spans of 1 ns gave 'step 0.000 ms', exit 0 and no note."""
    from gapscope.analysis.events.timeline import phase_timeline
    from gapscope.analysis.results.breakdown import outside_steps
    trace = Trace("torch", "hand-made", [
        Event("ProfilerStep#1", STEP, 0, 0.001, "host/1/1", step_num=1),
        Event("ProfilerStep#2", STEP, 100, 0.001, "host/1/1", step_num=2),
        _op("aten::addmm", 10, 40), _op("aten::relu", 60, 20), _op("aten::mm", 120, 30)])
    # Between the first step and the last (0 to 100 µs) 60 µs of ops, 0.001 µs inside a step.
    note = outside_steps(trace, phase_timeline(trace))
    assert note.startswith("warning: 100 % of the host ops' time lies outside every step")
    # Steps that follow each other and hold their ops: nothing to say.
    tiled = Trace("torch", "hand-made", [
        Event("ProfilerStep#1", STEP, 0, 100, "host/1/1", step_num=1),
        Event("ProfilerStep#2", STEP, 100, 100, "host/1/1", step_num=2),
        _op("aten::addmm", 10, 40), _op("aten::mm", 120, 30), _op("aten::cold", -5000, 4000)])
    assert outside_steps(tiled, phase_timeline(tiled)) is None
    # Through the command: the real fixture with its steps shrunk to 1 ns says so.
    doc = json.loads((fixtures_dir / "marked_two_steps.pt.trace.json").read_text())
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["dur"] = 0.001
    (tmp_path / "ns.pt.trace.json").write_text(json.dumps(doc))
    from click.testing import CliRunner

    from gapscope.cli import cli
    out = CliRunner().invoke(cli, ["breakdown", str(tmp_path / "ns.pt.trace.json"), "--format", "json"])
    assert any("lies outside every step" in n for n in json.loads(out.stdout)["notes"])
