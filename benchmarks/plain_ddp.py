"""A plain DDP training loop under torchrun, written without gapscope: the truth for a job's step."""
from __future__ import annotations

# What `gapscope run W --framework torch --nproc N` measures, done by hand: each rank trains on
# its samples rank::N at the workload's batch (workloads.shards), DDP over gloo (nccl on GPUs),
# and the job's step is, step by step, the slowest rank's. Only plain_loops' data and models
# are shared, as gap_truth does; nothing of gapscope's runners, marks or profilers.
#
# Usage: python -m torch.distributed.run --nproc-per-node 2 -m benchmarks.plain_ddp cnn --steps 30
# Rank 0 prints one JSON object: each rank's step times (ms) and the job's steady step.

import argparse
import json
import os
import statistics
import sys
import time

from benchmarks.plain_loops import BATCH_SIZE, LEARNING_RATE, SEED, WORKLOADS, torch_model, training_data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args(argv)
    if args.steps <= args.warmup:
        parser.error(f"--steps must exceed --warmup ({args.warmup})")

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, TensorDataset

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    torch.manual_seed(SEED)
    x, y = training_data(args.workload, args.steps * world)
    x, y = x[rank::world], y[rank::world]
    if x.ndim == 4:
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=BATCH_SIZE,
                        shuffle=True, generator=torch.Generator().manual_seed(SEED))
    model = torch_model(args.workload).to(device)
    trained = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.RMSprop(model.parameters(), lr=LEARNING_RATE)

    times_ms, batches = [], iter(loader)
    for _ in range(args.steps):
        start = time.perf_counter_ns()
        inputs, targets = (t.to(device) for t in next(batches))
        optimizer.zero_grad(set_to_none=True)
        loss_fn(trained(inputs), targets).backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize()
        times_ms.append((time.perf_counter_ns() - start) / 1e6)

    per_rank = [None] * world
    dist.all_gather_object(per_rank, times_ms)
    dist.destroy_process_group()
    if rank == 0:
        job = [max(rank_times[step] for rank_times in per_rank)
               for step in range(args.warmup, args.steps)]
        print(json.dumps({"workload": args.workload, "world_size": world, "steps": args.steps,
                          "warmup_steps": args.warmup, "threads": torch.get_num_threads(),
                          "job_step_ms": statistics.fmean(job), "job_step_median_ms": statistics.median(job),
                          "per_rank_ms": per_rank}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
