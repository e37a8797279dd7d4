"""Starts N local MultiWorkerMirroredStrategy workers as the launcher does: one
`python -m workloads.execute <job>/rank<r> SETTINGS` each, with its TF_CONFIG on free ports."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from profilers.written_traces import TF_PROFILER_STOPPING
from workloads.tf_cluster import free_ports, tf_config_env

ROOT = Path(__file__).resolve().parent.parent


def start_workers(job_dir: Path, settings: dict, world: int, *, ports: list[int] | None = None,
                  env: dict | None = None) -> list[subprocess.Popen]:
    """Starts every rank; rank r's run directory is job_dir/rank<r>."""
    ports = ports or free_ports(world)
    job_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for rank in range(world):
        rank_dir = job_dir / f"rank{rank}"
        rank_dir.mkdir()
        # PYTHONFAULTHANDLER: a worker that dies in TensorFlow's C++ still tells where it was.
        child_env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
                     "PYTHONFAULTHANDLER": "1", **tf_config_env(world, rank, ports), **(env or {})}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "workloads.execute", str(rank_dir), json.dumps(settings)],
            cwd=ROOT, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return procs


def wait_workers(procs: list[subprocess.Popen], timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """Each rank's exit code and output, killing every rank still running after `timeout`."""
    deadline = time.monotonic() + timeout
    results = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in procs:
                if other.poll() is None:
                    other.kill()
            out, _ = proc.communicate()
            out += f"\n[killed after {timeout} s]"
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out))
    return results


def run_workers(job_dir: Path, settings: dict, world: int, timeout: float = 240,
                **start) -> list[subprocess.CompletedProcess]:
    """Runs every rank to its end (or kills them all after `timeout`)."""
    return _again_on_tf_profiler_crash(
        job_dir, lambda: wait_workers(start_workers(job_dir, settings, world, **start), timeout))


def _again_on_tf_profiler_crash(folder: Path, run, retries: int = 2) -> list[subprocess.CompletedProcess]:
    """`run()`, and again (at most `retries` times) in an emptied `folder` where TensorFlow
    crashed a worker inside its profiler's stop (TF 2.21 under MWMS, about 1 run in 9:
    TF_PROFILER_ABORT; SIGABRT or SIGSEGV). That fault is TensorFlow's; gapscope's part, telling
    it apart in one line, is tested in test_distributed_launch. Any other failure is returned
    as it is."""
    for attempt in range(retries + 1):
        results = run()
        crashed = any(r.returncode < 0 for r in results)
        if attempt == retries or not (crashed and any(folder.rglob(TF_PROFILER_STOPPING))):
            return results
        print("TensorFlow crashed a worker stopping its profiler; running again", file=sys.stderr)
        shutil.rmtree(folder)
        folder.mkdir(parents=True)


def run_script_workers(argv: list[str], world: int, out_dir: Path,
                       timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """Runs a user's script once per worker (`python argv...`), each with its TF_CONFIG; the
    script writes into `out_dir`."""
    def run():
        ports = free_ports(world)
        procs = [subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
                                       "PYTHONFAULTHANDLER": "1", **tf_config_env(world, rank, ports)})
                 for rank in range(world)]
        return wait_workers(procs, timeout)
    return _again_on_tf_profiler_crash(Path(out_dir), run)
