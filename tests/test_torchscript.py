"""The torchscript variant: scripted where torch.jit.script compiles the model, traced where it
cannot (and said so), refused where a trace would be wrong; its cost is compile time."""
import json

import pytest
import torch
from torch import nn

from gapscope.analysis.results.distributed_breakdown import breakdown_of
from gapscope.analysis.readers.run_dir import read_steps_csv
from gapscope.analysis.measures.variant_notes import variant_notes
from gapscope.profilers.errors import UnsupportedVariantError
from gapscope.workloads.launch import launch
from gapscope.workloads.matrix import load_matrix
from gapscope.workloads.settings import RunSettings
from gapscope.workloads.runners.torchscript import LazyTorchScript, torchscript
from gapscope.workloads.variants import resolve

SHORT = dict(steps=12, warmup_steps=3, trace_steps=4)


class Unscriptable(nn.Module):
    """`**options` in forward is beyond TorchScript's language; the ops are plain."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x, **options):
        return torch.relu(self.linear(x))


class UnscriptableBranch(Unscriptable):
    """And a branch on the data: a trace would keep the first batch's side for every batch."""

    def forward(self, x, **options):
        return self.linear(x) if x.mean() > 0 else torch.relu(self.linear(x))


def _batch(seed, shift=0.0):
    return torch.randn(8, 4, generator=torch.Generator().manual_seed(seed)) + shift


def test_a_plain_model_is_scripted_and_computes_what_eager_does():
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2))
    compiled, facts = torchscript(model, _batch(0))
    assert facts["torchscript"] == "script" and facts["torchscript_ms"] > 0
    assert "torchscript_script_error" not in facts
    assert isinstance(compiled, torch.jit.ScriptModule)
    torch.testing.assert_close(compiled(_batch(1)), model(_batch(1)))


def test_an_unscriptable_model_falls_back_to_trace_and_says_why():
    torch.manual_seed(0)
    model = Unscriptable()
    forward = LazyTorchScript(model)
    first = forward(_batch(0))
    assert forward.facts["torchscript"] == "trace"
    assert forward.facts["torchscript_script_error"].startswith("NotSupportedError:")
    assert "\n" not in forward.facts["torchscript_script_error"]
    torch.testing.assert_close(first, model(_batch(0)))
    # The trace holds for another batch, and it shares the model's parameters: an optimizer
    # stepping the model's own parameters changes what the traced module computes.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    forward(_batch(1)).sum().backward()
    optimizer.step()
    torch.testing.assert_close(forward(_batch(2)), model(_batch(2)))
    assert not torch.allclose(forward(_batch(0)), first)


def test_a_trace_that_would_be_wrong_is_refused():
    with pytest.raises(UnsupportedVariantError, match=r"torch.jit.trace would be wrong .*boolean"):
        torchscript(UnscriptableBranch(), _batch(0, shift=1.0))


def test_a_disabled_torchscript_is_refused_not_run_eager(monkeypatch):
    monkeypatch.setattr(torch.jit._script, "_enabled", False)  # what PYTORCH_JIT=0 sets
    with pytest.raises(UnsupportedVariantError, match="TorchScript is disabled"):
        torchscript(nn.Linear(4, 2), _batch(0))


def test_the_fallback_traces_inside_inference_mode_too():
    """An inference run first calls the model inside torch.inference_mode."""
    torch.manual_seed(0)
    model = Unscriptable().eval()
    forward = LazyTorchScript(model)
    with torch.inference_mode():
        out = forward(_batch(0))
        again = forward(_batch(1))
    assert forward.facts["torchscript"] == "trace"
    torch.testing.assert_close(out, model(_batch(0)))
    torch.testing.assert_close(again, model(_batch(1)))


