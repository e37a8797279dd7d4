"""Sweeps: the crossover found from hand-set ratios; a real sweep over model width whose
parameter counts, samples/s and ratios are checked by hand; size overrides; bad input refused."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.renderers.sweep_render import crossover_lines
from gapscope.analysis.results.sweep_results import ConfigPoint, SweepPoint, SweepResult, crossovers
from gapscope.cli import cli
from gapscope.workloads.registry import get_workload


def _result(ratios, intervals=None):
    values = [16, 64, 256, 1024]
    intervals = intervals or [None] * len(values)
    points = [SweepPoint(v, [ConfigPoint("mlp:torch", 1.0, [1.0], 1.0, {}, None, 1.0),
                             ConfigPoint("mlp:keras", r, [r], 1.0, {}, None, r, ci)])
              for v, r, ci in zip(values, ratios, intervals)]
    return SweepResult("mlp", "batch_size", ["mlp:torch", "mlp:keras"], 1, points)


def test_crossover_is_interpolated_on_log_scales():
    result = _result([1.3, 1.1, 0.9, 0.8], [None, (1.05, 1.15), (0.85, 0.95), None])
    (found,) = crossovers(result)
    expected = math.exp(math.log(64) + (0 - math.log(1.1)) * (math.log(256) - math.log(64))
                        / (math.log(0.9) - math.log(1.1)))
    assert (found.low, found.high) == (64, 256) and found.at == pytest.approx(expected, abs=1e-3)
    assert found.certain  # both neighbours' intervals exclude 1
    result.crossovers = [found]
    assert crossover_lines(result)[0].startswith(
        "crossover: mlp:keras against mlp:torch passes 1x between batch size 64 and 256, at about")


def test_no_crossover_says_who_wins_everywhere():
    result = _result([1.3, 1.2, 1.1, 1.05])
    assert crossovers(result) == []
    assert crossover_lines(result) == ["no crossover in the range: mlp:keras is slower than "
                                       "mlp:torch at every batch size swept"]
    uncertain = _result([1.3, 1.1, 0.9, 0.8], [None, (0.95, 1.2), (0.85, 0.95), None])
    assert not crossovers(uncertain)[0].certain


def test_the_plots_ratio_axis_is_log_so_one_wide_whisker_does_not_flatten_the_rest():
    from gapscope.analysis.renderers.sweep_render import figure
    fig = figure(_result([1.3, 0.5, 2.0, 1.05], [None, (0.1, 2.5), (1.5, 2.6), None]))
    speed, ratio = fig.axes
    assert ratio.get_yscale() == "log" and speed.get_xscale() == "log"
    low, high = ratio.get_ylim()
    assert low <= 0.1 and high >= 2.6  # the whiskers are drawn, on the log axis


def test_sized_workload():
    mlp = get_workload("mlp")
    assert mlp.sized(batch_size=64).batch_size == 64 and mlp.sized() is mlp
    assert mlp.sized(width=2).hidden == (256,) and mlp.sized(width=0.001).hidden == (1,)


@pytest.fixture(scope="module")
def width_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "runs"
    result = CliRunner().invoke(cli, [
        "sweep", "mlp", "--framework", "torch,torch:preload", "--width", "1,0.5", "--repeats", "1",
        "--steps", "12", "--warmup", "2", "--trace-steps", "3", "--out", str(out), "-q",
        "--format", "json"])
    return out, result


def test_sweep_over_width_runs_every_point_and_reports_it(width_sweep):
    """torch eager against torch with preloaded tensors, width 0.5 and 1: the MLP has
    100*64+64 + 64*10+10 = 7,114 and 100*128+128 + 128*10+10 = 14,218 parameters."""
    out, result = width_sweep
    # Marked quiet by hand below where the gate matters: here the session's machine decides.
    assert result.exit_code in (0, 3), result.output
    doc = json.loads(result.stdout)
    assert doc["axis"] == "width" and [p["value"] for p in doc["points"]] == [0.5, 1.0]
    assert [[c["parameters"] for c in p["configs"]] for p in doc["points"]] == [[7114] * 2,
                                                                               [14218] * 2]
    for point in doc["points"]:
        base, other = point["configs"]
        assert base["samples_per_s"] == pytest.approx(1000 * 256 / base["step_ms"], rel=1e-3)
        # The ratio is kept to 4 decimals: a loaded machine made it 0.0403 (torch eager 25x
        # slower than preloaded), where rel=1e-3 alone is finer than the rounding.
        assert other["ratio"] == pytest.approx(other["step_ms"] / base["step_ms"], rel=1e-3,
                                               abs=5e-5)
        assert sum(other["phase_share"].values()) == pytest.approx(1.0, abs=3e-4)
    (folder,) = out.glob("sweep-mlp-*")
    assert (folder / "sweep.png").stat().st_size > 10_000
    # Reported again from its folder, without running anything.
    again = CliRunner().invoke(cli, ["sweep", str(folder), "-q"])
    assert again.exit_code == result.exit_code and "gapscope sweep mlp over width" in again.output
    # Over 100 steps from the start, each run's compile (warm-up excess) included.
    whole = json.loads(CliRunner().invoke(cli, ["sweep", str(folder), "-q", "--over-steps", "100",
                                                "--format", "json"]).stdout)
    assert whole["over_steps"] == 100
    for point in whole["points"]:
        base, other = point["configs"]
        assert base["compile_ms"] is not None and other["compile_ms"] is not None
        expected = (other["compile_ms"] + 100 * other["step_ms"]) / (base["compile_ms"] + 100 * base["step_ms"])
        assert other["ratio_over_steps"] == pytest.approx(expected, abs=1e-4)
        # One repeat a side: no interval, so the estimate stands, unless the machine was busy.
        assert other["pays_back"] in (("after", "never", "free") if result.exit_code == 0
                                      else ("not known", "free"))


@pytest.mark.parametrize("args,fragment", [
    (["--batch-size", "64"], "two or more distinct values"),
    (["--batch-size", "16,a"], "comma-separated whole numbers"),
    (["--batch-size", "0,64"], "batch size"),
    (["--batch-size", "16,64", "--width", "1,2"], "sweep one axis"),
    ([], "sweep one axis"),
])
def test_bad_sweeps_are_refused_before_anything_runs(tmp_path, args, fragment):
    out = tmp_path / "runs"
    result = CliRunner().invoke(cli, ["sweep", "mlp", "--framework", "torch,keras", *args,
                                      "--out", str(out)])
    assert result.exit_code == 2 and fragment in result.output, result.output
    assert not out.exists() or not any(Path(out).iterdir())


def test_one_configuration_is_no_sweep(tmp_path):
    result = CliRunner().invoke(cli, ["sweep", "mlp", "--framework", "torch", "--batch-size",
                                      "16,64", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "two or more configurations" in result.output


def test_where_compiling_pays_by_hand():
    """Eager against compiled at three batch sizes, compile (warm-up excess) and steady step in
    ms: 16: eager 2.0 (compile 100), compiled 1.5 (3,100): +3,000 ms once ÷ 0.5 ms a step = 6,000
    steps; 64: compiled slower (6.0 vs 5.0): never; 256: 3,000 ÷ 10 = 300 steps. Over 1,000 steps
    from the start: 16: (3,100 + 1,500) / (100 + 2,000) = 2.1905; 64: (3,100 + 6,000) / (100 +
    5,000) = 1.7843; 256: (3,200 + 10,000) / (200 + 20,000) = 0.6535: the winner changes
    between 64 and 256."""
    from gapscope.analysis.results.sweep_results import _over_steps, _pays_back
    from gapscope.analysis.renderers.sweep_render import compile_lines
    figures = {16: ((2.0, 100.0), (1.5, 3100.0)), 64: ((5.0, 100.0), (6.0, 3100.0)),
               256: ((20.0, 200.0), (10.0, 3200.0))}
    points = []
    for value, ((eager_ms, eager_compile), (compiled_ms, compiled_compile)) in figures.items():
        eager = ConfigPoint("mlp:torch", eager_ms, [eager_ms], 1.0, {}, None, 1.0,
                            compile_ms=eager_compile)
        compiled = ConfigPoint("mlp:torch:compile", compiled_ms, [compiled_ms], 1.0, {}, None,
                               compiled_ms / eager_ms, compile_ms=compiled_compile)
        _pays_back(eager, compiled)
        point = SweepPoint(value, [eager, compiled])
        _over_steps(point, 1000)
        points.append(point)
    assert [(p.configs[1].pays_back, p.configs[1].pays_after_steps) for p in points] == \
        [("after", 6000), ("never", None), ("after", 300)]
    assert [p.configs[1].ratio_over_steps for p in points] == [2.1905, 1.7843, 0.6535]
    result = SweepResult("mlp", "batch_size", ["mlp:torch", "mlp:torch:compile"], 1, points,
                         over_steps=1000)
    result.crossovers = crossovers(result)
    result.crossovers_over_steps = crossovers(result, "ratio_over_steps")
    # Steady steps alone: compiled wins at 16 (0.75x), loses at 64 (1.2x), wins at 256 (0.5x).
    assert [(c.low, c.high) for c in result.crossovers] == [(16, 64), (64, 256)]
    (whole,) = result.crossovers_over_steps
    assert (whole.low, whole.high) == (64, 256)
    lines = compile_lines(result)
    assert lines[0] == ("compile: mlp:torch:compile pays back its extra warm-up against mlp:torch "
                        "after 6,000 steps at batch size 16, never at batch size 64 (its steps "
                        "are slower), after 300 steps at batch size 256")
    assert lines[1].startswith("over 1,000 steps, compile included: mlp:torch:compile against "
                               "mlp:torch passes 1x between batch size 64 and 256, at about")


def _mark_load(folder: Path, others_pct: float) -> None:
    for path in folder.glob("**/manifest.json"):
        manifest = json.loads(path.read_text())
        manifest["machine_load"] = {"others_cpu_pct": others_pct, "steal_pct": 0.0, "cores": 2}
        path.write_text(json.dumps(manifest))


def test_a_sweep_on_a_busy_machine_gives_no_verdict_and_exit_3(width_sweep, tmp_path):
    """compare's gate: every run of the sweep marked busy (as 96 % of the cores taken by others)."""
    import shutil
    (folder,) = width_sweep[0].glob("sweep-mlp-*")
    busy, quiet = tmp_path / "busy", tmp_path / "quiet"
    shutil.copytree(folder, busy)
    shutil.copytree(folder, quiet)
    _mark_load(busy, 96.0)
    _mark_load(quiet, 1.0)
    result = CliRunner().invoke(cli, ["sweep", str(busy), "-q", "--over-steps", "100", "--wide"])
    assert result.exit_code == 3, result.output
    assert result.stdout.startswith("INCONCLUSIVE: busy machine while mlp:torch (2 of 2 runs), "
                                    "mlp:torch:preload (2 of 2 runs) ran: other processes used 96 %")
    assert "at every width" not in result.stdout and "no crossover" not in result.stdout
    assert "no verdict on who is faster at any width" in result.stdout
    assert "never at" not in result.stdout and not re.search(r"after [0-9]", result.stdout)
    doc = json.loads(CliRunner().invoke(cli, ["sweep", str(busy), "-q", "--format", "json"]).stdout)
    assert doc["inconclusive"].startswith("busy machine while")
    assert all(c["pays_back"] in (None, "free", "not known") for p in doc["points"] for c in p["configs"])
    calm = CliRunner().invoke(cli, ["sweep", str(quiet), "-q"])
    assert calm.exit_code == 0 and "INCONCLUSIVE" not in calm.stdout


