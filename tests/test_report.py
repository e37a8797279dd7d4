"""`gapscope report`: Markdown, self-contained HTML and plots from real runs."""
from __future__ import annotations

import json
import shutil
import struct

import pytest
from click.testing import CliRunner

import user_loops
from gapscope.cli import cli


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A PyTorch loop and a Keras fit of the same model, through the public API."""
    out = tmp_path_factory.mktemp("report_runs")
    torch_dir = user_loops.torch_loop(out).run_dir
    keras_dir = user_loops.keras_fit(out)[0].run_dir
    return torch_dir, keras_dir


@pytest.fixture(scope="module")
def report(two_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "mlp.md"
    result = CliRunner().invoke(cli, ["report", *map(str, two_runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out, result


def test_prints_the_files_it_wrote_and_shows_progress_on_stderr(report):
    out, result = report
    written = result.stdout.split()
    names = sorted(p.rsplit("/", 1)[-1] for p in written)
    # memory: the torch run's allocation curve (its trace has the allocator's events)
    assert names == sorted(["mlp.md", "mlp.html"] + [f"mlp-{plot}.{ext}" for plot in
                                                      ("phases", "steps", "ratio", "layers", "memory")
                                                      for ext in ("png", "svg")])
    assert "plotting" in result.stderr


def test_plots_are_real_images(report):
    out, _ = report
    for plot in ("phases", "steps", "ratio", "layers"):
        png = out.with_name(f"mlp-{plot}.png")
        width, height = _png_size(png)
        assert width >= 800 and height >= 250 and png.stat().st_size > 10_000, (plot, width, height)
        svg = out.with_name(f"mlp-{plot}.svg").read_text()
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg


def test_markdown_has_environment_tables_plots_and_comparison(report, two_runs):
    out, _ = report
    text = out.read_text()
    for heading in ("## Environment", "## Where the time goes", "## Step time over the run",
                    "## Step-time ratio to the baseline", "## Comparison with the baseline"):
        assert heading in text
    assert "![Phases per run" in text and "(mlp-phases.png)" in text
    assert "user-mlp torch user" in text and "user-mlp keras user" in text
    manifest = json.loads((two_runs[0] / "manifest.json").read_text())
    assert manifest["versions"]["torch"] in text and manifest["device"] in text
    assert "ratio run/base" in text


def test_the_ratio_points_the_same_way_as_the_compare_table_under_it(report):
    """One convention on the page (issue 23 item 3): the ratio table's run/baseline is the
    compare table's, figure for figure, not its inverse."""
    import re
    out, _ = report
    text = out.read_text()
    ratio_row = next(line for line in text.splitlines()
                     if line.startswith("| user-mlp keras user |") and line.endswith("x |"))
    ratio = ratio_row.rsplit("|", 2)[-2].strip()
    step_row = next(line for line in text.splitlines() if line.startswith("| step |"))
    assert re.search(rf"\| {re.escape(ratio)}( \[|\s*\|)", step_row), (ratio_row, step_row)
    # the run that is slower reads above 1 in both: the ratio is the means' (printed to 2 and 3
    # decimals), not their inverse; two runs 0.1 % apart print 1.00x and point neither way
    means = [float(line.split("|")[2]) for line in text.splitlines()
             if line.startswith("| user-mlp ") and line.endswith("x |")]
    shown, actual = float(ratio[:-1]), means[1] / means[0]
    assert abs(shown - actual) <= 0.005 + 0.001 * actual, (ratio, means)
    if shown != 1.0:
        assert (shown > 1) == (actual > 1), (ratio, means)


def test_html_is_self_contained(report):
    out, _ = report
    html = out.with_suffix(".html").read_text()
    assert html.count("data:image/png;base64,") == 5  # phases, steps, ratio, layers, memory
    assert 'src="mlp-' not in html  # nothing links to a file beside it
    assert "<table>" in html and "<h2>Environment</h2>" in html


