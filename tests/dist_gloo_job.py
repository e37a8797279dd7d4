"""A tiny DDP job on gloo, run under torchrun by the collectives tests: each rank traces a few steps with gapscope's phase ranges."""
from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from gapscope.profilers.phases import torch_range_name

WIDTHS = (256, 512, 512, 10)  # Linear(256, 512), ReLU, Linear(512, 512), ReLU, Linear(512, 10)


def model() -> nn.Module:
    layers = []
    for i, (fan_in, fan_out) in enumerate(zip(WIDTHS, WIDTHS[1:])):
        layers += [nn.ReLU()] if i else []
        layers.append(nn.Linear(fan_in, fan_out))
    return nn.Sequential(*layers)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--bucket-cap-mb", type=float, default=25.0)
    parser.add_argument("--steps", type=int, default=3, help="traced steps (after 2 untraced)")
    parser.add_argument("--record-shapes", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # the machine may have 2 cores for both ranks
    ddp = nn.parallel.DistributedDataParallel(model(), bucket_cap_mb=args.bucket_cap_mb)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
    profiler = profile(activities=[ProfilerActivity.CPU], record_shapes=args.record_shapes,
                       schedule=schedule(wait=1, warmup=1, active=args.steps, repeat=1),
                       on_trace_ready=lambda p: p.export_chrome_trace(
                           f"{args.out}/rank{rank}.pt.trace.json"))
    with profiler:
        for _ in range(2 + args.steps):
            with record_function(torch_range_name("data_load")):
                xb, yb = x[rank::2].clone(), y[rank::2].clone()
            with record_function(torch_range_name("forward")):
                loss = nn.functional.cross_entropy(ddp(xb), yb)
            with record_function(torch_range_name("backward")):
                loss.backward()
            with record_function(torch_range_name("optimizer")):
                optimizer.step()
                optimizer.zero_grad()
            profiler.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
