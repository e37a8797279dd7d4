"""Suggestions: which variant each rule proposes for a real run, from figures set by hand;
the verdict line names the phase that carries the gap; --check-suggestions measures the
suggestion as an A/B and reports the paired ratio of the runs it made."""
from __future__ import annotations

import copy
import dataclasses
import json
import math

import pytest
from click.testing import CliRunner

from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.explain import explain
from gapscope.analysis.renderers import evidence_text
from gapscope.analysis.renderers.compare_columns import verdict_lines
from gapscope.analysis.model.run import load_measurement, load_run
from gapscope.analysis.results.suggestions import Rule, Suggestion, suggest
from gapscope.cli import cli
from conftest import compare_exit_code

STEP = 10.0


def _phases(**ms):
    """Phase times (ms) of a 10 ms step; `other` takes the rest."""
    phases = {"data_load": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0, **ms}
    phases["other"] = STEP - sum(phases.values())
    return phases


@pytest.fixture(scope="module")
def torch_explained(torch_run):
    return explain(load_run(torch_run))


@pytest.fixture(scope="module")
def keras_explained(keras_run):
    return explain(load_run(keras_run))


def _with_variant(run, variant: str):
    run = copy.copy(run)
    run.breakdown = copy.copy(run.breakdown)
    run.breakdown.variant = variant
    return run


def test_slow_input_suggests_the_preloaded_pipeline(torch_explained):
    found = suggest(torch_explained, _phases(data_load=5.0, forward=4.0), {"data_load": 3.0}, STEP)
    assert [(s.rule, s.current, s.suggested) for s in found] == [
        (Rule.DATA_LOAD, "mlp:torch", "mlp:torch:preload")]
    assert found[0].figures == {"data_load_ms": 5.0, "data_load_share": 0.5}
    assert "data_load 5.000 ms, 50 % of the step" in evidence_text.suggestion(found[0])


def test_a_pipeline_is_replaced_not_added_to(torch_explained):
    run = _with_variant(torch_explained, "transforms,nw2,amp-bf16")
    (found,) = suggest(run, _phases(data_load=5.0, forward=4.0), {"data_load": 3.0}, STEP)
    assert found.suggested == "mlp:torch:amp-bf16,preload"


def test_below_the_threshold_or_within_noise_nothing_is_suggested(torch_explained):
    assert suggest(torch_explained, _phases(data_load=1.4, forward=8.0), {"data_load": 1.0}, STEP) == []
    # Half the step in data_load, but its gap to the other run is noise (not in `gaps`).
    assert suggest(torch_explained, _phases(data_load=5.0, forward=4.0), {}, STEP) == []


def test_per_step_overhead_suggests_a_compiler_and_for_keras_more_steps_per_call(
        torch_explained, keras_explained):
    overhead = _phases(forward=3.0, backward=3.0)  # other 4 ms: 40 % of the step
    found = suggest(torch_explained, overhead, {"other": 2.0}, STEP)
    assert [(s.rule, s.suggested) for s in found] == [(Rule.DISPATCH, "mlp:torch:compile")]
    found = suggest(keras_explained, overhead, {"other": 2.0}, STEP)
    assert [(s.rule, s.suggested) for s in found] == [
        (Rule.DISPATCH, "mlp:keras:jit"), (Rule.STEPS_PER_CALL, "mlp:keras:spe8")]
    # Already compiled: no compiler to suggest, and eager is dropped, not contradicted.
    assert suggest(_with_variant(torch_explained, "compile"), overhead, {"other": 2.0}, STEP) == []
    (eager,) = suggest(_with_variant(torch_explained, "eager"), overhead, {"other": 2.0}, STEP)
    assert eager.suggested == "mlp:torch:compile"


def _big_kernels(run):
    """The run with its kernels set long (500 µs each): the small-kernel rule, which fires
    first on a fast machine's MLP, stays out of the way."""
    run = copy.copy(run)
    run.kernels = dataclasses.replace(run.kernels, mean_us=500.0)
    return run


