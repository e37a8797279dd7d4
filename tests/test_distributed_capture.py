"""gapscope.capture inside a user's torchrun script: every rank writes `rank<r>/` of one job
directory, rank 0 ends the job manifest, a rank that fails fails the job naming it, and a rank
slowed in its data loading shows it in its own steps."""
from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).parent / "ddp_user_loop.py"


sys.path.insert(0, str(Path(__file__).parent))
from ddp_user_loop import run_under_torchrun as torchrun_user_loop  # noqa: E402


def _job(out: Path) -> Path:
    [job] = [p for p in out.iterdir() if p.is_dir()]
    return job


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def _steady_mean(run_dir: Path, column: str) -> float:
    with open(run_dir / "steps.csv") as file:
        rows = [row for row in csv.DictReader(file) if row["warmup"] == "0" and row["traced"] == "0"]
    return statistics.mean(float(row[column]) for row in rows)


@pytest.fixture(scope="module")
def slowed_job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("capture")
    done = torchrun_user_loop(out, "--steps", "20", "--slow-rank", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    return _job(out)


def test_every_rank_writes_into_one_job_directory(slowed_job):
    assert slowed_job.name.startswith("ddp-mlp-torch-user-x2-")
    job = _manifest(slowed_job)
    assert (job["status"], job["error"]) == ("complete", None)
    assert {k: job["distributed"][k] for k in ("world_size", "backend", "launcher", "nnodes")} == {
        "world_size": 2, "backend": "gloo", "launcher": "user", "nnodes": 1}
    assert [(r["rank"], r["status"]) for r in job["distributed"]["ranks"]] == [
        (0, "complete"), (1, "complete")]
    for rank in (0, 1):
        run = _manifest(slowed_job / f"rank{rank}")
        assert (run["status"], run["rank"], run["world_size"], run["job_id"], run["backend"]) == (
            "complete", rank, 2, slowed_job.name, "gloo")
        assert len((slowed_job / f"rank{rank}" / "steps.csv").read_text().splitlines()) == 1 + 20
        assert list((slowed_job / f"rank{rank}").glob("*.pt.trace.json*"))


def test_the_slowed_rank_loads_its_data_20_ms_longer(slowed_job):
    """What the straggler analysis reads: rank 1's data_load carries the 20 ms sleep; rank 0's
    step is as long anyway (it waits in backward's all-reduce for rank 1)."""
    slow = _steady_mean(slowed_job / "rank1", "data_load_ms")
    fast = _steady_mean(slowed_job / "rank0", "data_load_ms")
    assert 19.0 < slow - fast < 40.0, (slow, fast)
    waited = _steady_mean(slowed_job / "rank0", "backward_ms") - _steady_mean(slowed_job / "rank1", "backward_ms")
    assert waited > 10.0


def test_a_rank_that_raises_fails_the_job_naming_it(tmp_path):
    done = torchrun_user_loop(tmp_path, "--steps", "12", "--fail-rank", "1", "--fail-at", "8")
    assert done.returncode != 0
    job_dir = _job(tmp_path)
    job = _manifest(job_dir)
    assert job["status"] == "failed"
    assert job["error"] == "rank 1: ValueError: rank 1's loop broke at step 8"
    ranks = {r["rank"]: r for r in job["distributed"]["ranks"]}
    assert ranks[1]["error"] == "ValueError: rank 1's loop broke at step 8"
    # Its collective broke, or torchrun stopped it, after steps it keeps: interrupted.
    assert ranks[0]["status"] == "interrupted"
    assert _manifest(job_dir / "rank0")["status"] == "interrupted"
    assert ranks[1]["status"] == "interrupted"  # 8 steps done before it raised
    assert len((job_dir / "rank1" / "steps.csv").read_text().splitlines()) == 1 + 8


def test_a_capture_started_before_the_process_group_agrees_on_the_job_from_torchrun(tmp_path):
    done = torchrun_user_loop(tmp_path, "--steps", "12", "--capture-before-init")
    assert done.returncode == 0, done.stderr[-2000:]
    job_dir = _job(tmp_path)
    job = _manifest(job_dir)
    assert job["status"] == "complete" and job["distributed"]["backend"] == "gloo"
    assert sorted(p.name for p in job_dir.iterdir() if p.is_dir()) == ["rank0", "rank1"]


def test_one_process_capture_is_unchanged(tmp_path, monkeypatch):
    """No torchrun around it: a plain run directory, as before."""
    sys.path.insert(0, str(Path(__file__).parent))
    from user_loops import torch_loop
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    cap = torch_loop(tmp_path)
    assert cap.job_dir is None and cap.run_dir.parent == tmp_path
    assert "rank" not in _manifest(cap.run_dir)


def test_a_rank_killed_outright_is_named_by_rank_0(tmp_path):
    """Rank 1 gets SIGKILL (it can record nothing): torchrun stops rank 0, which records its
    end and the job's, naming rank 1 from its manifest left `running` by a process now gone."""
    import os
    import signal
    import time
    process = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-backend",
         "c10d", "--rdzv-endpoint", "localhost:0", str(SCRIPT), "--out", str(tmp_path),
         "--steps", "3000", "--trace", "1", "2", "--warmup", "1"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            jobs = [p for p in tmp_path.iterdir() if p.is_dir()]
            if jobs and all((jobs[0] / f"rank{r}" / "manifest.json").exists() for r in (0, 1)):
                break
            time.sleep(0.2)
        time.sleep(2)
        job_dir = _job(tmp_path)
        os.kill(_manifest(job_dir / "rank1")["pid"], signal.SIGKILL)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    job = _manifest(job_dir)
    assert job["status"] == "failed"
    assert job["error"].startswith("rank 1: interrupted (process "), job["error"]
    assert job["error"].endswith("is gone)")
    # Stopped after the steps it had done by then (kept: interrupted), or before any (failed).
    rank0 = _manifest(job_dir / "rank0")
    assert rank0["status"] == ("interrupted" if rank0.get("steps") else "failed"), rank0
