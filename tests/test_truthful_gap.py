"""The step time and the gap come from unprofiled steps; the trace only splits them: hand-computed
estimates, real torch/Keras runs against their own steps.csv, and the interleaved A/B command."""
import json
import statistics

import numpy as np
import pytest
from click.testing import CliRunner

from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.compare import compare
from gapscope.analysis.results.explain import explain, explain_run
from gapscope.analysis.results.phase_estimate import PhaseSamples, estimate
from gapscope.analysis.results.records import PhaseSource
from gapscope.analysis.model.run import load_run
from gapscope.cli import cli
from gapscope.profilers.phases import MARKED_PHASES, PHASES
from conftest import compare_exit_code


def _figures(result):
    return {p: round(f.ms, 9) for p, f in result.phases.items()}


def test_compiled_step_phases_are_trace_shares_of_the_unprofiled_step():
    # Unprofiled steps 10 ms; two traced steps recorded as [2, 4, 4, 1, 1] = 12 ms, and the
    # timers clocked them at 12 ms too: the profiler cost 2 ms. Shares 1/6, 1/3, 1/3, 1/12, 1/12
    # of 10 ms.
    samples = PhaseSamples(np.full(4, 10.0), {}, np.array([[2, 4, 4, 1, 1]] * 2, float),
                           np.full(2, 12.0))
    result = estimate(samples)
    assert result.step_ms == 10.0 and result.source == PhaseSource.COMPENSATED
    assert [round(result.phases[p].ms, 9) for p in PHASES] == [1.666666667, 3.333333333,
                                                              3.333333333, 0.833333333, 0.833333333]
    assert result.phases["forward"].trace_ms == 4.0
    # Identical steps: no noise, so no interval to state.
    assert result.step_ci95 is None


def test_timers_win_where_they_see_a_phase_and_the_trace_splits_the_rest():
    # data_load timed at 1 ms on unprofiled 10 ms steps; the trace splits the other 9 ms over
    # forward 4, backward 4, optimizer 1, and other 1 + 2 ms the timers saw outside the trace's
    # step (the loop around the traced call): 4 : 4 : 1 : 3 of 9.
    samples = PhaseSamples(np.full(3, 10.0), {"data_load": np.full(3, 1.0)},
                           np.array([[2, 4, 4, 1, 1]], float), np.array([14.0]))
    result = estimate(samples)
    assert result.phases["data_load"].source == PhaseSource.TIMERS
    assert result.phases["forward"].source == PhaseSource.COMPENSATED
    assert _figures(result) == {"data_load": 1.0, "forward": 3.0, "backward": 3.0,
                                "optimizer": 0.75, "other": 2.25}


def test_a_foreign_trace_is_raw_and_says_so():
    samples = PhaseSamples(None, {}, np.array([[2, 4, 4, 1, 1], [2, 6, 4, 1, 1]], float))
    result = estimate(samples)
    assert result.source == PhaseSource.RAW and result.step_ms == 13.0
    assert result.phases["forward"].ms == 5.0
    # Two different steps: bootstrap resamples differ, the interval holds the mean.
    low, high = result.step_ci95
    assert 12.0 <= low <= 13.0 <= high <= 14.0


def _steady_untraced(run_dir):
    run = load_run(run_dir)
    return run, [r for r in run.rows[run.warmup_steps:] if not r["traced"]]


def test_torch_eager_run_takes_every_figure_from_the_unprofiled_timers(torch_run):
    run, rows = _steady_untraced(torch_run)
    result = breakdown(run)
    result.self_check()
    assert result.source == PhaseSource.TIMERS and result.unprofiled
    assert result.step_stats()["mean"] == pytest.approx(statistics.fmean(r["step_ms"] for r in rows))
    for phase in MARKED_PHASES:
        assert result.phases[phase].ms == pytest.approx(statistics.fmean(r[f"{phase}_ms"] for r in rows))
    low, high = result.step_ci95
    assert low < result.step_stats()["mean"] < high


def test_compensated_phases_are_the_traced_shares_of_the_unprofiled_step(torch_run):
    # Recomputed by hand from the run's own files: the traced steps' phases as the trace
    # recorded them (plus, in other, what the step timers saw outside the trace's step event),
    # each as its share of the traced step, times the mean unprofiled step. How close that lands
    # to the timers' truth is measured by benchmarks/compensation_check.py (noise-bound).
    run, rows = _steady_untraced(torch_run)
    raw, compensated = breakdown(run, "trace"), breakdown(run, "compensated")
    first, last = run.manifest["trace_window"]
    traced_rows = [r for r in run.rows[run.warmup_steps:] if first <= r["step"] <= last]
    recorded = {p: statistics.fmean(s.phase_ms[p] for s in raw.steps) for p in PHASES}
    recorded["other"] += max(0.0, statistics.fmean(r["step_ms"] for r in traced_rows)
                             - sum(recorded.values()))
    step = statistics.fmean(r["step_ms"] for r in rows)
    for phase in PHASES:
        expected = recorded[phase] / sum(recorded.values()) * step
        assert compensated.phases[phase].ms == pytest.approx(expected, rel=1e-9), phase
        assert compensated.phases[phase].source == PhaseSource.COMPENSATED
    assert sum(f.ms for f in compensated.phases.values()) == pytest.approx(step)


