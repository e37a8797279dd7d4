"""A capture that stops early keeps what it recorded: SIGTERM gives an `interrupted` run with its
steps, which breakdown analyses; SIGKILL leaves a run breakdown reads up to its last whole step
(real torch loops in their own processes, which the signals end)."""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.cli import cli

ROOT = Path(__file__).resolve().parent.parent
STOP_AT = 12


def _stopped(out: Path, signum: int, loop: str = "stopped_torch_loop") -> Path:
    """The run of user_loops.`loop` in its own process, stopped at STOP_AT by `signum`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run(
        [sys.executable, "-c", f"import pathlib, user_loops; user_loops.{loop}("
                               f"pathlib.Path({str(out)!r}), stop_at={STOP_AT}, signum={int(signum)})"],
        env=env, capture_output=True, text=True, timeout=300)
    # Ended by the signal itself: SIGTERM sent again once the capture recorded its end.
    assert done.returncode == -signum, done.stderr[-2000:]
    (run_dir,) = out.iterdir()
    return run_dir


def _rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "steps.csv") as handle:
        return list(csv.DictReader(handle))


def _steady_unprofiled(rows: list[dict]) -> list[int]:
    return [int(r["step"]) for r in rows if r["warmup"] == "0" and r["traced"] == "0"]


@pytest.fixture(scope="module")
def terminated(tmp_path_factory):
    return _stopped(tmp_path_factory.mktemp("sigterm"), signal.SIGTERM)


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    return _stopped(tmp_path_factory.mktemp("sigkill"), signal.SIGKILL)


def test_sigterm_is_recorded_as_interrupted_with_its_steps(terminated):
    manifest = json.loads((terminated / "manifest.json").read_text())
    assert (manifest["status"], manifest["error"], manifest["stopped_by"]) == (
        "interrupted", "interrupted", "SIGTERM")
    rows = _rows(terminated)
    # Steps 0-11 ran whole; step 12, begun when the signal came, is dropped.
    assert [int(r["step"]) for r in rows] == list(range(STOP_AT)) and manifest["steps"] == STOP_AT
    # The window (10, 16) was cut short: the trace holds what it got.
    assert manifest["trace_window"] == [10, 11] and list(terminated.glob("*.pt.trace.json*"))


def test_breakdown_analyses_the_interrupted_run_and_says_so(terminated):
    result = CliRunner().invoke(cli, ["breakdown", str(terminated), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = _rows(terminated)
    # Warm-up 0-2; the profiler's warm-up step 9, the window 10-11: 3-8 are unprofiled.
    assert _steady_unprofiled(rows) == [3, 4, 5, 6, 7, 8] and doc["steps"] == 6
    expected = sum(float(r["step_ms"]) for r in rows if int(r["step"]) in range(3, 9)) / 6
    assert doc["step_ms"]["mean"] == pytest.approx(expected, rel=1e-6)
    assert f"run interrupted (SIGTERM): these figures are of the {STOP_AT} steps it recorded" in doc["notes"]


def test_a_killed_tf_loop_is_read_up_to_its_last_whole_step(tmp_path):
    """A TensorFlow loop appends its steps.csv as it goes too."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run(
        [sys.executable, "-c", "import pathlib, user_loops; user_loops.gradient_tape_loop("
                               f"pathlib.Path({str(tmp_path)!r}), kill_at={STOP_AT})"],
        env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    (run_dir,) = tmp_path.iterdir()
    rows = _rows(run_dir)
    assert [int(r["step"]) for r in rows] == list(range(STOP_AT))
    # user_loops.TRACE (6, 10): 6-9 traced, 10 paid the profiler's stop, 3-5 and 11 unprofiled.
    assert _steady_unprofiled(rows) == [3, 4, 5, 11]
    result = CliRunner().invoke(cli, ["breakdown", str(run_dir), "--source", "timers", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["steps"] == 4
    assert f"these figures are of the {STOP_AT} steps it recorded" in " ".join(doc["notes"])


def test_a_killed_run_is_read_up_to_its_last_whole_step(killed):
    manifest = json.loads((killed / "manifest.json").read_text())
    assert manifest["status"] == "running"  # it could record nothing
    rows = _rows(killed)
    # Flushed at the end of step 11, the last before the kill; the trace window was open.
    assert [int(r["step"]) for r in rows] == list(range(STOP_AT))
    assert not list(killed.glob("*.pt.trace.json*"))
    # A row the kill cut off while it was being appended.
    with open(killed / "steps.csv", "a") as handle:
        handle.write(f"{STOP_AT},0,0,0,4.1")
    result = CliRunner().invoke(cli, ["breakdown", str(killed), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert _steady_unprofiled(rows) == [3, 4, 5, 6, 7, 8] and doc["steps"] == 6
    expected = sum(float(r["step_ms"]) for r in rows if int(r["step"]) in range(3, 9)) / 6
    assert doc["step_ms"]["mean"] == pytest.approx(expected, rel=1e-6)
    notes = " ".join(doc["notes"])
    assert f"run killed: interrupted (process {manifest['pid']} on" in notes
    assert f"these figures are of the {STOP_AT} steps it recorded" in notes
    assert "no trace file: the run stopped inside its trace window" in notes
    assert "1 invalid row(s) dropped (1 partial last line (the run was killed while writing it))" in notes


def test_a_capture_killed_before_its_first_step_is_refused_in_one_line(killed, tmp_path):
    import shutil
    copy = shutil.copytree(killed, tmp_path / killed.name)
    (copy / "steps.csv").unlink()
    result = CliRunner().invoke(cli, ["breakdown", str(copy)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().endswith("before it recorded a whole step: nothing to analyse")
    assert f"run {killed.name} killed: interrupted (process " in result.stderr



@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_stopped_keras_fit_keeps_the_steps_it_did(tmp_path, signum):
    """capture_keras as the torch capture: under `with`, SIGTERM ends the run `interrupted` with
    its steps; a SIGKILL leaves the steps.csv appended as the fit went (user_loops.TRACE (6, 10):
    6-9 traced, 10 paid the TF profiler's stop)."""
    run_dir = _stopped(tmp_path, signum, loop="keras_fit")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    rows = _rows(run_dir)
    assert [int(r["step"]) for r in rows] == list(range(STOP_AT))
    assert _steady_unprofiled(rows) == [3, 4, 5, 11]
    if signum == signal.SIGTERM:
        assert (manifest["status"], manifest["stopped_by"], manifest["steps"]) == (
            "interrupted", "SIGTERM", STOP_AT)
    else:
        assert manifest["status"] == "running"
    result = CliRunner().invoke(cli, ["breakdown", str(run_dir), "--source", "timers", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    expected = sum(float(r["step_ms"]) for r in rows if int(r["step"]) in (3, 4, 5, 11)) / 4
    assert doc["steps"] == 4 and doc["step_ms"]["mean"] == pytest.approx(expected, rel=1e-6)
    assert f"these figures are of the {STOP_AT} steps it recorded" in " ".join(doc["notes"])
