"""Terminal output that fits 80 columns: real renderers on fixture traces and tiny real runs, unique
run headers, one ratio direction, 'gap within noise', run progress, a fast list, notebook helpers."""
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from gapscope.analysis.results.distributed_breakdown import breakdown_of
from gapscope.analysis.results.matrix_results import MatrixResult, MatrixRowResult, matrix_result
from gapscope.analysis.renderers import fit, registry
from gapscope.analysis.model.run import unique_labels
from gapscope.cli import cli
from conftest import compare_exit_code

WIDTH = 80
PROJECT = Path(__file__).resolve().parent.parent


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def _fixture_run(root, name, trace, fixtures_dir):
    """A run directory around a fixture trace; the same configuration for every name."""
    run = root / name
    run.mkdir()
    shutil.copy(fixtures_dir / trace, run / trace)
    (run / "manifest.json").write_text(json.dumps({
        "run_id": name, "workload": "mlp", "framework": "torch", "variant": "default",
        "device": "Hand-made CPU", "status": "complete", "warmup_steps": 0}))
    return run


@pytest.fixture
def three_fixture_runs(tmp_path, fixtures_dir):
    return [_fixture_run(tmp_path, f"mlp-torch-default-20260101-000000-{tail}", trace, fixtures_dir)
            for tail, trace in (("aaaa", "marked_two_steps.pt.trace.json"),
                                ("bbbb", "async_gpu_two_steps.pt.trace.json"),
                                ("cccc", "marked_two_steps.pt.trace.json"))]


@pytest.fixture
def runner():
    return CliRunner()


def test_breakdown_of_three_runs_fits_and_heads_each_run_uniquely(runner, three_fixture_runs):
    result = runner.invoke(cli, ["breakdown", *map(str, three_fixture_runs)])
    assert result.exit_code == 0, result.output
    assert _widest(result.output) <= WIDTH
    # Same workload, framework and variant: the ids' tails tell the headers apart.
    for tail in ("aaaa", "bbbb", "cccc"):
        assert f"mlp torch #{tail}" in result.output
    wide = runner.invoke(cli, ["breakdown", "--wide", *map(str, three_fixture_runs)])
    assert wide.output.count("gapscope breakdown") == 1 and _widest(wide.output) > WIDTH


def test_markdown_heads_each_run_uniquely(three_fixture_runs):
    text = registry.BREAKDOWN["markdown"].render([breakdown_of(p) for p in three_fixture_runs])
    header = text.splitlines()[0]
    assert all(f"mlp torch #{tail} ms" in header for tail in ("aaaa", "bbbb", "cccc"))


def test_unique_labels_even_for_the_same_trace_twice():
    labels = unique_labels(["torch (trace)"] * 3, ["a.pt.trace.json", "a.pt.trace.json", "b.json"])
    assert len(set(labels)) == 3


def test_compare_of_three_real_runs_fits_with_unique_headers(runner, torch_run, keras_run):
    # The same run twice: its label and id agree, so only the numbering tells them apart.
    result = runner.invoke(cli, ["compare", str(keras_run), str(torch_run), str(torch_run),
                                 "--verbose"])
    assert result.exit_code == compare_exit_code(keras_run, torch_run), result.output
    assert _widest(result.output) <= WIDTH
    assert "mlp torch #" in result.output and "(2)" in result.output and "(3)" in result.output
    assert "ratio" in result.output and "run/base" in result.output


def test_gap_within_noise_is_said_in_the_step_row(runner, keras_run):
    for fmt in ("table", "markdown"):
        result = runner.invoke(cli, ["compare", str(keras_run), str(keras_run), "--format", fmt,
                                     *(["--verbose"] if fmt == "table" else [])])
        assert result.exit_code == compare_exit_code(keras_run), result.output
        lines = result.output.splitlines()
        first = next(i for i, line in enumerate(lines)
                     if line.startswith(("│", "|")) and line.lstrip("│| *").startswith("step"))
        # The table may wrap the cell inside the step row: read the row up to its rule.
        row = [lines[first]] + [line for line in lines[first + 1:first + 4] if line.startswith("│ ")]
        words = " ".join(cell.strip() for line in row for cell in line.split("│")[-2:-1])
        assert "gap within noise" in (lines[first] if fmt == "markdown" else words), result.output


