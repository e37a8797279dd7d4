"""Starts N local MultiWorkerMirroredStrategy workers as the launcher does: one
`python -m workloads.runners.execute <job>/rank<r> SETTINGS` each, with its TF_CONFIG on free ports."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from gapscope.workloads.runners.tf_cluster import free_ports, tf_config_env

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
            [sys.executable, "-m", "gapscope.workloads.runners.execute", str(rank_dir), json.dumps(settings)],
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
    return wait_workers(start_workers(job_dir, settings, world, **start), timeout)


def run_script_workers(argv: list[str], world: int, out_dir: Path,
                       timeout: float = 240) -> list[subprocess.CompletedProcess]:
    """Runs a user's script once per worker (`python argv...`), each with its TF_CONFIG; the
    script writes into `out_dir`."""
    ports = free_ports(world)
    procs = [subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
                                   "PYTHONFAULTHANDLER": "1", **tf_config_env(world, rank, ports)})
             for rank in range(world)]
    return wait_workers(procs, timeout)
