"""Entry point of one rank of a distributed run, started by torchrun (or workloads.runners.local_agent for
TF): runs the workload as an ordinary run in `<job>/rank<r>/`, inside the job's torch process
group; a Keras/TF rank's runner builds its strategy from TF_CONFIG.

Usage (by workloads.distributed_launch, not by hand):
    torchrun ... -m workloads.runners.execute_rank JOB_DIR SETTINGS_JSON BACKEND"""
from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from gapscope.profilers.job_dir import rank_dir
from gapscope.profilers.run_lifecycle import LAUNCHER_PID_ENV
from gapscope.workloads.runners.execute import execute
from gapscope.workloads.settings import RunSettings

# A collective waiting longer than this on a peer fails the rank instead of hanging the job
# (torch's default is 30 minutes); torchrun stops the other ranks when one fails anyway.
COLLECTIVE_TIMEOUT_S = 300


def rank_env() -> dict:
    """The rank's place in the job, as torchrun tells each worker."""
    return {"rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"]),
            "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
            "node_rank": int(os.environ.get("GROUP_RANK", 0))}


@contextmanager
def torch_process_group(backend: str, local_rank: int):
    """init_process_group for the run, destroy_process_group after it (also when it fails)."""
    import torch
    import torch.distributed as dist
    if backend == "nccl":
        torch.cuda.set_device(local_rank)  # "cuda" then means this rank's own GPU
    dist.init_process_group(backend, timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        yield
    finally:
        dist.destroy_process_group()


def main(argv: list[str]) -> int:
    job_dir, settings_json, backend = Path(argv[0]), argv[1], argv[2]
    place = rank_env()
    # The worker's parent is torchrun's agent: stop_with_parent watches it, not the launcher.
    os.environ[LAUNCHER_PID_ENV] = str(os.getppid())
    run_dir = rank_dir(job_dir, place["rank"])
    run_dir.mkdir(parents=True, exist_ok=False)
    settings = RunSettings.from_dict(json.loads(settings_json))
    fields = {**place, "job_id": job_dir.name, "backend": backend}
    if settings.framework != "torch":  # TF: the runner's MultiWorkerMirroredStrategy reads TF_CONFIG
        return execute(run_dir, settings, fields)
    return execute(run_dir, settings, fields,
                   lambda: torch_process_group(backend, place["local_rank"]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