def test_compute_bound_suggests_a_compiler(torch_explained, keras_explained):
    compute = _phases(forward=3.0, backward=4.0, optimizer=2.0)  # 70 % in forward + backward
    (found,) = suggest(_big_kernels(torch_explained), compute, {"backward": 1.5}, STEP)
    assert (found.rule, found.suggested, found.figures) == (
        Rule.COMPUTE, "mlp:torch:compile", {"compute_share": 0.7})
    (keras,) = suggest(_big_kernels(keras_explained), compute, {"forward": 0.5}, STEP)
    assert (keras.rule, keras.suggested) == (Rule.COMPUTE, "mlp:keras:jit")
    # On this CPU no lower precision is suggested; slower only in the optimizer: nothing.
    assert suggest(_big_kernels(torch_explained), compute, {"optimizer": 1.0}, STEP) == []


def test_many_small_kernels_suggest_a_compiler(torch_explained):
    run = copy.copy(torch_explained)
    run.kernels = dataclasses.replace(run.kernels, mean_us=5.0, per_step=120.0)
    (found,) = suggest(run, _phases(forward=2.0, backward=2.0), {"forward": 0.5}, STEP)
    assert (found.rule, found.suggested, found.figures) == (
        Rule.SMALL_KERNELS, "mlp:torch:compile", {"kernels_per_step": 120.0, "mean_kernel_us": 5.0})


def test_verdict_names_the_phase_that_carries_the_gap(torch_run, keras_run):
    from gapscope.analysis.renderers import evidence_text
    from gapscope.analysis.results.compare import compare
    comparison = compare([explain(load_run(keras_run)), explain(load_run(torch_run))])
    pair = comparison.pairs[0]
    line = verdict_lines(comparison)[0]
    carriers = [g for g in pair.phases if g.share_of_gap and g.share_of_gap > 0 and not g.within_noise]
    if pair.inconclusive:  # the suite ran beside other work: no phase is named as a fact
        assert line.startswith("INCONCLUSIVE: ") and " of it in " not in line
    elif pair.within_noise or not carriers:
        assert " of it in " not in line
    else:
        top = max(carriers, key=lambda g: g.share_of_gap)
        # With the biggest cause inside that phase where one carries a share of its delta.
        where = (evidence_text.cause(pair.cause) if pair.cause else
                 f"{top.phase} ({top.delta_ms:+.3f} ms)")
        assert line.endswith(f"{100 * top.share_of_gap:.0f} % of it in {where}")


def test_suggestions_of_a_real_pair_come_from_its_phases_beyond_noise(torch_run, keras_run):
    from gapscope.analysis.results.compare import compare
    pair = compare([explain(load_run(keras_run)), explain(load_run(torch_run))]).pairs[0]
    b_slower = pair.gap_ms > 0
    triggers = {Rule.DATA_LOAD: {"data_load"}, Rule.DISPATCH: {"other"},
                Rule.STEPS_PER_CALL: {"other"}, Rule.COMPUTE: {"forward", "backward"},
                Rule.SMALL_KERNELS: {"forward", "backward", "optimizer"},
                Rule.FUSED_APART: {"forward", "backward", "optimizer"}}
    for s in pair.suggestions:
        assert s.run_label == (pair.b_label if b_slower else pair.a_label)
        assert any(not g.within_noise and (g.delta_ms if b_slower else -g.delta_ms) > 0
                   for g in pair.phases if g.phase in triggers[s.rule]), s


