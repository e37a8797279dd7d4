"""Real runs of the MLP in PyTorch and Keras/TF on the CPU: run directory, traces, breakdown."""
import csv
import json
import statistics

import pytest

from gapscope.analysis.results.distributed_breakdown import breakdown_of
from conftest import SMALL_RUN

# Steady steps outside the trace window and the step after it (the profiler's teardown).
UNPROFILED_STEPS = SMALL_RUN["steps"] - SMALL_RUN["warmup_steps"] - SMALL_RUN["trace_steps"] - 1


@pytest.mark.parametrize("framework", ["torch", "keras"])
def test_run_directory_layout_and_manifest(framework, request):
    run_dir = request.getfixturevalue(f"{framework}_run")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["error"] is None
    assert manifest["run_id"] == run_dir.name
    assert manifest["workload"] == "mlp" and manifest["framework"] == framework
    assert manifest["settings"]["steps"] == SMALL_RUN["steps"]
    assert manifest["versions"]["python"] and manifest["versions"]["torch"]
    assert manifest["versions"]["keras"] and manifest["versions"]["tensorflow"]
    assert manifest["device"] and manifest["host"] and manifest["started_at"] <= manifest["ended_at"]
    # The same architecture in both frameworks: 100*128+128 + 128*10+10
    assert manifest["parameters"] == 14_218
    if framework == "torch":
        assert list(run_dir.glob("*.pt.trace.json.gz"))
        # The profiler records the last steps: every unprofiled step came before it started.
        assert manifest["trace_window"] == [SMALL_RUN["steps"] - SMALL_RUN["trace_steps"],
                                            SMALL_RUN["steps"] - 1]
    else:
        assert list(run_dir.glob("plugins/profile/*/*.xplane.pb"))


@pytest.mark.parametrize("framework", ["torch", "keras"])
def test_every_step_timed_and_loss_falls(framework, request):
    run_dir = request.getfixturevalue(f"{framework}_run")
    with open(run_dir / "steps.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == SMALL_RUN["steps"]
    assert sum(int(r["warmup"]) for r in rows) == SMALL_RUN["warmup_steps"]
    assert sum(int(r["traced"]) for r in rows) >= SMALL_RUN["trace_steps"]
    losses = [float(r["loss"]) for r in rows]
    assert statistics.fmean(losses[-5:]) < statistics.fmean(losses[:5])


@pytest.mark.parametrize("framework", ["torch", "keras"])
def test_trace_breakdown_has_all_marked_phases_and_adds_up(framework, request):
    result = breakdown_of(request.getfixturevalue(f"{framework}_run"))
    result.self_check()
    doc = result.to_json_dict()
    # torch eager: the timers see every phase; keras fit: only the compensated trace does.
    assert doc["source"] == {"torch": "timers", "keras": "trace, compensated"}[framework]
    assert doc["step_source"] == "unprofiled steps"
    assert doc["steps"] == UNPROFILED_STEPS
    assert len(doc["per_step"]) == SMALL_RUN["trace_steps"]
    for phase in ("forward", "backward", "optimizer"):
        assert doc["phases"][phase]["ms"] > 0, phase
    assert sum(p["ms"] for p in doc["phases"].values()) == pytest.approx(doc["step_ms"]["mean"], abs=1e-6)
    assert doc["compile_ms"] is not None and doc["compile_ms"] > 0
    assert doc["unidentified_phases"] == []


def test_torch_timers_see_every_phase(torch_run):
    result = breakdown_of(torch_run, source="timers")
    result.self_check()
    means = result.phase_means()
    assert all(means[p] > 0 for p in ("data_load", "forward", "backward", "optimizer"))
    assert len(result.steps) == UNPROFILED_STEPS


def test_keras_timers_say_phases_need_a_trace(keras_run):
    result = breakdown_of(keras_run, source="timers")
    assert result.unidentified_phases == ["data_load", "forward", "backward", "optimizer"]
    assert result.phase_means()["other"] == pytest.approx(result.step_stats()["mean"])
