"""Matrix names are names, not paths; a user's own TOML comes with --file; matrix.json names its
runs inside the matrix folder, so the folder reads from anywhere; --repeats interleaves rows
and puts 95 % intervals on the ratios."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from gapscope.analysis.results.matrix_results import matrix_result
from gapscope.analysis.renderers.matrix_render import RATIO_HEADER, render_markdown, render_table
from gapscope.cli import cli
from gapscope.workloads.matrix import Matrix, MatrixRow, load_matrix, load_matrix_file, run_matrix
from gapscope.workloads.settings import RunSettings

BASE = RunSettings(workload="", framework="", steps=10, warmup_steps=2, trace_steps=3)
TOML = """\
name = "{name}"
description = "two torch rows"
baseline = "eager"
[[rows]]
id = "eager"
workload = "mlp"
framework = "torch"
[[rows]]
id = "tensors"
workload = "mlp"
framework = "torch"
variant = "tensor-dataset"
"""


@pytest.fixture
def runner():
    return CliRunner()


def _one_line(result, fragment):
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("gapscope: error:") and fragment in lines[0], lines[0]


@pytest.mark.parametrize("name", ["../../x", "/etc/passwd", "seed-examples/../seed-4060ti", ".."])
def test_a_matrix_name_is_never_a_path(runner, tmp_path, name):
    _one_line(runner.invoke(cli, ["matrix", name, "--out", str(tmp_path / "out")]), "unknown matrix")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["../../ESCAPED", "/tmp/ESCAPED", "a/b", "", ".hidden"])
def test_a_matrix_file_naming_a_path_is_refused(runner, tmp_path, name):
    toml = tmp_path / "mine.toml"
    toml.write_text(TOML.format(name=name))
    out = tmp_path / "deep" / "out"
    _one_line(runner.invoke(cli, ["matrix", "--file", str(toml), "--out", str(out)]), "plain name")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.toml"]


@pytest.mark.parametrize("text,fragment", [
    ("name = ", "not valid TOML"),
    ('name = "x"\n', "missing description, baseline, rows"),
    (TOML.format(name="x").replace('framework = "torch"\nvariant', 'framework = 3\nvariant'),
     "string fields only"),
    (TOML.format(name="x").replace('id = "tensors"', 'id = "eager"'), "row ids repeat"),
])
def test_a_broken_matrix_file_is_one_line(runner, tmp_path, text, fragment):
    toml = tmp_path / "mine.toml"
    toml.write_text(text)
    _one_line(runner.invoke(cli, ["matrix", "--file", str(toml), "--out", str(tmp_path)]), fragment)


def test_name_and_file_together_are_refused(runner, tmp_path):
    toml = tmp_path / "mine.toml"
    toml.write_text(TOML.format(name="mine"))
    _one_line(runner.invoke(cli, ["matrix", "seed-examples", "--file", str(toml)]), "not both")


def test_a_bundled_matrix_loads_by_name_and_a_file_by_path(tmp_path):
    toml = tmp_path / "mine.toml"
    toml.write_text(TOML.format(name="mine"))
    assert load_matrix_file(toml).name == "mine" and len(load_matrix("seed-examples").rows) > 1


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    """Two torch rows, two repeats, run through the command line from another directory."""
    root = tmp_path_factory.mktemp("repeats")
    toml = root / "pair.toml"
    toml.write_text(TOML.format(name="pair"))
    cwd = os.getcwd()
    os.chdir(root)  # relative --out: matrix.json must not depend on where the matrix ran
    try:
        result = CliRunner().invoke(cli, ["matrix", "--file", "pair.toml", "--steps", "10",
                                          "--warmup", "2", "--trace-steps", "3", "--repeats", "2",
                                          "--out", "out", "--format", "json", "-q"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    return root / "out" / "pair", json.loads(result.stdout)


def test_repeats_run_interleaved_each_a_fresh_process(repeated):
    folder, _ = repeated
    rows = json.loads((folder / "matrix.json").read_text())["rows"]
    runs = [(row_id, name) for row_id, row in rows.items() for name in row["run_dir"]]
    assert len(runs) == 4 and all("/" not in name for _, name in runs)
    manifests = {name: json.loads((folder / name / "manifest.json").read_text()) for _, name in runs}
    order = sorted(runs, key=lambda r: manifests[r[1]]["started_at"])
    assert [row_id for row_id, _ in order] == ["eager", "tensors", "eager", "tensors"]
    assert len({m["pid"] for m in manifests.values()}) == 4


def test_ratio_is_row_over_baseline_with_an_interval_over_repeats(repeated):
    _, doc = repeated
    assert doc["repeats"] == 2 and doc["ratio"] == "row / baseline"
    base, other = doc["rows"]
    assert base["step_ratio"] == 1.0 and base["step_ratio_ci95"] == [1.0, 1.0]
    assert len(other["step_ms_repeats"]) == 2 and len(other["run_dirs"]) == 2
    lo, hi = other["step_ratio_ci95"]
    assert lo <= other["step_ratio"] <= hi
    paired = [b / a for a, b in zip(base["step_ms_repeats"], other["step_ms_repeats"])]
    assert min(paired) - 1e-3 <= other["step_ratio"] <= max(paired) + 1e-3  # geometric mean
    assert other["step_ms"] == pytest.approx(sum(other["step_ms_repeats"]) / 2, abs=1e-3)


def test_table_header_says_the_ratio_direction_and_shows_the_interval(repeated, tmp_path):
    folder, _ = repeated
    matrix = load_matrix_file(folder.parent.parent / "pair.toml")
    from gapscope.workloads.matrix import matrix_outcomes
    result = matrix_result(matrix, matrix_outcomes(matrix, folder.parent))
    table, markdown = render_table(result), render_markdown(result)
    assert RATIO_HEADER == "run/base"
    for text in (table, markdown):
        assert "ratio = row / baseline" in text and "interleaved repeats" in text
    assert "[" in markdown.split("| tensors |")[1].split("\n")[0]  # '1.02x [0.95, 1.10]'


def test_a_moved_matrix_folder_reads_from_anywhere(repeated, tmp_path, runner):
    folder, _ = repeated
    moved = tmp_path / "elsewhere" / "pair"
    shutil.copytree(folder, moved)
    result = runner.invoke(cli, ["breakdown", str(moved), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert {d["run_id"] for d in json.loads(result.stdout)} == {
        name for row in json.loads((moved / "matrix.json").read_text())["rows"].values()
        for name in row["run_dir"]}


def test_state_naming_a_path_outside_is_read_by_name_only(tmp_path, repeated):
    """Older states stored a path relative to where the matrix ran; a hand-edited one may
    point anywhere. Only the last part counts, inside the matrix folder."""
    folder, _ = repeated
    moved = tmp_path / "pair"
    shutil.copytree(folder, moved)
    state = json.loads((moved / "matrix.json").read_text())
    name = state["rows"]["eager"]["run_dir"][0]
    state["rows"]["eager"]["run_dir"] = f"../../somewhere/{name}"
    (moved / "matrix.json").write_text(json.dumps(state))
    from gapscope.workloads.matrix import matrix_outcomes
    matrix = load_matrix_file(folder.parent.parent / "pair.toml")
    eager = matrix_outcomes(matrix, tmp_path)[0]
    assert eager.run_dirs == [str(moved / name)]


def test_interrupted_repeats_resume_where_they_stopped(tmp_path, monkeypatch):
    """A row's complete repeats are kept; a resume runs only the repeats still missing."""
    from gapscope.workloads import matrix as matrix_module
    monkeypatch.setattr(matrix_module, "gpu_count", lambda: 0)
    matrix = Matrix("resume", "one row", "", "row", (MatrixRow("row", "mlp", "torch"),))
    (first,) = run_matrix(matrix, tmp_path, BASE)
    seen = []
    (again,) = run_matrix(matrix, tmp_path, BASE, lambda row, outcome: seen.append(outcome), repeats=2)
    assert again.status == "complete" and again.run_dirs[0] == first.run_dir
    assert len(again.run_dirs) == 2 and [o for o in seen if o is None] == [None]
