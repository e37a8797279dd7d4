"""On-demand capture of a running job: a torch loop under gapscope.capture, asked by
`gapscope capture --pid` for a window of N steps, which it traces into a run directory of its
own; a dead process, one without gapscope and a second request each get one line, exit 2."""
from __future__ import annotations

import csv
import gzip
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.results.distributed_breakdown import breakdown_of
from gapscope.cli import cli
from gapscope.ondemand.registry import REQUEST, RUNTIME_ENV

ROOT = Path(__file__).resolve().parent.parent
FETCH_S = 0.003  # the job's loader: slow enough that a 100-step window lasts over 0.3 s


def _steps(run_dir: Path) -> list[dict]:
    with open(run_dir / "steps.csv") as handle:
        return list(csv.DictReader(handle))


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The long job, running while the module's tests ask it for windows; stopped at the end,
    when the test that needs it ended last (test_the_job_ends_with_its_windows_left_out)."""
    folder = tmp_path_factory.mktemp("ondemand")
    runtime = folder / "runtime"
    env = {**os.environ, RUNTIME_ENV: str(runtime),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "long_job.py"), str(folder / "out"),
                                str(folder / "stop"), str(FETCH_S)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = Path(process.stdout.readline().strip())
    assert run_dir.is_dir(), process.stderr.read()
    os.environ[RUNTIME_ENV] = str(runtime)
    yield {"process": process, "run_dir": run_dir, "stop": folder / "stop", "env": env}
    os.environ.pop(RUNTIME_ENV, None)
    if process.poll() is None:
        (folder / "stop").touch()
        process.wait(timeout=120)


def test_a_window_of_exactly_n_steps_and_its_breakdown(job):
    result = CliRunner().invoke(cli, ["capture", "--pid", str(job["process"].pid), "--steps", "4",
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    window = Path(re.search(r"into (\S+)", result.stderr).group(1))
    assert window.parent == job["run_dir"].parent and window.name.startswith(job["run_dir"].name)
    manifest = _manifest(window)
    assert manifest["status"] == "complete" and manifest["workload"] == "long-mlp"
    first, last = manifest["trace_window"]
    assert last - first + 1 == 4
    # The profiler's warm-up step, the 4 steps and the teardown step after them.
    assert [int(r["step"]) for r in _steps(window) if r["traced"] == "1"] == list(range(first - 1, last + 2))
    (trace,) = window.glob("*.pt.trace.json.gz")
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")) == [
        f"ProfilerStep#{n}" for n in range(1, 5)]
    # The printed breakdown: the job's unprofiled steps (all but the window's 6 and the warm-up).
    doc = json.loads(result.stdout)
    assert doc["steps"] == manifest["steps"] - 6 - 3 and doc["step_source"] == "unprofiled steps"
    traced = breakdown_of(window, "trace").to_json_dict()
    assert traced["steps"] == 4 and all(traced["phases"][p]["ms"] > 0 for p in
                                        ("data_load", "forward", "backward", "optimizer"))


def test_a_second_request_while_a_window_runs_gets_one_line(job):
    first = subprocess.Popen([sys.executable, "-c", "from cli import main; main()", "capture", "--pid",
                              str(job["process"].pid), "--steps", "100", "--format", "json"],
                             env=job["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    request = job["run_dir"] / REQUEST
    deadline = time.monotonic() + 60
    while not request.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    second = CliRunner().invoke(cli, ["capture", "--pid", str(job["process"].pid), "--steps", "3"])
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second.exit_code == 2
    assert second.stderr.count("\n") == 1 and "asked for earlier" in second.stderr, second.stderr


def test_the_running_job_appends_to_steps_csv_for_watch(job):
    """Runs before the job is stopped (tests run in file order): its live steps.csv grows."""
    result = CliRunner().invoke(cli, ["watch", str(job["run_dir"]), "--once", "--format", "json"])
    assert result.exit_code == 0, result.output
    state = json.loads(result.stdout)
    assert state["status"] == "running" and state["steps"] > 0 and state["steady_ms"] > 0


def test_the_job_ends_with_its_windows_left_out(job):
    job["stop"].touch()
    assert job["process"].wait(timeout=120) == 0, job["process"].stderr.read()
    manifest = _manifest(job["run_dir"])
    assert manifest["status"] == "complete"
    # Two windows: 4 and 100 steps, each with its warm-up and teardown step.
    assert sum(r["traced"] == "1" for r in _steps(job["run_dir"])) == (4 + 2) + (100 + 2)
    assert not (job["run_dir"] / REQUEST).exists()
    assert not any(Path(os.environ[RUNTIME_ENV]).glob("*.json"))  # unregistered


def test_a_dead_process_gets_one_line(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    result = CliRunner().invoke(cli, ["capture", "--pid", str(gone.pid), "--steps", "3"])
    assert result.exit_code == 2 and result.stderr == f"gapscope: error: no process {gone.pid}\n"


def test_a_process_without_gapscope_gets_one_line():
    result = CliRunner().invoke(cli, ["capture", "--pid", str(os.getpid()), "--steps", "3"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "runs no gapscope capture" in result.stderr


def test_a_lightning_fit_is_captured_the_same_way(tmp_path, monkeypatch):
    runtime = tmp_path / "runtime"
    monkeypatch.setenv(RUNTIME_ENV, str(runtime))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "long_lightning_fit.py"), "out"],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        run_dir = tmp_path / process.stdout.readline().strip()
        result = CliRunner().invoke(cli, ["capture", "--pid", str(process.pid), "--steps", "3",
                                          "--format", "json", "--timeout", "120"])
    finally:
        process.terminate()
        process.communicate(timeout=120)
    assert result.exit_code == 0, result.output
    window = Path(re.search(r"into (\S+)", result.stderr).group(1))
    assert window.parent == run_dir.resolve().parent
    first, last = _manifest(window)["trace_window"]
    assert last - first + 1 == 3
    assert [int(r["step"]) for r in _steps(window) if r["traced"] == "1"] == list(range(first - 1, last + 2))
    assert json.loads(result.stdout)["steps"] == _manifest(window)["steps"] - 5 - 2

