"""Measures what the per-layer ranges cost a torch training step: outside the traced window (the
hooks attached once and removed, as the runner does; target <= 1 %) and inside it (hooks on,
under torch.profiler, against the profiler alone). `--own`: the layers a user's model gets from
`gapscope.capture(model=...)` (gapscope.model_layers), its per-step calls included."""
from __future__ import annotations

import argparse
import statistics
import sys
import time

from benchmarks.marks_overhead import build_loop, slowdown_pct
from gapscope.profilers.trace_window import TraceWindow
from gapscope.workloads.registry import get_workload
from gapscope.workloads.runners.layer_ranges import LayerRanges

MAX_SLOWDOWN_PCT = 1.0


def _ranges(loop) -> LayerRanges:
    spec = get_workload("mlp")
    modules = {layer.name: getattr(loop.model, layer.name)
               for layer in spec.layers() if layer.kind != "loss"}
    return LayerRanges({**modules, "loss": loop.loss_fn})


class _OwnLayers:
    """The capture API's layers of the loop's model, as `model=` sets them up: FLOPs counted on
    one step and the ranges attached for a window, both over before the timed rounds; each timed
    step then makes the two calls the capture makes outside its window."""

    def __init__(self, loop):
        from gapscope.model_layers import ModelLayers
        self.loop = loop
        self.layers = ModelLayers(loop.model, 1, TraceWindow(1, 1))
        inputs, targets = next(iter(loop.loader))
        self.layers.begin_step(0)          # the counted step ...
        self.layers.phase("forward")
        loss = loop.loss_fn(loop.model(inputs), targets)
        self.layers.phase("backward")
        loss.backward()
        loop.optimizer.zero_grad(set_to_none=True)
        self.layers.end_step(0)            # ... and the window, hooks on then off
        self.layers.begin_step(1)
        self.layers.end_step(1)
        self.step = 2

    def attach(self):
        self.layers._ranges.attach()

    def detach(self):
        self.layers._ranges.detach()

    def round(self) -> list[int]:
        loop, layers = self.loop, self.layers
        clock, times, batches = time.perf_counter_ns, [], iter(loop.loader)
        for _ in range(len(loop.loader)):
            start = clock()
            layers.begin_step(self.step)
            inputs, targets = next(batches)
            inputs = inputs.to(loop.device, non_blocking=True)
            targets = targets.to(loop.device, non_blocking=True)
            loop.optimizer.zero_grad(set_to_none=True)
            loss = loop.loss_fn(loop.model(inputs), targets)
            loss.backward()
            loop.optimizer.step()
            layers.end_step(self.step)
            self.step += 1
            times.append(clock() - start)
        return times


def _interleaved(first, second, rounds: int) -> list[tuple[list[int], list[int]]]:
    """(first, second) step times per pair of rounds, the order inside a pair alternating."""
    first(), second()  # warm-up
    pairs = []
    for i in range(rounds):
        if i % 2:
            b = second()
            a = first()
        else:
            a = first()
            b = second()
        pairs.append((a, b))
    return pairs


def _profiled(round_fn):
    def run():
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU], record_shapes=False, with_stack=False):
            return round_fn()
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=40, help="pairs of rounds (default %(default)s)")
    parser.add_argument("--steps", type=int, default=200, help="steps per round (default %(default)s)")
    parser.add_argument("--traced-rounds", type=int, default=6,
                        help="pairs of profiled rounds, hooks on against off (default %(default)s)")
    parser.add_argument("--own", action="store_true",
                        help="the capture API's layers of a user's model (model=), not the runner's")
    parser.add_argument("--no-check", action="store_true",
                        help=f"report only; do not fail above {MAX_SLOWDOWN_PCT} %% slowdown")
    args = parser.parse_args(argv)

    bare_loop, hooked_loop = build_loop(args.steps), build_loop(args.steps)
    if args.own:
        own = _OwnLayers(hooked_loop)
        ranges, hooked = own, own.round
    else:
        ranges, hooked = _ranges(hooked_loop), hooked_loop.bare_round
        ranges.attach()  # as the runner does at the window's first step ...
        ranges.detach()  # ... and after its last: what is left must cost nothing
    pairs = _interleaved(bare_loop.bare_round, hooked, args.rounds)
    untouched = slowdown_pct(pairs)
    bare_ms = statistics.median(t for bare, _ in pairs for t in bare) / 1e6
    print(f"mlp training step on the CPU{' (own-model layers, model=)' if args.own else ''}: "
          f"{args.rounds} interleaved pairs x {args.steps} steps")
    print(f"  bare step                               median {bare_ms:8.4f} ms")
    print(f"  after attach + detach (unprofiled)      {untouched:+8.2f} %   target <= {MAX_SLOWDOWN_PCT} %")

    def hooked_round():
        ranges.attach()
        try:
            return hooked_loop.bare_round()
        finally:
            ranges.detach()
    traced = _interleaved(_profiled(bare_loop.bare_round), _profiled(hooked_round),
                          args.traced_rounds)
    print(f"  inside the traced window (hooks on vs off, both profiled) "
          f"{slowdown_pct(traced):+8.2f} %   (stated, no target)")
    if args.no_check or untouched <= MAX_SLOWDOWN_PCT:
        return 0
    print(f"slowdown above {MAX_SLOWDOWN_PCT} %")
    return 1


if __name__ == "__main__":
    sys.exit(main())