def test_compiled_keras_phases_add_up_to_the_unprofiled_step(keras_run):
    run, rows = _steady_untraced(keras_run)
    result = breakdown(run)
    assert result.source == PhaseSource.COMPENSATED
    mean = statistics.fmean(r["step_ms"] for r in rows)
    doc = result.to_json_dict()
    assert doc["step_ms"]["mean"] == pytest.approx(mean, abs=1e-5)
    assert sum(doc["phases"][p]["ms"] for p in PHASES) == pytest.approx(mean, abs=1e-5)
    for phase in ("forward", "backward"):
        figure = doc["phases"][phase]
        assert figure["source"] == "trace, compensated" and figure["ms"] > 0
        assert figure["distortion_ms"] == pytest.approx(figure["trace_ms"] - figure["ms"], abs=1e-5)
        low, high = figure["ci95"]
        assert low <= figure["ms"] <= high


def test_compare_reports_the_unprofiled_gap_and_its_phase_deltas_add_up(torch_run, keras_run):
    (pair,) = compare([explain_run(keras_run), explain_run(torch_run)]).pairs
    untraced = {side: statistics.fmean(r["step_ms"] for r in _steady_untraced(path)[1])
                for side, path in (("a", keras_run), ("b", torch_run))}
    assert pair.unprofiled
    assert pair.a_step_ms == pytest.approx(untraced["a"], abs=1e-5)
    assert pair.b_step_ms == pytest.approx(untraced["b"], abs=1e-5)
    assert sum(g.delta_ms for g in pair.phases) == pytest.approx(pair.gap_ms, abs=1e-5)
    assert pair.ratio == pytest.approx(untraced["b"] / untraced["a"], abs=1e-3)
    low, high = pair.gap_ci95
    assert low <= pair.gap_ms <= high


def test_a_run_against_itself_is_within_noise(torch_run):
    run = explain(load_run(torch_run))
    (pair,) = compare([run, explain(load_run(torch_run, label="again"))]).pairs
    assert pair.gap_ms == 0.0 and pair.within_noise
    assert all(g.within_noise for g in pair.phases)


def test_measure_runs_configurations_interleaved_and_compare_rereads_the_folder(tmp_path):
    runner = CliRunner()
    args = ["compare", "--measure", "linreg:torch", "linreg:keras", "--repeats", "2",
            "--steps", "16", "--warmup", "2", "--trace-steps", "4", "--out", str(tmp_path),
            "--format", "json", "--quiet"]
    result = runner.invoke(cli, args)
    (folder,) = tmp_path.glob("ab-linreg-*")
    made = [m.parent for m in folder.glob("*/manifest.json")]
    assert result.exit_code == compare_exit_code(*made), result.output
    doc = json.loads(result.stdout)
    (pair,) = doc["comparisons"]
    assert pair["repeats"] == 2 and pair["unprofiled"]
    assert (pair["a_label"], pair["b_label"]) == ("linreg:torch", "linreg:keras")
    low, high = pair["ratio_ci95"]
    assert low <= pair["ratio"] <= high
    state = json.loads((folder / "ab.json").read_text())
    assert state["status"] == "complete" and state["configs"] == ["linreg:torch", "linreg:keras"]
    # Interleaved, rounds alternating (A B, B A) by start time, each repeat its own process.
    started = sorted((json.loads((folder / name / "manifest.json").read_text())["started_at"], config)
                     for config, names in state["runs"].items() for name in names)
    assert [c for _, c in started] == ["linreg:torch", "linreg:keras", "linreg:keras", "linreg:torch"]
    pids = {json.loads((folder / n / "manifest.json").read_text())["pid"]
            for names in state["runs"].values() for n in names}
    assert len(pids) == 4
    again = runner.invoke(cli, ["compare", str(folder), "--format", "json"])
    assert again.exit_code == result.exit_code, again.output
    assert json.loads(again.stdout)["comparisons"][0]["ratio"] == pair["ratio"]


def test_measure_refuses_a_bad_configuration_before_running_anything(tmp_path):
    result = CliRunner().invoke(cli, ["compare", "--measure", "linreg:torch", "nosuch:torch",
                                      "--out", str(tmp_path)])
    assert result.exit_code == 2 and "nosuch" in result.stderr
    assert list(tmp_path.iterdir()) == []
