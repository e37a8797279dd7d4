"""Runs end honest: SIGINT and SIGTERM stop `gapscope run` and `gapscope matrix` (the run in
flight recorded `failed: interrupted`, completed rows kept), a stale `running` run reads as
interrupted everywhere, a full disk is one line and a failed run, a run-id clash gets a new id."""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from gapscope.cli import cli
from gapscope.profilers import run_dir as run_dir_module
from gapscope.profilers.run_dir import create_run_dir, effective_status, write_atomic

ROOT = Path(__file__).resolve().parent.parent


def _gapscope(args: list[str], **popen) -> subprocess.Popen:
    """gapscope in a process of its own (its own session, as `timeout` or a shell would start
    it), so that a signal reaches it alone and the test can always end what it started."""
    return subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **popen)


def _finish(process: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    try:
        return process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # the test's own process group only
            process.wait()


def _wait_for(condition, timeout: float = 90, what: str = "it"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _manifest(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def _running_run(folder: Path, exclude=()) -> Path | None:
    """A run directory in `folder` whose run process is in its training loop."""
    for run in folder.glob("*/manifest.json"):
        manifest = _manifest(run.parent)
        if (run.parent not in exclude and manifest and manifest["status"] == "running"
                and isinstance(manifest.get("pid"), int) and psutil.pid_exists(manifest["pid"])):
            return run.parent
    return None


def _no_temporary_files(folder: Path) -> None:
    assert not [p for p in folder.rglob(".*.tmp*")], "a temporary manifest was left behind"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_run_and_records_it_interrupted(tmp_path, signum):
    """Ctrl-C (SIGINT) or `timeout`/kill (SIGTERM) to gapscope: forwarded to the run process,
    which records its end; the command stops with 128 + the signal, one line on stderr."""
    out = tmp_path / "runs"
    process = _gapscope(["run", "mlp", "--framework", "torch", "--steps", "50000", "--no-trace",
                         "--out", str(out), "-q"])
    try:
        run = _wait_for(lambda: out.is_dir() and _running_run(out), what="the run to start")
        time.sleep(1.5)  # inside the training loop
        child = _manifest(run)["pid"]
        process.send_signal(signum)
    finally:
        _, stderr = _finish(process)
    assert process.returncode == 128 + signum, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gapscope: interrupted") and "Traceback" not in stderr
    manifest = _manifest(run)
    assert (manifest["status"], manifest["error"]) == ("failed", "interrupted")
    assert not psutil.pid_exists(child), "the run process outlived gapscope"
    _no_temporary_files(out)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's prctl")
def test_run_process_stops_and_records_it_when_gapscope_is_killed(tmp_path):
    """SIGKILL to gapscope cannot be forwarded: the run process must not train on orphaned; the
    kernel's parent-death signal stops it, and it records `failed: interrupted` itself."""
    out = tmp_path / "runs"
    process = _gapscope(["run", "mlp", "--framework", "torch", "--steps", "50000", "--no-trace",
                         "--out", str(out), "-q"])
    try:
        run = _wait_for(lambda: out.is_dir() and _running_run(out), what="the run to start")
        child = _manifest(run)["pid"]
        process.kill()
        process.wait()
        # A generous bound, not a speed claim: with 2 intra-op threads on 2 oversubscribed
        # cores a step can take seconds (60 s ran out at load 9), and the SIGTERM is handled
        # between steps. A run that trained on instead would end `complete`, which fails below.
        _wait_for(lambda: not psutil.pid_exists(child) or
                  psutil.Process(child).status() == psutil.STATUS_ZOMBIE,
                  timeout=300, what="the orphaned run process to stop")
    finally:
        _finish(process)
    manifest = _manifest(run)
    assert (manifest["status"], manifest["error"]) == ("failed", "interrupted")
    _no_temporary_files(out)


def test_sigint_as_the_run_finishes_is_not_a_clean_exit(tmp_path):
    """Ctrl-C just as the run records its end: the run keeps the end it recorded (complete,
    nothing was cut), and the command still stops with 130 rather than carry on to exit 0."""
    out = tmp_path / "runs"
    process = _gapscope(["run", "mlp", "--framework", "torch", "--steps", "12", "--warmup", "2",
                         "--trace-steps", "4", "--out", str(out), "-q"])

    def completed():
        for manifest in out.glob("*/manifest.json") if out.is_dir() else ():
            if (_manifest(manifest.parent) or {}).get("status") == "complete":
                return manifest.parent
        return None
    try:
        run = _wait_for(lambda: process.poll() is not None or completed(), what="the run to end")
        process.send_signal(signal.SIGINT)
    finally:
        _, stderr = _finish(process)
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("gapscope: interrupted")
    assert _manifest(run)["status"] == "complete"
    _no_temporary_files(out)


MATRIX_TOML = """\
name = "signalled"
description = "a quick row, a slow row, a row never reached"
baseline = "quick"
[[rows]]
id = "quick"
workload = "mlp"
framework = "torch"
[[rows]]
id = "slow"
workload = "cnn"
framework = "torch"
[[rows]]
id = "never"
workload = "mlp"
framework = "torch"
variant = "tensor-dataset"
"""


def test_sigint_stops_the_whole_matrix_and_keeps_completed_rows(tmp_path):
    toml = tmp_path / "signalled.toml"
    toml.write_text(MATRIX_TOML)
    out = tmp_path / "out"
    args = ["matrix", "--file", str(toml), "--steps", "400", "--warmup", "2", "--trace-steps", "3",
            "--out", str(out), "-q"]
    process = _gapscope(args)
    folder = out / "signalled"

    def slow_row_running():
        state = _manifest_like(folder / "matrix.json")
        if not state or state["rows"].get("quick", {}).get("status") != "complete":
            return None
        quick = folder / state["rows"]["quick"]["run_dir"][0]
        return _running_run(folder, exclude=(quick,))
    try:
        slow = _wait_for(slow_row_running, timeout=150, what="the second row to start")
        time.sleep(1.5)
        process.send_signal(signal.SIGINT)
    finally:
        _, stderr = _finish(process)
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1].startswith("gapscope: interrupted")
    rows = _manifest_like(folder / "matrix.json")["rows"]
    assert rows["quick"]["status"] == "complete"
    assert (rows["slow"]["status"], rows["slow"]["reason"]) == ("failed", "interrupted")
    assert rows["slow"]["run_dir"] == [slow.name]  # a name, inside the matrix folder
    assert "never" not in rows, "the matrix went on after Ctrl-C"
    assert (_manifest(slow)["status"], _manifest(slow)["error"]) == ("failed", "interrupted")
    _no_temporary_files(out)


def _manifest_like(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@pytest.mark.parametrize("framework", ["torch", "keras"])
def test_full_disk_is_one_line_and_a_failed_run(tmp_path, framework):
    """A file-size limit stands in for a full disk: writes past it fail with an OSError
    (EFBIG, as ENOSPC would), on every machine and without root. Both profilers write their
    trace from C++ and ignore the failure: the run must not say `complete` over a cut trace."""
    out = tmp_path / "runs"
    limit = 32 * 1024  # the manifest fits; the profiler trace (50 KB and more) does not

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    process = _gapscope(["run", "mlp", "--framework", framework, "--steps", "12", "--warmup", "2",
                         "--trace-steps", "6", "--out", str(out), "-q"], preexec_fn=limited)
    _, stderr = _finish(process)
    assert process.returncode == 1, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gapscope: run ") and "Traceback" not in stderr
    (run,) = out.iterdir()
    manifest = _manifest(run)
    assert manifest["status"] == "failed"
    assert "truncated trace" in manifest["error"] or "File too large" in manifest["error"]
    _no_temporary_files(out)


def test_write_atomic_leaves_no_temporary_file_when_the_write_fails(tmp_path):
    target = tmp_path / "manifest.json"
    target.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, "\udcff")  # fails inside the write, after the temporary file opened
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_run_id_clash_retries_with_a_new_id(tmp_path, monkeypatch):
    tails = iter(["beef", "beef", "cafe"])
    monkeypatch.setattr(run_dir_module.secrets, "token_hex", lambda n: next(tails))
    monkeypatch.setattr(run_dir_module.time, "strftime", lambda fmt: "20260101-000000")
    first = create_run_dir(tmp_path, "mlp", "torch")
    second = create_run_dir(tmp_path, "mlp", "torch")  # draws beef again: taken
    assert (first.name, second.name) == ("mlp-torch-20260101-000000-beef",
                                         "mlp-torch-20260101-000000-cafe")


def _dead_pid() -> int:
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    return finished.pid


def test_stale_running_run_reads_as_interrupted_in_report_and_matrix_resume(torch_run, tmp_path):
    """A run left `running` by a process that is gone (SIGKILL, power cut) is failed:
    interrupted wherever it is read: the report lists it so, a matrix resume runs it again."""
    stale = tmp_path / torch_run.name
    shutil.copytree(torch_run, stale)
    manifest = _manifest(stale)
    manifest.update(status="running", error=None, pid=_dead_pid())
    (stale / "manifest.json").write_text(json.dumps(manifest))
    assert effective_status(manifest)[0] == "failed"

    result = CliRunner().invoke(cli, ["report", str(stale), str(torch_run),
                                      "--out", str(tmp_path / "report" / "r.md"), "-q"])
    assert result.exit_code == 1, result.output
    assert "interrupted (process" in result.stderr
    text = (tmp_path / "report" / "r.md").read_text()
    assert "| running |" not in text and "| failed |" in text  # the environment table's status

    from gapscope.workloads.matrix import Matrix, MatrixRow, run_matrix
    from gapscope.workloads.settings import RunSettings
    matrix = Matrix("stale", "one row", "", "row", (MatrixRow("row", "mlp", "torch"),))
    folder = tmp_path / "matrices" / "stale"
    folder.mkdir(parents=True)
    shutil.move(str(stale), folder / stale.name)
    base = RunSettings(workload="", framework="", steps=8, warmup_steps=2, trace_steps=3)
    settings = {k: v for k, v in base.to_dict().items() if k not in ("workload", "framework", "variant")}
    (folder / "matrix.json").write_text(json.dumps({"matrix": "stale", "settings": settings, "rows": {
        "row": {"row_id": "row", "status": "complete", "run_dir": [stale.name], "reason": None}}}))
    (outcome,) = run_matrix(matrix, tmp_path / "matrices", base)
    assert outcome.status == "complete" and Path(outcome.run_dir).name != stale.name


def test_an_error_that_follows_a_stop_signal_is_the_interruption():
    from gapscope.profilers.run_lifecycle import Interrupted, signals_interrupt
    with signals_interrupt() as request:
        failure = RuntimeError("not asked to stop")
        assert request.behind(failure) is failure
        try:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except Interrupted:
                # What TensorFlow's pybind11 made of it, when the handler ran inside its error handling.
                raise RuntimeError("MISMATCH of original and normalized active exception types: "
                                   "ORIGINAL UnavailableError REPLACED BY Interrupted: SIGTERM")
        except RuntimeError as exc:
            seen = request.behind(exc)
    assert isinstance(seen, Interrupted) and seen.exit_code == 143