def test_a_ratio_whose_interval_holds_1_is_not_told_apart_from_noise():
    """The busy sweep of issue 45: intervals [0.00, 8295.37] and [0.00, 100084250.53] both hold
    1, so no 'slower at every batch size'."""
    result = _result([3.30, 1.89, 1.5, 1.4], [(0.001, 8295.37), (0.001, 100084250.53),
                                             (1.2, 1.9), (1.1, 1.8)])
    assert crossover_lines(result) == [
        "no crossover told: mlp:keras against mlp:torch is not told apart from noise at batch "
        "size 16, 64 (its ratio's interval holds 1); slower at 256; slower at 1024"]


def test_compile_pays_back_with_the_interval_its_gain_gives():
    """Compile 3,000 ms beyond eager's; gain 0.5 ms a step [0.25, 1.0]: 6,000 [3,000, 12,000]
    steps; a gain of -6.065 ms whose interval [-129.5, +117.3] holds 0 pays back after anything
    from a few steps to never: not known."""
    from gapscope.analysis.results.sweep_results import _pays_back
    from gapscope.analysis.renderers.sweep_render import compile_lines
    eager = ConfigPoint("mlp:torch", 2.0, [2.0], 1.0, {}, None, 1.0, compile_ms=100.0)
    fast = ConfigPoint("mlp:torch:compile", 1.5, [1.5], 1.0, {}, None, 0.75, compile_ms=3100.0)
    _pays_back(eager, fast, (0.25, 1.0))
    assert (fast.pays_back, fast.pays_after_steps, fast.pays_after_ci95) == ("after", 6000, [3000, 12000])
    eager_b = ConfigPoint("mlp:torch", 20.0, [20.0], 1.0, {}, None, 1.0, compile_ms=100.0)
    noisy = ConfigPoint("mlp:torch:compile", 26.065, [26.065], 1.0, {}, None, 1.3, compile_ms=3100.0)
    _pays_back(eager_b, noisy, (-6.065 - 123.4, -6.065 + 123.4))
    assert (noisy.pays_back, noisy.pays_after_steps) == ("not known", None)
    result = SweepResult("mlp", "batch_size", ["mlp:torch", "mlp:torch:compile"], 2,
                         [SweepPoint(16, [eager, fast]), SweepPoint(64, [eager_b, noisy])])
    assert compile_lines(result) == [
        "compile: mlp:torch:compile pays back its extra warm-up against mlp:torch after 6,000 "
        "[3,000, 12,000] steps at batch size 16, not known at batch size 64 (the step gap is "
        "within noise)"]