def test_matrix_ratio_is_run_over_baseline_and_the_table_fits(torch_run, keras_run):
    matrix = SimpleNamespace(name="tiny", description="", baseline="torch", rows=[
        SimpleNamespace(id=i, config="", input="", framework=f, variant="default", nw="", spe="")
        for i, f in (("torch", "torch"), ("keras", "keras"))])
    outcomes = [SimpleNamespace(status="complete", reason=None, run_dir=str(r), run_dirs=[str(r)])
                for r in (torch_run, keras_run)]
    result = matrix_result(matrix, outcomes)
    torch_row, keras_row = result.rows
    assert keras_row.step_ratio == pytest.approx(keras_row.step_ms / torch_row.step_ms, rel=1e-2)
    text = registry.MATRIX["table"].render(result)
    assert _widest(text) <= WIDTH and "run/base" in text and "row / baseline" in text


def test_a_wide_matrix_gets_a_narrow_summary_one_line_a_row(monkeypatch):
    """Issue 23 item 6: five column blocks spread one row over five tables; the summary keeps
    each row on one line, and --wide (WIDTH None) still gives every column."""
    rows = [MatrixRowResult(f"row-{i}", "complete", "PyTorch eager", "tensor-dataset", "torch",
                            "default", "0", "1", step_ratio=1.0 + i / 10, steps_per_s=100.0 - i,
                            phase_share={"data_load": 0.1, "forward": 0.2, "backward": 0.5,
                                         "optimizer": 0.1, "other": 0.1}) for i in range(3)]
    result = MatrixResult("m", "", "row-0", "a CPU", rows)
    text = registry.MATRIX["table"].render(result)
    assert _widest(text) <= WIDTH
    row_lines = [line for line in text.splitlines() if line.startswith("│ row-")]
    assert len(row_lines) == 3 and "1.20x" in row_lines[2] and "backward 50 %" in row_lines[2]
    assert "--wide" in text and "final loss" not in text
    monkeypatch.setattr(fit, "WIDTH", None)
    assert "final loss" in registry.MATRIX["table"].render(result)


def test_fit_keeps_units_whole_and_repeats_the_keys():
    grid = fit.Grid("t", ["k", "a1", "a2", "b1", "b2"], [["key", "x" * 20, "y" * 20, "z" * 20, "w" * 20]],
                    [2, 2])
    parts = fit.blocks(grid, 60)
    assert [p.head for p in parts] == [["k", "a1", "a2"], ["k", "b1", "b2"]]
    assert fit.blocks(grid, None) == [grid]


def test_page_lines_wrap_with_a_hanging_indent(monkeypatch):
    monkeypatch.setattr(fit, "WIDTH", 30)
    page = fit.Page()
    page.line("  - " + "word " * 20)
    lines = page.text().splitlines()
    assert all(len(line) <= 30 for line in lines) and lines[1].startswith("    ")


def test_list_fits_and_imports_no_framework():
    code = ("import sys; from click.testing import CliRunner; from gapscope.cli import cli; "
            "r = CliRunner().invoke(cli, ['list']); assert r.exit_code == 0, r.output; "
            "print(max(len(l) for l in r.output.splitlines())); "
            "print(sorted(m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert int(out[0]) <= WIDTH and out[1] == "[]"


def test_run_reports_step_progress(tmp_path):
    from gapscope.workloads.launch import launch
    from gapscope.workloads.settings import RunSettings
    seen = []
    outcome = launch(RunSettings("mlp", "torch", steps=12, warmup_steps=2, trace_steps=3), tmp_path,
                     seen.append)
    assert outcome.status == "complete"
    assert seen and seen[-1] == 12 and seen == sorted(seen)
    assert "gapscope-steps-done" not in (outcome.run_dir / "run.log").read_text()


def test_breakdown_to_dict_and_to_pandas(fixtures_dir, monkeypatch):
    b = breakdown_of(fixtures_dir / "marked_two_steps.pt.trace.json")
    assert b.to_dict() == b.to_json_dict()
    frame = b.to_pandas()
    assert list(frame.index) == ["data_load", "forward", "backward", "optimizer", "other", "step"]
    assert frame.loc["step", "ms"] == pytest.approx(frame["ms"].iloc[:5].sum())
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="pip install pandas"):
        b.to_pandas()


def test_report_speed_is_per_workload():
    from gapscope.analysis.renderers.columns import workload_references
    runs = [SimpleNamespace(workload=w) for w in ("mlp", "lstm", "mlp", "lstm", None)]
    assert workload_references(runs, 0) == [0, 1, 0, 1, 0]
    assert workload_references(runs, 2) == [2, 1, 2, 1, 2]


def test_matrix_list_fits(runner):
    result = runner.invoke(cli, ["matrix", "--list"])
    assert result.exit_code == 0, result.output
    assert _widest(result.output) <= WIDTH
    assert "seed-4060ti" in result.output and "seed-graph-mode" in result.output
