"""A small matrix run end to end: rows in their own processes, skips with reasons, resume."""
import json

import pytest

from gapscope.analysis.results.matrix_results import matrix_result
from gapscope.workloads import matrix as matrix_module
from gapscope.workloads.matrix import Matrix, MatrixRow, load_matrix, matrix_outcomes, run_matrix
from gapscope.workloads.settings import RunSettings

BASE = RunSettings(workload="", framework="", steps=10, warmup_steps=2, trace_steps=3)


@pytest.fixture(scope="module")
def tiny_matrix():
    return Matrix("tiny", "two real rows, a GPU-only row, an impossible row", "", "torch", (
        MatrixRow("torch", "mlp", "torch", "tensor-dataset", nw="0"),
        MatrixRow("keras-spe4", "mlp", "keras", "numpy,spe4", spe="4"),
        MatrixRow("gpu-only", "mlp", "torch", "amp-fp16", needs="cuda", why="tensor cores"),
        MatrixRow("bad", "mlp", "torch", "amp-bf16,scaler"),
    ))


@pytest.fixture(scope="module")
def matrix_run(tiny_matrix, tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setattr(matrix_module, "gpu_count", lambda: 0)
    out = tmp_path_factory.mktemp("matrices")
    seen = []
    outcomes = run_matrix(tiny_matrix, out, BASE, lambda row, outcome: seen.append((row.id, outcome)))
    return out, outcomes, seen


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_rows_complete_or_skip_with_their_reason(matrix_run):
    _, outcomes, seen = matrix_run
    assert [o.status for o in outcomes] == ["complete", "complete", "skipped", "skipped"]
    assert outcomes[2].reason == "needs a CUDA GPU: tensor cores"
    assert "GradScaler only makes sense with float16" in outcomes[3].reason
    assert [rid for rid, outcome in seen if outcome is None] == ["torch", "keras-spe4", "gpu-only", "bad"]


def test_result_table_has_ratio_phases_and_loss(tiny_matrix, matrix_run):
    out, outcomes, _ = matrix_run
    result = matrix_result(tiny_matrix, outcomes)
    torch_row, keras_row = result.rows[0], result.rows[1]
    # row / baseline steady step, from unprofiled steps; one repeat: no interval
    assert torch_row.step_ratio == 1.0 and torch_row.step_ratio_ci95 is None
    assert keras_row.step_ratio == pytest.approx(keras_row.step_ms / torch_row.step_ms, rel=1e-2)
    for row in (torch_row, keras_row):
        assert row.steps == 10 and row.time_s > 0 and row.final_loss > 0
        # five shares, each rounded to 4 decimals: the sum may be off by 5 x 0.00005
        assert sum(row.phase_share.values()) == pytest.approx(1.0, abs=2.5e-4 + 1e-9)
        assert row.phase_share["forward"] > 0 and row.cpu_load_percent is not None
    assert result.rows[2].time_s is None and json.dumps(result.to_json_dict())


def test_resume_runs_only_what_is_not_complete(tiny_matrix, matrix_run):
    out, outcomes, _ = matrix_run
    before = sorted(p.name for p in (out / "tiny").iterdir())
    seen = []
    again = run_matrix(tiny_matrix, out, BASE, lambda row, outcome: seen.append((row.id, outcome)))
    assert [o.run_dir for o in again[:2]] == [o.run_dir for o in outcomes[:2]]
    assert [rid for rid, outcome in seen if outcome is None] == ["gpu-only", "bad"]
    assert sorted(p.name for p in (out / "tiny").iterdir()) == before
    assert [o.status for o in matrix_outcomes(tiny_matrix, out)] == [o.status for o in outcomes]


def test_other_settings_refuse_to_mix_into_the_same_folder(tiny_matrix, matrix_run):
    out, _, _ = matrix_run
    from gapscope.profilers.errors import GapscopeInputError
    with pytest.raises(GapscopeInputError, match="other settings"):
        run_matrix(tiny_matrix, out, RunSettings(workload="", framework="", steps=11))


def test_unknown_matrix_is_a_one_line_error():
    from gapscope.profilers.errors import GapscopeInputError
    with pytest.raises(GapscopeInputError, match="unknown matrix 'nope'; known: seed-4060ti"):
        load_matrix("nope")


def test_a_row_without_losses_has_none_not_a_crash(tmp_path, monkeypatch):
    """Keras predict (an inference row, as in seed-graph-mode) records no loss per step."""
    monkeypatch.setattr(matrix_module, "gpu_count", lambda: 0)
    matrix = Matrix("predict", "one Keras inference row", "", "predict",
                    (MatrixRow("predict", "mlp", "keras", "inference,numpy"),))
    (row,) = matrix_result(matrix, run_matrix(matrix, tmp_path, BASE)).rows
    assert row.status == "complete" and row.step_ms > 0
    assert row.final_loss is None and row.epoch_loss == [None]
