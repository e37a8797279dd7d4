"""TensorBoard summaries in run directories, read back the way TensorBoard reads them."""
from __future__ import annotations

import shutil

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

import user_loops
from gapscope.workloads.runners.after_run import write_after_run
from gapscope.analysis.tensorboard.summaries import SUFFIX, write_run_summaries
from gapscope.profilers.phases import PHASES


def _read(run_dir):
    accumulator = EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    accumulator.Reload()
    tags = accumulator.Tags()["tensors"]
    values = {tag: [(e.step, tensor_util.make_ndarray(e.tensor_proto).item())
                    for e in accumulator.Tensors(tag)] for tag in tags}
    return values


@pytest.fixture(scope="module")
def torch_capture(tmp_path_factory):
    return user_loops.torch_loop(tmp_path_factory.mktemp("summaries"))


def test_a_capture_writes_scalars_per_step_and_the_breakdown_text(torch_capture):
    values = _read(torch_capture.run_dir)
    steps = user_loops.BATCHES
    assert [s for s, _ in values["step_ms"]] == list(range(steps))
    for phase in PHASES:
        assert len(values[f"phase_ms/{phase}"]) == steps
    # The five phases of a step add up to the step time TensorBoard shows for it.
    for i in range(steps):
        parts = sum(values[f"phase_ms/{p}"][i][1] for p in PHASES)
        assert parts == pytest.approx(values["step_ms"][i][1], rel=1e-4, abs=1e-4)
    assert len(values["loss"]) == steps
    table = values["breakdown"][0][1].decode()
    assert table.startswith("| phase |") and "| backward |" in table and "**step**" in table
    assert "| framework | torch |" in values["run"][0][1].decode()


def test_rewriting_replaces_gapscope_s_own_event_file(torch_capture):
    before = sorted(torch_capture.run_dir.glob(f"events.out.tfevents.*{SUFFIX}"))
    write_run_summaries(torch_capture.run_dir)
    after = sorted(torch_capture.run_dir.glob(f"events.out.tfevents.*{SUFFIX}"))
    assert len(before) == len(after) == 1
    assert len(_read(torch_capture.run_dir)["step_ms"]) == user_loops.BATCHES


def test_a_keras_run_gets_phase_scalars_from_its_trace(tmp_path):
    cap, _ = user_loops.keras_fit(tmp_path)
    values = _read(cap.run_dir)
    assert len(values["step_ms"]) == user_loops.BATCHES
    # Timers cannot see inside Keras' compiled step: the traced steps carry the phases.
    assert [s for s, _ in values["phase_ms/forward"]] == [6, 7, 8, 9]
    assert all(ms > 0 for _, ms in values["phase_ms/backward"])


def test_runs_made_by_gapscope_run_get_them_after_the_run(torch_run, tmp_path):
    copy = tmp_path / torch_run.name
    shutil.copytree(torch_run, copy)
    for old in copy.glob("events.out.tfevents.*"):
        old.unlink()
    assert write_after_run(copy) is None
    values = _read(copy)
    assert "step_ms" in values and "phase_ms/forward" in values and "breakdown" in values


def test_a_problem_is_recorded_not_raised(tmp_path):
    (tmp_path / "manifest.json").write_text('{"run_id": "x", "status": "complete"}')
    problem = write_after_run(tmp_path)
    assert problem and "steps.csv" in problem
    assert "summaries_error" in (tmp_path / "manifest.json").read_text()
