"""Each trace is read once per command, also when the command names it twice (a large trace
read twice is twice the time, and twice the memory while both are alive)."""
import shutil

import pytest
from click.testing import CliRunner

import analysis.model.run
from cli import cli


@pytest.fixture
def reads(monkeypatch):
    counted = []
    real = analysis.model.run.read_trace
    monkeypatch.setattr(analysis.model.run, "read_trace", lambda path: counted.append(path) or real(path))
    return counted


@pytest.fixture
def trace(tmp_path, fixtures_dir):
    path = tmp_path / "w.1.pt.trace.json"
    shutil.copy(fixtures_dir / "marked_two_steps.pt.trace.json", path)
    return path


def test_compare_of_a_trace_with_itself_reads_it_once(reads, trace):
    result = CliRunner().invoke(cli, ["compare", str(trace), str(trace), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(reads) == 1


def test_the_same_trace_by_two_spellings_is_read_once(reads, trace, monkeypatch):
    monkeypatch.chdir(trace.parent)
    result = CliRunner().invoke(cli, ["breakdown", str(trace), trace.name, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(reads) == 1


def test_report_of_a_run_named_twice_reads_it_once(reads, trace, tmp_path):
    out = tmp_path / "report" / "r.md"
    result = CliRunner().invoke(cli, ["report", str(trace), str(trace), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert len(reads) == 1
