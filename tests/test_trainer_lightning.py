"""gapscope's Lightning callback on real tiny fits (CPU): plain, gradient accumulation under
bf16-mixed, two optimizers (manual optimization) and two-rank DDP, each a run directory that
breakdown and compare read like any other."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import trainer_fits
from trainer_fits import MARKED, STEPS, TRACE, WARMUP, manifest_of, phase_ranges, steps_of
from gapscope.analysis.results.distributed_breakdown import breakdown_of
from gapscope.cli import cli
from gapscope.profilers.errors import EXIT_INCONCLUSIVE

ROOT = Path(__file__).resolve().parent.parent
@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return trainer_fits.lightning_fit(tmp_path_factory.mktemp("lit"), steps=STEPS, trace_steps=TRACE,
                                      warmup=WARMUP).run_dir


@pytest.fixture(scope="module")
def accumulated(tmp_path_factory):
    return trainer_fits.lightning_fit(tmp_path_factory.mktemp("lit_acc"), steps=12, accumulate=2,
                                      precision="bf16-mixed", trace_steps=TRACE, warmup=WARMUP).run_dir


def test_a_fit_is_a_run_directory_whose_phases_add_up(plain):
    manifest = manifest_of(plain)
    assert manifest["status"] == "complete" and manifest["error"] is None
    assert (manifest["framework"], manifest["workload"], manifest["variant"]) == ("torch", "lit-mlp", "user")
    assert manifest["settings"]["api"] == "gapscope.trainers.lightning"
    assert manifest["steps"] == STEPS and manifest["trace_window"] == [6, 8]
    rows = steps_of(plain)
    assert len(rows) == STEPS
    # The profiler's warm-up step (5), the window (6..8) and the teardown step after it (9).
    assert [int(r["step"]) for r in rows if r["traced"] == "1"] == [5, 6, 7, 8, 9]
    for row in rows:
        marked = sum(float(row[f"{phase}_ms"]) for phase in MARKED)
        assert all(float(row[f"{phase}_ms"]) > 0 for phase in MARKED), row
        assert marked <= float(row["step_ms"]), row  # other = step - the four, never negative
    # One range of each phase per traced step (the profiler's warm-up step is not recorded), and
    # two of optimizer: zero_grad (before backward) and the update.
    assert phase_ranges(plain) == {"gapscope/data_load": 3, "gapscope/forward": 3, "gapscope/backward": 3,
                              "gapscope/optimizer": 6}


@pytest.mark.parametrize("source, steps", [("trace", 3), ("timers", STEPS - WARMUP - 5)])
def test_breakdown_reads_it_from_trace_and_timers(plain, source, steps):
    result = breakdown_of(plain, source)
    result.self_check()
    doc = result.to_json_dict()
    assert doc["unidentified_phases"] == [] and doc["steps"] == steps
    assert all(doc["phases"][phase]["ms"] > 0 for phase in MARKED), doc["phases"]
    assert sum(p["ms"] for p in doc["phases"].values()) == pytest.approx(doc["step_ms"]["mean"], abs=1e-6)


def test_gradient_accumulation_makes_one_step_of_each_update(accumulated):
    manifest = manifest_of(accumulated)
    assert manifest["status"] == "complete" and manifest["steps"] == 12
    assert manifest["settings"]["precision"] == "bf16-mixed"
    assert manifest["settings"]["accumulate_grad_batches"] == 2
    # Two micro-batches a step: two fetches, forwards and backwards; one zero_grad and update.
    assert phase_ranges(accumulated) == {f"gapscope/{phase}": 6 for phase in MARKED}
    # The step's loss is the update's: the sum of the micro-batch losses Lightning halved
    # (10 classes, hardly trained: near ln 10 = 2.3, where one halved loss would be near 1.15).
    assert all(1.9 < float(row["loss"]) < 2.6 for row in steps_of(accumulated))


def test_two_optimizers_under_manual_optimization(tmp_path):
    run_dir = trainer_fits.lightning_fit(tmp_path, steps=24, two_optimizers=True,
                                         trace_steps=TRACE, warmup=WARMUP).run_dir
    # Lightning counts each optimizer's step in max_steps; a gapscope step is one training_step.
    assert manifest_of(run_dir)["steps"] == 12 and len(steps_of(run_dir)) == 12
    ranges = phase_ranges(run_dir)
    assert ranges["gapscope/backward"] == ranges["gapscope/optimizer"] == 2 * 3
    assert ranges["gapscope/data_load"] == 3
    doc = breakdown_of(run_dir, "timers").to_json_dict()
    assert all(doc["phases"][phase]["ms"] > 0 for phase in MARKED)


def test_compare_reads_two_fits(plain, accumulated):
    result = CliRunner().invoke(cli, ["compare", str(plain), str(accumulated), "--format", "json"])
    assert result.exit_code in (0, EXIT_INCONCLUSIVE), result.output  # 3: the machine was busy
    runs = json.loads(result.stdout)["runs"]
    assert [run["breakdown"]["steps"] for run in runs] == [STEPS - WARMUP - 5, 12 - WARMUP - 5]


def test_ddp_writes_one_rank_directory_each_in_a_job(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "lightning_ddp_fit.py"), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (job,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert job.name.startswith("lit-ddp-torch-user-x2-")
    assert manifest_of(job)["status"] == "complete"
    for rank in (0, 1):
        manifest = manifest_of(job / f"rank{rank}")
        assert (manifest["status"], manifest["rank"], manifest["world_size"], manifest["steps"]) == (
            "complete", rank, 2, 8)
    result = CliRunner().invoke(cli, ["breakdown", str(job), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["ranks"]) == 2
