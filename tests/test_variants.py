"""Variant names, combinations and refusals: each refusal is one clear line, never a silent change."""
import pytest

from gapscope.profilers.errors import UnsupportedVariantError
from gapscope.workloads.runners.execution_rows import expand_executions
from gapscope.workloads.matrix import load_matrix, matrix_names
from gapscope.workloads.settings import RunSettings
from gapscope.workloads.variants import names_for, resolve


def test_combination_sets_every_option_and_has_a_canonical_name():
    name, options = resolve("torch", "compile-reduce-overhead, high-precision,amp-fp16", True)
    assert name == "compile-reduce-overhead,high-precision,amp-fp16"
    assert options == {"compile_mode": "reduce-overhead", "matmul_precision": "high",
                       "amp_dtype": "float16"}
    assert resolve("torch", "eager", False) == ("default", {})
    assert resolve("keras", "jit,spe512,tfdata", False)[1] == {
        "jit_compile": True, "steps_per_execution": 512, "pipeline": "tfdata"}
    assert resolve("torch", "transforms,nw6,cache64", False)[1] == {
        "pipeline": "transforms", "num_workers": 6, "dynamo_cache_limit": 64}


@pytest.mark.parametrize("framework,combination,message", [
    ("torch", "scaler", "GradScaler only makes sense with float16"),
    ("torch", "amp-bf16,scaler", "GradScaler only makes sense with float16"),
    ("torch", "cudagraphs", "needs a CUDA GPU"),
    ("torch", "compile,compile-max-autotune", "disagree on compile_mode"),
    ("keras", "compile", "does not apply to keras"),
    ("keras", "spe600", "between 1 and 512"),
    ("keras-torch", "spe4", "steps_per_execution=1 only"),
    ("torch", "warp-speed", "unknown variant 'warp-speed'"),
    ("torch", "preload,nw2", "need no DataLoader workers"),
    ("torch", "torchscript,compile", "disagree on compile_mode"),
    ("torch", "compile-reduce-overhead,torchscript", "disagree on compile_mode"),
    ("torch", "eager,torchscript", "disagree on torchscript"),
    ("keras", "torchscript", "does not apply to keras"),
    ("keras-torch", "torchscript", "does not apply to keras-torch"),
])
def test_refusals(framework, combination, message):
    with pytest.raises(UnsupportedVariantError, match=message):
        resolve(framework, combination, cuda_available=False)


def test_torchscript_is_a_compiler_of_its_own():
    assert resolve("torch", "inference,torchscript", False) == (
        "inference,torchscript", {"inference": True, "torchscript": True})
    # On a GPU cudagraphs is allowed, but not beside TorchScript: both would compile the model.
    with pytest.raises(UnsupportedVariantError, match="disagree on compile_backend"):
        resolve("torch", "torchscript,cudagraphs", cuda_available=True)
    settings = RunSettings("mlp", "torch", variant="torchscript").with_variant(cuda_available=False)
    assert settings.torchscript and settings.compile_mode is None


def test_run_settings_resolve_their_variant():
    settings = RunSettings("mlp", "keras", variant="jit-auto,spe8").with_variant(cuda_available=False)
    assert settings.jit_compile == "auto" and settings.steps_per_execution == 8
    assert RunSettings.from_dict(settings.to_dict()) == settings


def test_every_framework_lists_its_variants():
    assert "compile-max-autotune" in names_for("torch") and "spe<N>" in names_for("keras")
    assert "tf-xla" in names_for("tf") and "tf-xla" not in names_for("keras")


@pytest.mark.parametrize("name", matrix_names())
def test_every_matrix_row_resolves_on_a_gpu_machine(name):
    """Rows are data: a typo in a variant would otherwise show only when that row runs."""
    matrix = load_matrix(name)
    assert matrix.baseline in {row.id for row in matrix.rows}
    assert len({row.id for row in matrix.rows}) == len(matrix.rows)
    for row in matrix.rows:
        resolve(row.framework, row.variant, cuda_available=True)


def test_seed_4060ti_has_every_blog_row():
    matrix = load_matrix("seed-4060ti")
    # torch 4 + keras 4 plain, keras 4 + torch 4 jit, keras 8 + torch 5 mixed precision
    assert len(matrix.rows) == 29
    assert {r.framework for r in matrix.rows} == {"torch", "keras"}


def test_steps_per_execution_rows_become_per_update_rows():
    # 2 calls of spe=4 over an epoch of 6 updates: the second call runs only 2 (epoch end).
    rows = [{"step": 0, "step_ms": 8.0, "loss": 2.0, "forward_ms": None},
            {"step": 1, "step_ms": 3.0, "loss": 1.5, "forward_ms": None}]
    out = expand_executions(rows, steps_per_execution=4, updates_per_epoch=6, total_updates=6)
    assert [r["step"] for r in out] == [0, 1, 2, 3, 4, 5]
    assert [r["step_ms"] for r in out] == [2.0] * 4 + [1.5] * 2
    assert [r["execution_first_step"] for r in out] == [0, 0, 0, 0, 4, 4]
    assert out[5]["loss"] == 1.5 and out[0]["forward_ms"] is None
