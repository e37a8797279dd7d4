"""An interrupted sweep names its missing points and concludes nothing over them; a point that
cannot be analysed is that point's gap; a sweep folder is no run for `breakdown`."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.cli import cli

ROOT = Path(__file__).resolve().parent.parent
RUN_LENGTHS = ["--steps", "6", "--warmup", "1", "--trace-steps", "2", "--repeats", "1"]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A real sweep over three batch sizes, stopped by SIGTERM once two points are done."""
    out = tmp_path_factory.mktemp("sweeps")
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), "sweep", "mlp", "--framework", "torch,torch:tensor-dataset",
         "--batch-size", "16,32,64", *RUN_LENGTHS, "--out", str(out), "-q"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and process.poll() is None:
            states = list(out.glob("sweep-*/sweep.json"))
            try:
                if states and len(json.loads(states[0].read_text())["points"]) == 2:
                    break
            except ValueError:
                pass  # read while written: written atomically, but glob may race a rename
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGTERM)
        process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143, process.stderr
    (folder,) = out.glob("sweep-*")
    state = json.loads((folder / "sweep.json").read_text())
    assert state["status"] == "failed" and [p["value"] for p in state["points"]] == [16, 32]
    return folder


def test_an_interrupted_sweep_names_its_missing_point_and_concludes_nothing_over_it(interrupted):
    result = CliRunner().invoke(cli, ["sweep", str(interrupted), "--wide"])
    assert result.exit_code == 1, result.output
    assert "missing: batch size 64: not measured: the sweep stopped (batch size 64: interrupted)" \
        in result.stdout
    assert "no crossover in the range" not in result.stdout
    assert "at every batch size swept" not in result.stdout
    assert "sweep incomplete: batch size 64 without figures" in result.stderr
    doc = json.loads(CliRunner().invoke(cli, ["sweep", str(interrupted), "--format", "json"]).stdout)
    assert doc["status"] == "failed" and [p["value"] for p in doc["points"]] == [16, 32]
    assert [g["value"] for g in doc["gaps"]] == [64]


def test_a_point_that_cannot_be_analysed_is_a_gap_and_the_others_stay(interrupted, tmp_path):
    copy = tmp_path / interrupted.name
    shutil.copytree(interrupted, copy)
    first = json.loads((copy / "sweep.json").read_text())["points"][0]["ab"]
    for manifest in (copy / first).glob("*/manifest.json"):
        manifest.write_text("{not json")  # a corrupt run: its point cannot be analysed
    result = CliRunner().invoke(cli, ["sweep", str(copy), "--format", "json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert [p["value"] for p in doc["points"]] == [32]
    gaps = {g["value"]: g["reason"] for g in doc["gaps"]}
    assert set(gaps) == {16, 64} and gaps[16].startswith("not analysable:")
    assert doc["crossovers"] == []


def test_breakdown_of_a_sweep_folder_points_to_gapscope_sweep(interrupted):
    result = CliRunner().invoke(cli, ["breakdown", str(interrupted)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"is a sweep: gapscope sweep {interrupted} reports it" in lines[0]
    assert "gapscope compare" in lines[0]


def test_a_configuration_with_no_steady_step_is_refused_before_the_sweep_runs(tmp_path):
    result = CliRunner().invoke(cli, ["sweep", "mlp", "--framework", "torch,keras:spe64",
                                      "--batch-size", "16,32", "--steps", "20", "--warmup", "2",
                                      "--trace-steps", "3", "--out", str(tmp_path), "-q"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "steps_per_execution 64" in lines[0] and "needs --steps 65" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_still_marked_running_is_not_said_to_have_stopped(interrupted, tmp_path):
    copy = tmp_path / interrupted.name
    shutil.copytree(interrupted, copy)
    state = json.loads((copy / "sweep.json").read_text())
    state.update(status="running", error=None)
    (copy / "sweep.json").write_text(json.dumps(state))
    doc = json.loads(CliRunner().invoke(cli, ["sweep", str(copy), "--format", "json"]).stdout)
    assert doc["gaps"] == [{"value": 64, "reason": "not measured: the sweep has not finished "
                                                   "(status running)"}]


@pytest.mark.parametrize("values", [["16", 32, 64], [16, 32, True], [16, 32, None]])
def test_swept_values_that_are_no_numbers_are_a_corrupt_state(interrupted, tmp_path, values):
    copy = tmp_path / interrupted.name
    shutil.copytree(interrupted, copy)
    state = json.loads((copy / "sweep.json").read_text())
    state["values"] = values
    (copy / "sweep.json").write_text(json.dumps(state))
    result = CliRunner().invoke(cli, ["sweep", str(copy)])
    # One line naming the file: the state loader says which value, or that the state is corrupt.
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "sweep.json" in line and ("corrupt sweep state" in line or "should be a number" in line)
