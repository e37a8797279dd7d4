"""One row never loses the matrix: a row with no steady step is refused before it runs, a row
whose runs cannot be analysed is that row's failure (table and matrix.json), and a row left
with some of its repeats says so wherever the folder is read."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.cli import cli
from gapscope.profilers.errors import GapscopeInputError
from gapscope.workloads.settings import RunSettings

ROOT = Path(__file__).resolve().parent.parent
TOML = """\
name = "{name}"
description = "a torch row and a Keras row with several updates per call"
baseline = "torch"
workload = "mlp"
[[rows]]
id = "torch"
framework = "torch"
[[rows]]
id = "keras-spe{spe}"
framework = "keras"
variant = "numpy,spe{spe}"
spe = "{spe}"
"""


def _matrix(tmp_path: Path, name: str, spe: int, *args: str):
    (tmp_path / f"{name}.toml").write_text(TOML.format(name=name, spe=spe))
    result = CliRunner().invoke(cli, ["matrix", "--file", str(tmp_path / f"{name}.toml"), *args,
                                      "--out", str(tmp_path / "out"), "--format", "json", "-q"])
    state = json.loads((tmp_path / "out" / name / "matrix.json").read_text())
    return result, state


@pytest.mark.parametrize("steps, warmup, spe, needed", [(50, 5, 512, 513), (20, 2, 64, 65),
                                                        (1000, 600, 512, 1025)])
def test_a_call_holding_every_step_is_refused_with_the_steps_it_needs(steps, warmup, spe, needed):
    settings = RunSettings("cnn", "keras", steps=steps, warmup_steps=warmup, trace_steps=1,
                           steps_per_execution=spe)
    with pytest.raises(GapscopeInputError, match=f"needs --steps {needed} or more"):
        settings.check_lengths()
    RunSettings("cnn", "keras", steps=needed, warmup_steps=warmup, trace_steps=1,
                steps_per_execution=spe).check_lengths()


def test_a_row_with_no_steady_step_is_refused_and_the_others_are_kept(tmp_path):
    result, state = _matrix(tmp_path, "refusing", 64, "--steps", "20", "--warmup", "2",
                            "--trace-steps", "3")
    assert result.exit_code == 0, result.output
    torch_row, keras_row = json.loads(result.stdout)["rows"]
    assert torch_row["status"] == "complete" and torch_row["step_ms"] > 0
    assert keras_row["status"] == "refused" and "needs --steps 65" in keras_row["reason"]
    stored = state["rows"]["keras-spe64"]
    assert stored["status"] == "refused" and stored["run_dir"] == [] and "65" in stored["reason"]
    # refused before its process started: no run directory of it
    assert not list((tmp_path / "out" / "refusing").glob("mlp-keras-*"))


def test_a_row_that_cannot_be_analysed_is_that_rows_failure(tmp_path):
    """One epoch of 5 updates with 8 per call: one call, all of it warm-up. The run completes;
    its analysis fails; the table and matrix.json say so and the torch row keeps its figures."""
    args = ("--epochs", "1", "--batch-size", "2000", "--warmup", "1", "--trace-steps", "1")
    result, state = _matrix(tmp_path, "unanalysable", 8, *args)
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    torch_row, keras_row = doc["rows"]
    assert torch_row["status"] == "complete" and torch_row["step_ratio"] == 1.0
    assert keras_row["status"] == "failed" and "all of them warm-up" in keras_row["reason"]
    assert "not analysable" in keras_row["reason"] and keras_row["step_ms"] is None
    stored = state["rows"]["keras-spe8"]
    assert stored["status"] == "failed" and stored["reason"] == keras_row["reason"]
    assert len(stored["run_dir"]) == 1  # the run is kept
    # a resume runs nothing again and tells the same
    again, state_again = _matrix(tmp_path, "unanalysable", 8, *args)
    assert again.exit_code == 1 and state_again["rows"] == state["rows"]
    table = CliRunner().invoke(cli, ["matrix", "--file", str(tmp_path / "unanalysable.toml"),
                                     *args, "--out", str(tmp_path / "out"), "-q", "--wide"])
    assert "failed: runs complete, not analysable" in table.stdout


def _gapscope(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait_for(path: Path, ready, process: subprocess.Popen, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            state = None
        if state and ready(state):
            return state
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    pytest.fail(f"the matrix never reached the state waited for: {process.communicate()}")


def test_sigterm_between_repeats_is_told_by_the_readers_and_resumes(tmp_path):
    (tmp_path / "pair.toml").write_text(
        'name = "pair"\ndescription = "two torch rows"\nbaseline = "eager"\nworkload = "mlp"\n'
        '[[rows]]\nid = "eager"\nframework = "torch"\n'
        '[[rows]]\nid = "tensors"\nframework = "torch"\nvariant = "tensor-dataset"\n')
    command = ["matrix", "--file", str(tmp_path / "pair.toml"), "--steps", "10", "--warmup", "2",
               "--trace-steps", "3", "--repeats", "2", "--out", str(tmp_path / "out"), "-q"]
    folder = tmp_path / "out" / "pair"
    process = _gapscope(*command)
    # The first round done (tensors has its run): the second round is under way.
    _wait_for(folder / "matrix.json", lambda s: len(s["rows"].get("tensors", {}).get("run_dir", [])) == 1,
              process)
    os.killpg(process.pid, signal.SIGTERM)
    process.communicate(timeout=120)
    assert process.returncode == 143
    rows = json.loads((folder / "matrix.json").read_text())["rows"]
    partial = [row_id for row_id, row in rows.items()
               if row["status"] == "running" and len(row["run_dir"]) == 1]
    assert partial, rows  # a row with 1 of 2 repeats, as the issue found it
    told = f"{partial[0]} #2: repeat #2 of 2 missing (1 of 2 recorded): the matrix was interrupted"

    broken_down = CliRunner().invoke(cli, ["breakdown", str(folder), "--format", "json"])
    assert broken_down.exit_code == 1 and told in broken_down.stderr, broken_down.stderr
    report = CliRunner().invoke(cli, ["report", str(folder), "--out", str(tmp_path / "r" / "m.md"),
                                      "-q"])
    assert "repeat #2 of 2 missing" in (tmp_path / "r" / "m.md").read_text(), report.output

    resumed = _gapscope(*command)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    rows = json.loads((folder / "matrix.json").read_text())["rows"]
    assert all(row["status"] == "complete" for row in rows.values())
    whole = CliRunner().invoke(cli, ["breakdown", str(folder), "--format", "json"])
    assert whole.exit_code == 0 and "missing" not in whole.stderr, whole.stderr
    assert len(json.loads(whole.stdout)) == 4
