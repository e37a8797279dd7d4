"""Test helper: a real 2-process gloo DDP loop (torch.multiprocessing, no torchrun), each rank
captured with gapscope.capture into one job directory (job manifest + rank<r>/ run directories).
Run as a script: python tests/dist_job_loop.py OUT [--world 2] [--slow-rank R] [--fail-rank R]."""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # gapscope from this checkout

BATCHES, BATCH = 20, 32
TRACE = (6, 10)
WARMUP = 3
SLOW_MS = 20.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, out: str, slow_rank, fail_rank):
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
    """Runs the loop on `world` processes and returns the job directory gapscope.capture wrote
    (under torch.distributed every rank writes rank<r>/ of one job directory; rank 0 ends the
    job manifest)."""
    import torch.multiprocessing as mp

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.iterdir())
    try:
        mp.start_processes(_rank_main, args=(world, _free_port(), str(out), slow_rank, fail_rank),
                           nprocs=world, join=True, start_method="spawn")
    except Exception:  # noqa: BLE001 - a failing rank is what some tests want
        if fail_rank is None:
            raise
    (job,) = [p for p in out.iterdir() if p not in before and p.is_dir()]
    return job


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--slow-rank", type=int, default=None)
    parser.add_argument("--fail-rank", type=int, default=None)
    args = parser.parse_args()
    print(make_job(Path(args.out), args.world, args.slow_rank, args.fail_rank))
