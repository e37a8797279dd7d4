"""Test helper: a user's DDP training script, profiled with gapscope.capture, to start under
torchrun (one process per rank); every rank writes `rank<r>/` of one job directory in --out.

    python -m torch.distributed.run --nproc-per-node 2 tests/ddp_user_loop.py --out OUT \\
        [--steps 16] [--slow-rank 1] [--fail-rank 1 --fail-at 8] [--capture-before-init]

--slow-rank R: rank R's data loading sleeps 20 ms per batch (a straggler, as a slow disk or
a busy host makes one); --fail-rank R: rank R's loop raises at step --fail-at;
--capture-before-init: the capture starts before init_process_group (the job directory's name
then comes from torchrun's environment instead of a broadcast)."""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # gapscope from this checkout

SLOW_S = 0.020
BATCH = 16


def run_under_torchrun(out: Path, *args: str, nproc: int = 2,
                       timeout: float = 240) -> subprocess.CompletedProcess:
    """This script under a real torchrun, `nproc` ranks on this host, writing into `out`
    (for other tests: `run_under_torchrun(tmp_path, "--slow-rank", "1")`)."""
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                           str(nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
                           __file__, "--out", str(out), *args],
                          cwd=Path(__file__).resolve().parent.parent, capture_output=True,
                          text=True, timeout=timeout)


def slowed(loader, seconds: float):
    """The loader, each batch fetched `seconds` later."""
    for batch in loader:
        time.sleep(seconds)
        yield batch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--trace", type=int, nargs=2, default=(6, 10))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--slow-rank", type=int, default=None)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-at", type=int, default=8)
    parser.add_argument("--capture-before-init", action="store_true")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    import gapscope

    def train(cap) -> None:
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(0)
        x = torch.randn(args.steps * BATCH * world, 100)
        y = (x @ torch.randn(100, 10)).argmax(dim=1)
        dataset = TensorDataset(x, y)
        loader = DataLoader(dataset, batch_size=BATCH,
                            sampler=DistributedSampler(dataset, world, rank, shuffle=True, seed=0))
        if rank == args.slow_rank:
            loader = slowed(loader, SLOW_S)
        model = DistributedDataParallel(torch.nn.Sequential(
            torch.nn.Linear(100, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loss_fn = torch.nn.CrossEntropyLoss()
        for step, (inputs, targets) in enumerate(cap.data(loader)):
            if rank == args.fail_rank and step == args.fail_at:
                raise ValueError(f"rank {rank}'s loop broke at step {step}")
            with cap.phase("forward"):
                loss = loss_fn(model(inputs), targets)
            with cap.phase("backward"):
                loss.backward()
            with cap.phase("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            cap.step(loss)

    capture = gapscope.capture("ddp-mlp", trace_steps=tuple(args.trace), out=args.out,
                               warmup_steps=args.warmup)
    if args.capture_before_init:
        try:
            with capture as cap:
                dist.init_process_group("gloo")
                train(cap)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
    else:
        dist.init_process_group("gloo")
        try:
            with capture as cap:
                train(cap)
        finally:
            dist.destroy_process_group()
    print(f"wrote {cap.run_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
