"""Real short runs of the framework paths and variants on the CPU: each completes, its steps add
up, and the phases that variant runs are seen."""
import json

import pytest

from gapscope.analysis.results.distributed_breakdown import breakdown_of
from gapscope.workloads.launch import launch
from gapscope.workloads.settings import RunSettings

SHORT = dict(steps=12, warmup_steps=3, trace_steps=4)
# spe4 runs calls of 4 updates: warm-up 0-3, traced 4-7, the profiler's teardown call 8-11;
# 16 steps leave one unprofiled call.
LONGER = {("mlp", "keras", "spe4"): dict(steps=16)}
CASES = [
    # (workload, framework, variant, phases that must be > 0 in the trace breakdown)
    ("mlp", "torch", "compile", ("data_load", "forward", "backward", "optimizer")),
    ("mlp", "torch", "preload", ("data_load", "forward", "backward", "optimizer")),
    ("mlp", "torch", "transforms,nw2", ("data_load", "forward", "backward", "optimizer")),
    ("mlp", "torch", "amp-bf16", ("forward", "backward", "optimizer")),
    ("cnn", "torch", "inference", ("data_load", "forward")),
    ("mlp", "keras", "spe4", ("forward", "backward", "optimizer")),
    ("mlp", "keras", "tfdata", ("data_load", "forward", "backward", "optimizer")),
    ("mlp", "keras-torch", "default", ("forward", "backward", "optimizer")),
    ("linreg", "tf", "tf-eager", ("data_load", "forward", "backward", "optimizer")),
    ("linreg", "tf", "tf-function", ("forward", "backward", "optimizer")),
    ("dynamic", "keras", "default", ("forward", "backward", "optimizer")),
]


@pytest.fixture(scope="module")
def variant_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("variant_runs")
    return {case[:3]: launch(RunSettings(*case[:3], **{**SHORT, **LONGER.get(case[:3], {})}), out)
            for case in CASES}


@pytest.mark.parametrize("workload,framework,variant,phases", CASES,
                         ids=[f"{c[1]}-{c[2]}-{c[0]}" for c in CASES])
def test_variant_runs_and_adds_up(variant_runs, workload, framework, variant, phases):
    outcome = variant_runs[(workload, framework, variant)]
    assert outcome.status == "complete", (outcome.error, (outcome.run_dir / "run.log").read_text()[-3000:])
    manifest = json.loads((outcome.run_dir / "manifest.json").read_text())
    assert manifest["variant"] == variant
    result = breakdown_of(outcome.run_dir)
    result.self_check()
    assert result.source in ("timers", "trace, compensated") and result.unprofiled and result.compile_ms is not None
    means = result.phase_means()
    for phase in phases:
        assert means[phase] > 0, (phase, result.phase_sources, result.notes)


def test_keras_jit_leaves_hlo_dumps_for_phase_mapping(tmp_path):
    outcome = launch(RunSettings("mlp", "keras", "jit", **SHORT), tmp_path)
    assert outcome.status == "complete", outcome.error
    dumps = list((outcome.run_dir / "xla_dump").glob("*after_optimizations.txt"))
    assert dumps and any("gapscope_forward" in d.read_text() for d in dumps)
    # Its XLA ops find their layers through that metadata.
    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.results.layers import layer_breakdown
    layers = layer_breakdown(load_run(outcome.run_dir))
    assert layers.row("dense1").forward_ms > 0 and layers.row("logits").backward_ms > 0


def test_spe_warmup_ends_on_a_call_boundary(variant_runs):
    # spe4 with --warmup 3: updates 0-3 run in one compiled call, so none of them is steady and
    # the steady state starts at update 4; the traced figures come from calls after it.
    outcome = variant_runs[("mlp", "keras", "spe4")]
    result = breakdown_of(outcome.run_dir)
    assert any("warm-up taken as 4 updates, not 3" in n for n in result.notes), result.notes
    assert result.steps and min(s.step for s in result.steps) >= 4


def test_keras_on_torch_layers_come_from_the_same_ranges_as_torchs(variant_runs):
    # A Keras layer is a torch module on the torch backend: the runner's layer ranges wrap it
    # in the traced window, and backward nodes link to it by sequence number.
    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.results.layers import layer_breakdown
    layers = layer_breakdown(load_run(variant_runs[("mlp", "keras-torch", "default")].run_dir))
    assert [r.name for r in layers.rows] == ["dense1", "logits"]
    assert all(r.forward_ms > 0 and r.backward_ms > 0 for r in layers.rows)
