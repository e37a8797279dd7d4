"""`gapscope trace --out` never loses a file: an existing one is refused unless --force, a symlink
is replaced and never written through, a parent that is a file is named as such; `run --nproc` past
the cores warns."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.cli import cli

FIXTURE = Path(__file__).parent / "fixtures" / "marked_two_steps.pt.trace.json"


@pytest.fixture
def run(tmp_path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(FIXTURE, folder / "w.1.pt.trace.json")
    return folder


def _trace(*args):
    return CliRunner().invoke(cli, ["trace", *map(str, args)])


def _one_line(result, fragment):
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and fragment in lines[0], result.output


def test_an_existing_file_is_kept_unless_force(run, tmp_path):
    out = tmp_path / "t.json"
    out.write_text("mine")
    _one_line(_trace(run, "--out", out), f"--out {out}: exists; use --force to replace it")
    assert out.read_text() == "mine"
    assert _trace(run, "--out", out, "--force").exit_code == 0
    assert json.loads(out.read_text())["traceEvents"]


def test_a_symlink_is_never_written_through(run, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    out = tmp_path / "t.json"
    out.symlink_to(target)
    _one_line(_trace(run, "--out", out), "exists; use --force")
    assert _trace(run, "--out", out, "--force").exit_code == 0
    assert target.read_text() == "keep me" and not out.is_symlink()
    assert json.loads(out.read_text())["traceEvents"]


def test_a_parent_that_is_a_file_is_named(run, tmp_path):
    (tmp_path / "afile").write_text("x")
    _one_line(_trace(run, "--out", tmp_path / "afile" / "sub" / "t.json"),
              f"{tmp_path / 'afile'} is a file, not a folder")


def test_more_ranks_than_cores_is_warned_about_before_anything_runs(monkeypatch, tmp_path):
    monkeypatch.setattr("os.cpu_count", lambda: 2)

    def launched(*args, **kwargs):
        raise RuntimeError("stop here: the warning must come first")
    monkeypatch.setattr("gapscope.workloads.launch.launch", launched)
    result = CliRunner().invoke(cli, ["run", "mlp", "--framework", "torch", "--nproc", "3",
                                      "--out", str(tmp_path / "runs")])
    assert isinstance(result.exception, RuntimeError)
    assert "gapscope: warning: --nproc 3 on 2 core(s): the ranks share cores" in result.stderr
    result = CliRunner().invoke(cli, ["run", "mlp", "--framework", "torch", "--nproc", "2",
                                      "--out", str(tmp_path / "runs")])
    assert "warning" not in result.stderr