def test_check_suggestions_measures_the_suggested_variant(torch_run, tmp_path, monkeypatch):
    """The check is a real A/B of the current configuration against the suggested one. Which
    suggestion a run gets depends on its figures (noisy on a shared machine); here it is set,
    so that the test is about the measuring."""
    def preload_for_b(pair, a, b):
        return [Suggestion(Rule.DATA_LOAD, pair.b_label, "mlp:torch", "mlp:torch:preload",
                           {"data_load_ms": 1.0, "data_load_share": 0.5})]
    monkeypatch.setattr("gapscope.analysis.results.compare._suggestions", preload_for_b)
    out = tmp_path / "runs"
    result = CliRunner().invoke(cli, [
        "compare", str(torch_run), str(torch_run), "--check-suggestions", "--repeats", "2",
        "--steps", "16", "--warmup", "2", "--trace-steps", "4", "--out", str(out), "-q",
        "--format", "json"])
    assert result.exit_code == compare_exit_code(torch_run), result.output
    (suggestion,) = json.loads(result.stdout)["comparisons"][0]["suggestions"]
    check = suggestion["check"]
    # The ratio is the geometric mean of the paired step ratios of the runs it made.
    current, suggested = load_measurement(check["folder"])
    assert [r.manifest["variant"] for r in current + suggested] == ["default"] * 2 + ["preload"] * 2
    steps = [[breakdown(r).to_json_dict()["step_ms"]["mean"] for r in runs]
             for runs in (current, suggested)]
    expected = math.exp(sum(math.log(b / a) for a, b in zip(*steps)) / 2)
    assert check["ratio"] == pytest.approx(expected, rel=1e-3)
    low, high = check["ratio_ci95"]
    assert check["within_noise"] == (low <= 1 <= high)
    outcome = ("it helped" if not check["within_noise"] and check["ratio"] < 1 else
               "within noise" if check["within_noise"] else "it made the step slower")
    assert suggestion["text"].startswith("try mlp:torch:preload (data loading: data_load 1.000 ms")
    assert f"measured {check['ratio']:.2f}x" in suggestion["text"] and outcome in suggestion["text"]


def test_a_suggestion_that_cannot_run_here_is_said_not_fatal(torch_run, tmp_path, monkeypatch):
    def gpu_only(pair, a, b):
        return [Suggestion(Rule.FP32_GPU, pair.b_label, "mlp:torch", "mlp:torch:cudagraphs",
                           {"compute_share": 0.9})]
    monkeypatch.setattr("gapscope.analysis.results.compare._suggestions", gpu_only)
    monkeypatch.setattr("gapscope.workloads.ab.gpu_count", lambda: 0)
    result = CliRunner().invoke(cli, ["compare", str(torch_run), str(torch_run), "--check-suggestions",
                                      "--out", str(tmp_path / "runs"), "-q"])
    assert result.exit_code == compare_exit_code(torch_run), result.output
    assert "mlp:torch:cudagraphs not checked:" in result.output and "CUDA" in result.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_suggestion_already_among_the_runs_gives_its_figure_not_a_try(torch_explained,
                                                                         monkeypatch):
    """Issue 23 item 5: 'mlp torch compile is 1.11x slower than mlp torch', then 'try
    mlp:torch:compile' contradicts the table. The compiled run is there: its figure is said."""
    from gapscope.analysis.results.compare import compare
    def compile_for_b(pair, a, b):
        return [Suggestion(Rule.DISPATCH, pair.b_label, "mlp:torch", "mlp:torch:compile",
                           {"other_ms": 4.0, "other_share": 0.4})]
    monkeypatch.setattr("gapscope.analysis.results.compare._suggestions", compile_for_b)
    compiled = _with_variant(torch_explained, "compile")
    compiled.breakdown.step_times_ms = [1.11 * t for t in compiled.breakdown.step_times_ms]
    comparison = compare([compiled, _with_variant(torch_explained, "default")])
    pair = comparison.pairs[0]
    (s,) = pair.suggestions
    assert s.already == {"run": pair.a_label,
                         "ratio": pytest.approx(pair.a_step_ms / pair.b_step_ms, abs=1e-4)}
    assert pair.a_step_ms > pair.b_step_ms
    text = evidence_text.suggestion(s)
    assert text.startswith(f"mlp:torch:compile: already measured here: "
                           f"{pair.a_step_ms / pair.b_step_ms:.2f}x slower than {pair.b_label}")
    assert "try" not in text
