"""Each trace is read once per command, also when the command names it twice (a large trace
read twice is twice the time, and twice the memory while both are alive); and each run's
manifest once per command: a path is located once (analysis.model.locate) and the loaders take
the Place, never finding out again what the path is."""
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.model import run as model_run
from gapscope.cli import cli
from gapscope.profilers import state_json


@pytest.fixture
def reads(monkeypatch):
    counted = []
    real = model_run.read_trace
    monkeypatch.setattr(model_run, "read_trace", lambda path: counted.append(path) or real(path))
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


@pytest.fixture
def manifest_reads(monkeypatch):
    """How often each run directory's manifest.json was read, by folder."""
    counted = Counter()
    real = state_json.load

    def load(path, *args, **kwargs):
        if Path(path).name == "manifest.json":
            counted[Path(path).parent.name] += 1
        return real(path, *args, **kwargs)
    monkeypatch.setattr(state_json, "load", load)
    return counted


def _run_dir(folder: Path, name: str, trace: Path, **fields) -> Path:
    """A complete run directory by hand: a manifest and one torch trace."""
    folder.mkdir(parents=True)
    shutil.copy(trace, folder / "w.1.pt.trace.json")
    (folder / "manifest.json").write_text(json.dumps({
        "run_id": name, "status": "complete", "workload": "mlp", "framework": "torch",
        "variant": "default", "warmup_steps": 0, **fields}))
    return folder


@pytest.fixture
def logdir(tmp_path, fixtures_dir):
    """Two runs side by side, and a two-rank job directory of gloo ranks."""
    root = tmp_path / "logdir"
    _run_dir(root / "runs" / "a", "a", fixtures_dir / "marked_two_steps.pt.trace.json")
    _run_dir(root / "runs" / "b", "b", fixtures_dir / "marked_two_steps.pt.trace.json", variant="compile")
    job = root / "job"
    for rank in (0, 1):
        _run_dir(job / f"rank{rank}", f"job-rank{rank}",
                 fixtures_dir / "distributed" / f"gloo_rank{rank}_two_steps.pt.trace.json",
                 rank=rank, job_id="job", world_size=2)
    (job / "manifest.json").write_text(json.dumps({
        "run_id": "job", "status": "complete", "workload": "mlp", "framework": "torch",
        "distributed": {"world_size": 2, "backend": "gloo", "ranks": [
            {"rank": r, "dir": f"rank{r}", "status": "complete"} for r in (0, 1)]}}))
    return root


@pytest.mark.parametrize("command", [
    ["breakdown", "{runs}", "--format", "json"],
    ["breakdown", "{runs}/a", "{runs}/b", "{job}", "--format", "json"],
    ["compare", "{runs}/a", "{runs}/b", "--format", "json"],
    ["report", "{runs}", "{job}", "--out", "{out}/r.md"],
    ["breakdown", "{job}"],
])
def test_every_command_reads_each_manifest_once(manifest_reads, logdir, tmp_path, command, monkeypatch):
    monkeypatch.setenv("GAPSCOPE_JOB_WORKERS", "1")  # the ranks read in this process, counted
    args = [a.format(runs=logdir / "runs", job=logdir / "job", out=tmp_path / "out") for a in command]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    named = {"a", "b"} if "{runs}" in " ".join(command) else set()
    if "{job}" in " ".join(command):
        named |= {"job", "rank0", "rank1"}
    assert set(manifest_reads) == named and set(manifest_reads.values()) == {1}, manifest_reads


def test_the_tensorboard_plugin_reads_each_manifest_once_per_request(manifest_reads, logdir, monkeypatch):
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from gapscope.analysis.tensorboard.plugin.plugin import GapscopePlugin
    monkeypatch.setenv("GAPSCOPE_JOB_WORKERS", "1")
    apps = GapscopePlugin(base_plugin.TBContext(logdir=str(logdir))).get_plugin_apps()
    response = Client(apps["/runs"]).get("/")
    doc = json.loads(response.get_data())
    assert response.status_code == 200 and [j["problem"] for j in doc["jobs"]] == [None]
    assert sorted(r["name"] for r in doc["runs"]) == ["job/rank0", "job/rank1", "runs/a", "runs/b"]
    assert dict(manifest_reads) == {"a": 1, "b": 1, "job": 1, "rank0": 1, "rank1": 1}
