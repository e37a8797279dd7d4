"""Test helper: a real 2-process gloo DDP loop, each rank captured with gapscope.capture, laid out
as a job directory of the distributed contract (job manifest + rank<r>/ run directories).
Run as a script: python tests/dist_job_loop.py OUT [--world 2] [--slow-rank R] [--fail-rank R]."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import time
from pathlib import Path

BATCHES, BATCH = 20, 32
TRACE = (6, 10)
WARMUP = 3
SLOW_MS = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, staging: str, slow_rank, fail_rank):
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import gapscope

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    rng = np.random.default_rng(rank)
    xs = torch.from_numpy(rng.standard_normal((BATCHES * BATCH, 100), dtype=np.float32))
    ys = torch.from_numpy(rng.integers(0, 10, BATCHES * BATCH))
    model = DDP(torch.nn.Sequential(torch.nn.Linear(100, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()

    def batches():
        for i in range(BATCHES):
            if rank == slow_rank:
                time.sleep(SLOW_MS / 1000.0)  # the straggler: a slow data pipeline on one rank
            yield xs[i * BATCH:(i + 1) * BATCH], ys[i * BATCH:(i + 1) * BATCH]

    out = Path(staging) / f"rank{rank}"
    try:
        with gapscope.capture("ddp-mlp", trace_steps=TRACE, out=out, device="cpu",
                              warmup_steps=WARMUP) as cap:
            for step, (inputs, targets) in enumerate(cap.data(batches())):
                if rank == fail_rank and step == 8:
                    raise RuntimeError("rank broke on purpose")
                with cap.phase("forward"):
                    loss = loss_fn(model(inputs), targets)
                with cap.phase("backward"):
                    loss.backward()
                with cap.phase("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad()
                cap.step(loss)
    except RuntimeError:
        if rank != fail_rank:
            raise
    finally:
        if rank != fail_rank:
            dist.destroy_process_group()


def make_job(out: Path, world: int = 2, slow_rank: int | None = None,
             fail_rank: int | None = None) -> Path:
    """Runs the loop on `world` processes and returns the job directory it wrote."""
    import torch.multiprocessing as mp

    out = Path(out)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    job = out / f"ddp-mlp-torch-user-x{world}-{stamp}-{os.urandom(3).hex()}"
    staging = out / f".staging-{job.name}"
    staging.mkdir(parents=True)
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    port = _free_port()
    try:
        mp.start_processes(_rank_main, args=(world, port, str(staging), slow_rank, fail_rank),
                           nprocs=world, join=True, start_method="spawn")
    except Exception:  # noqa: BLE001 - a failing rank is what some tests want
        if fail_rank is None:
            raise
    job.mkdir()
    ranks = []
    for r in range(world):
        runs = list((staging / f"rank{r}").iterdir())
        shutil.move(str(runs[0]), job / f"rank{r}")
        manifest_path = job / f"rank{r}" / "manifest.json"
        manifest = json.loads(manifest_path.read_text())
        manifest.update(rank=r, world_size=world, job_id=job.name, backend="gloo")
        manifest_path.write_text(json.dumps(manifest, indent=2))
        ranks.append({"rank": r, "dir": f"rank{r}", "host": socket.gethostname(), "node_rank": 0,
                      "status": manifest["status"], "error": manifest.get("error"),
                      "ended_at": manifest.get("ended_at")})
    shutil.rmtree(staging)
    # The root cause: the rank that failed first (the others died on the broken collective).
    failed = sorted((x for x in ranks if x["status"] != "complete"), key=lambda x: x["ended_at"] or "")
    for x in ranks:
        del x["ended_at"]
    first = json.loads((job / "rank0" / "manifest.json").read_text())
    job_manifest = {k: first.get(k) for k in ("workload", "framework", "variant", "settings",
                                             "warmup_steps", "device")}
    job_manifest.update(
        run_id=job.name, status="failed" if failed else "complete",
        error=f"rank {failed[0]['rank']}: {failed[0]['error']}" if failed else None,
        started_at=started, ended_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
        host=socket.gethostname(), pid=os.getpid(),
        distributed={"world_size": world, "nnodes": 1, "backend": "gloo", "launcher": "user",
                     "ranks": ranks})
    (job / "manifest.json").write_text(json.dumps(job_manifest, indent=2))
    return job


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--slow-rank", type=int, default=None)
    parser.add_argument("--fail-rank", type=int, default=None)
    args = parser.parse_args()
    print(make_job(Path(args.out), args.world, args.slow_rank, args.fail_rank))