def test_the_path_taken_is_a_breakdown_note_and_odd_manifests_say_nothing():
    traced = {"torchscript": "trace", "torchscript_ms": 12.4,
              "torchscript_script_error": "NotSupportedError: Compiled functions can't take ..."}
    (note,) = variant_notes(traced)
    assert note.startswith("TorchScript: torch.jit.trace on the first batch (12 ms, inside compile)")
    assert note.endswith("torch.jit.script failed: NotSupportedError: Compiled functions can't take ...")
    assert variant_notes({"torchscript": "script", "torchscript_ms": 3}) == [
        "TorchScript: torch.jit.script (3 ms, inside compile)"]
    for odd in ({}, {"torchscript": ["script"]}, {"torchscript": "magic"}, {"torchscript": None}):
        assert variant_notes(odd) == []
    assert variant_notes({"torchscript": "script", "torchscript_ms": "3"}) == ["TorchScript: torch.jit.script"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchscript_runs")
    return {variant: launch(RunSettings("mlp", "torch", variant, **SHORT), out)
            for variant in ("torchscript", "torchscript,inference")}


@pytest.mark.parametrize("variant,phases", [
    ("torchscript", ("data_load", "forward", "backward", "optimizer")),
    ("torchscript,inference", ("data_load", "forward")),
])
def test_a_torchscript_run_is_scripted_adds_up_and_pays_in_compile(runs, variant, phases):
    outcome = runs[variant]
    assert outcome.status == "complete", (outcome.error, (outcome.run_dir / "run.log").read_text()[-3000:])
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    assert manifest["torchscript"] == "script" and manifest["settings"]["torchscript"] is True
    result = breakdown_of(outcome.run_dir)
    result.self_check()  # the phases add up to the step
    means = result.phase_means()
    for phase in phases:
        assert means[phase] > 0, (phase, result.phase_sources, result.notes)
    assert f"TorchScript: torch.jit.script ({manifest['torchscript_ms']:.0f} ms, inside compile)" in result.notes
    # Scripted at the first call: inside the first step's forward, so in compile time.
    first = read_steps_csv(outcome.run_dir / "steps.csv")[0]
    assert first["forward_ms"] >= manifest["torchscript_ms"] > 0
    assert result.compile_ms > 0


def test_dynamic_is_refused_not_traced_down_one_branch(tmp_path):
    """seed 001's `if torch.mean(x) > THRESHOLD` reads a module global, which TorchScript
    cannot script, and a trace would keep the first batch's branch for all of them."""
    outcome = launch(RunSettings("dynamic", "torch", "torchscript", **SHORT), tmp_path)
    assert outcome.status == "failed" and outcome.exit_code == 2
    assert outcome.error.startswith("torchscript: torch.jit.script failed (RuntimeError: ")
    assert "torch.jit.trace would be wrong for other inputs: Converting a tensor to a Python boolean" \
        in outcome.error


def test_seed_graph_mode_matrix_rows_resolve_here():
    matrix = load_matrix("seed-graph-mode")
    assert matrix.baseline == "keras-graph"
    assert {row.workload for row in matrix.rows} == {"cnn"}
    settings = {row.id: resolve(row.framework, row.variant, cuda_available=False)[1]
                for row in matrix.rows}
    assert all(s.get("inference") for s in settings.values())
    assert settings["torch-torchscript"].get("torchscript")
    assert settings["torch-compile"].get("compile_mode") == "default"
    assert not settings["keras-graph"].get("jit_compile") and settings["keras-graph-xla"]["jit_compile"]
    assert all(row.needs == "" for row in matrix.rows)  # every row runs on a CPU


def test_a_torchscript_runs_ops_are_placed_in_its_layers(runs):
    """No layer ranges in a scripted model: its forward's ops are placed by order (aten::linear
    #1 dense1, #2 logits; aten::relu the one layer with ReLU) and its loss by name, every
    forward op of the mlp's three layers; its kernels add up to the forward's own op time."""
    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.results.layers import layer_breakdown
    run = load_run(runs["torchscript"].run_dir)
    found = layer_breakdown(run)
    assert not found.rows and found.kernels["source"] == "host ops"
    rows = {r["name"]: r for r in found.kernels["layers"]}
    assert set(rows) == {"dense1", "logits", "loss"}
    assert all(rows[n]["forward"]["kernels"] >= 1 for n in rows)
    assert found.kernels["mixed"]["forward"]["kernels"] == 0
    assert found.kernels["outside"]["forward"]["kernels"] == 0
    assert found.kernels["placed_by"]["order"] >= 3 * len(run.timeline.steps)
