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
from gapscope.ondemand.registry import RUNTIME_ENV, request_path

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
    first = subprocess.Popen([sys.executable, "-c", "from gapscope.cli import main; main()", "capture", "--pid",
                              str(job["process"].pid), "--steps", "100", "--format", "json"],
                             env=job["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    request = request_path(job["process"].pid)
    deadline = time.monotonic() + 60
    while not request.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    second = CliRunner().invoke(cli, ["capture", "--pid", str(job["process"].pid), "--steps", "3"])
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert second.exit_code == 2
    assert second.stderr.count("\n") == 1 and "asked for earlier" in second.stderr, second.stderr


def _window_of(job, asked: int) -> Path:
    """The window asked for `asked` steps, once its manifest says it has ended."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for window in job["run_dir"].parent.glob(f"{job['run_dir'].name}-window-*"):
            manifest = _manifest(window) if (window / "manifest.json").exists() else {}
            if (manifest.get("on_demand") or {}).get("steps") == asked and manifest["status"] != "running":
                return window
        time.sleep(0.05)
    raise AssertionError(f"no ended window of {asked} steps")


def test_a_capture_that_times_out_withdraws_and_the_job_closes_its_window(job):
    """--steps is capped at 500 with a note; the wait gives up after 1 s (500 traced steps take
    over 1.5 s at 3 ms each), withdraws the request, and the job ends the window at once."""
    pid = job["process"].pid
    result = CliRunner().invoke(cli, ["capture", "--pid", str(pid), "--steps", "10000000", "--timeout", "1"])
    assert result.exit_code == 1, result.output
    note, error = result.stderr.splitlines()
    assert note.startswith("gapscope: note: --steps 10000000 capped at 500")
    assert "within 1 s" in error and "withdrawn" in error
    assert not request_path(pid).exists()
    manifest = _manifest(_window_of(job, 500))
    if manifest["status"] == "failed":  # withdrawn before its first traced step (a slow start)
        assert "withdrawn" in manifest["error"]
    else:
        first, last = manifest["trace_window"]
        assert manifest["withdrawn"] is True and 1 <= last - first + 1 < 500


def test_the_running_job_appends_to_steps_csv_for_watch(job):
    """Runs before the job is stopped (tests run in file order): its live steps.csv grows."""
    result = CliRunner().invoke(cli, ["watch", str(job["run_dir"]), "--once", "--format", "json"])
    assert result.exit_code == 0, result.output
    state = json.loads(result.stdout)
    assert state["status"] == "running" and state["steps"] > 0 and state["steady_ms"] > 0


def test_the_job_ends_with_its_windows_left_out(job):
    """A window the job's end cuts short is saved with the steps it got, and a note says so;
    the job's own steps.csv marks every window's steps (warm-up and teardown included) traced."""
    pid = job["process"].pid
    asking = subprocess.Popen([sys.executable, "-c", "from gapscope.cli import main; main()", "capture", "--pid",
                               str(pid), "--steps", "400", "--format", "json"],
                              env=job["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not any(w.joinpath("manifest.json").exists() and _manifest(w)["on_demand"]["steps"] == 400
                  for w in job["run_dir"].parent.glob("*-window-*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    # The job looks for the stop file every 50 steps: a window begun on the step before a look
    # traced none (a loaded suite saw trace_window [750, 749]). Stop once it has run a few more.
    begun = len(_steps(job["run_dir"]))
    while len(_steps(job["run_dir"])) < begun + 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    job["stop"].touch()
    assert job["process"].wait(timeout=120) == 0, job["process"].stderr.read()
    out, err = asking.communicate(timeout=120)
    assert asking.returncode == 0, err
    window = _window_of(job, 400)
    first, last = _manifest(window)["trace_window"]
    assert f"note: the window holds {last - first + 1} of the 400 steps asked for" in err
    manifest = _manifest(job["run_dir"])
    assert manifest["status"] == "complete"
    steps = [int(r["step"]) for r in _steps(job["run_dir"])]
    expected = set()
    for w in job["run_dir"].parent.glob("*-window-*"):
        if _manifest(w).get("trace_window"):
            first, last = _manifest(w)["trace_window"]
            expected.update(range(first - 1, last + 2))
    assert {int(r["step"]) for r in _steps(job["run_dir"]) if r["traced"] == "1"} == expected & set(steps)
    assert len(expected) >= (4 + 2) + (100 + 2)
    assert not request_path(pid).exists()
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



def test_a_job_killed_during_its_window_gets_one_line_and_exit_1(tmp_path, monkeypatch):
    runtime = tmp_path / "runtime"
    monkeypatch.setenv(RUNTIME_ENV, str(runtime))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    job = subprocess.Popen([sys.executable, str(ROOT / "tests" / "long_job.py"), str(tmp_path / "out"),
                            str(tmp_path / "stop"), str(FETCH_S)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_dir = Path(job.stdout.readline().strip())
        asking = subprocess.Popen([sys.executable, "-c", "from gapscope.cli import main; main()", "capture", "--pid",
                                   str(job.pid), "--steps", "400"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not any(run_dir.parent.glob("*-window-*/manifest.json")) and time.monotonic() < deadline:
            time.sleep(0.01)
        job.kill()
        job.wait()
        out, err = asking.communicate(timeout=60)
    finally:
        job.kill()
        job.communicate()
    assert asking.returncode == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"gapscope: process {job.pid}'s window failed"), err
    assert not request_path(job.pid).exists()