def test_gapscope_run_directories_and_a_folder_of_runs(torch_run, keras_run, tmp_path):
    folder = tmp_path / "runs"
    for run in (torch_run, keras_run):
        shutil.copytree(run, folder / run.name)
    out = tmp_path / "r" / "report.md"
    result = CliRunner().invoke(cli, ["report", str(folder), "--out", str(out), "--quiet",
                                      "--baseline", keras_run.name])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    text = out.read_text()
    assert "mlp keras (baseline)" in text and "| mlp torch |" in text
    # other's parts for each traced run, as its breakdown has them
    from gapscope.analysis.results.breakdown import breakdown
    from gapscope.analysis.model.run import load_run
    parts = breakdown(load_run(keras_run)).to_json_dict()["phases"]["other"]["parts"]
    assert parts and all(f"{part} {ms:.3f} ms" in text for part, ms in parts.items())


def test_layers_and_compile_sections_hold_the_panels_figures(torch_run, keras_run, tmp_path):
    """Issues 31 and 32: the report's layers table per run, the two runs' layers lined up by
    name with their deltas, the per-layer plot, and the Keras run's tf.function compile record
    (its stages against the measured warm-up), each figure as the panels hold it (the tab's)."""
    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.results.breakdown import breakdown
    from gapscope.analysis.results.layers import layer_breakdown
    from gapscope.analysis.results.panels.compile_panel import compile_panel
    out = tmp_path / "r" / "report.md"
    result = CliRunner().invoke(cli, ["report", str(torch_run), str(keras_run), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "## Layers" in text and "(report-layers.png)" in text
    assert _png_size(out.with_name("report-layers.png"))[0] >= 800
    rows = {}
    for run in (torch_run, keras_run):
        loaded = load_run(run)
        lb = layer_breakdown(loaded, None, len(breakdown(loaded).steps))
        assert [r.name for r in lb.rows] == ["dense1", "logits", "loss"]
        rows[run] = {r.name: r for r in lb.rows}
        total = lb.phase_ms["forward"] + lb.phase_ms["backward"]
        for r in lb.rows:
            share = 100 * round((r.forward_ms + r.backward_ms) / total, 4)
            assert (f"| {r.name} | {r.forward_ms:.3f} | {r.backward_ms:.3f} | {r.forward_gflop:.4f} | "
                    f"{r.backward_gflop:.4f} |") in text
            assert f"| {share:.1f} % | {r.fused_text() or '-'} |" in text
    assert "Layers matched by name" in text
    for name in ("dense1", "logits", "loss"):
        a, b = rows[torch_run][name], rows[keras_run][name]
        assert (f"| {name} | {a.forward_ms:.3f} | {b.forward_ms:.3f} | {b.forward_ms - a.forward_ms:+.3f} | "
                f"{a.backward_ms:.3f} | {b.backward_ms:.3f} | {b.backward_ms - a.backward_ms:+.3f} |") in text
    # Keras' train_step is a tf.function: its traces and stages, each once.
    why = compile_panel(breakdown(load_run(keras_run)).compile_why)
    assert "## Compile" in text and why["line"] in text and "train_step traced" in why["line"]
    for stage in why["stages"]:
        assert f"| {stage['name']} | {stage['ms']:.3f} |" in text
    assert f"| measured (warm-up beyond a steady step) | {why['measured_ms']:.3f} |" in text


def test_a_failed_run_is_listed_and_exits_1(two_runs, tmp_path):
    failed = tmp_path / two_runs[0].name
    shutil.copytree(two_runs[0], failed)
    manifest = json.loads((failed / "manifest.json").read_text())
    manifest.update(status="failed", error="ValueError: boom")
    (failed / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "report.md"
    result = CliRunner().invoke(cli, ["report", str(two_runs[1]), str(failed), "--out", str(out), "-q"])
    assert result.exit_code == 1
    assert "has no results: run " in result.stderr and "failed: ValueError: boom" in result.stderr
    assert "## Runs without results" in out.read_text()


def test_a_run_of_another_workload_leaves_the_matching_pairs_compared(two_runs, tmp_path):
    """Issue 23 item 9: one run of another workload used to drop the whole comparison."""
    other = tmp_path / "lstm-run"
    shutil.copytree(two_runs[1], other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest.update(workload="lstm", run_id="lstm-run")
    (other / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "report.md"
    result = CliRunner().invoke(cli, ["report", *map(str, two_runs), str(other), "--out", str(out),
                                      "-q"])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    comparison = text.split("## Comparison with the baseline", 1)[1]
    assert "| step |" in comparison and "user-mlp keras user" in comparison
    baseline_workload = json.loads((two_runs[0] / "manifest.json").read_text())["workload"]
    note = (f"left out of the comparison, another workload than the baseline's "
            f"({baseline_workload}): ")
    assert note in comparison, comparison[-1500:]
    assert "(lstm)" in comparison.split(note)[1].split("\n")[0]


@pytest.mark.parametrize("args,fragment", [
    (["/no/such/run"], "no such file"),
    (["--baseline", "nope"], "baseline 'nope'"),
])
def test_bad_input_exits_2(two_runs, tmp_path, args, fragment):
    paths = [str(two_runs[0])] if args[0].startswith("--") else []
    result = CliRunner().invoke(cli, ["report", *paths, *args, "--out", str(tmp_path / "r.md")])
    assert result.exit_code == 2 and fragment in result.stderr


def test_an_ab_folder_reports_the_clis_comparison(ab_folder, tmp_path):
    """One measurement, one answer: the report's verdict, interval and pair ratios are the
    ones `gapscope compare FOLDER` prints, its first configuration the baseline."""
    from gapscope.analysis.report import write_report
    printed = CliRunner().invoke(cli, ["compare", str(ab_folder), "--format", "markdown"]).stdout
    files = write_report([ab_folder], tmp_path / "ab.md")
    text = files.markdown.read_text()
    verdicts = [line for line in printed.splitlines() if line.startswith(("**", "- ", "INCONCLUSIVE"))][:2]
    assert verdicts and all(line in text for line in verdicts), (verdicts, text)
    assert "pair ratios" in printed and "pair ratios" in text
    assert "linreg:torch #1" in text and "linreg:torch:preload #2" in text
    assert "left out above" not in text   # 4 runs, but one comparison of 2 configurations


def test_a_run_100x_faster_keeps_a_visible_bar_in_the_phase_chart():
    """Issue 35: to scale, a 1 ms step beside a 100 ms one drew no bar at all."""
    from gapscope.analysis.renderers.plots import phase_bars
    from gapscope.analysis.results.breakdown import breakdown_from_timers

    def run(step_ms):
        rows = [{"step": i, "warmup": i < 1, "traced": False, "step_ms": step_ms,
                 "data_load_ms": step_ms / 10, "forward_ms": step_ms / 2, "backward_ms": step_ms / 5,
                 "optimizer_ms": step_ms / 10, "loss": 1.0} for i in range(6)]
        return breakdown_from_timers(rows, warmup_steps=1)
    for slow, shares in ((100.0, True), (10.0, False)):
        ax = phase_bars(["slow", "fast"], [run(slow), run(1.0)]).axes[0]
        ends = {}
        for bar in ax.patches:   # the fast run is drawn at y 0, the slow one at y 1
            y = round(bar.get_y() + bar.get_height() / 2)
            ends[y] = max(ends.get(y, 0.0), bar.get_x() + bar.get_width())
        if shares:   # each bar its own step: both run to 100 %
            assert ends == pytest.approx({0: 100.0, 1: 100.0})
            assert ax.get_xlabel().startswith("% of each run's step (steps 100x apart")
        else:        # 10x apart: to scale, in ms
            assert ends == pytest.approx({0: 1.0, 1: 10.0})
