"""Measures what the per-layer ranges cost a torch training step: outside the traced window (the
hooks attached once and removed, as the runner does; target <= 1 %) and inside it (hooks on,
under torch.profiler, against the profiler alone)."""
from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks.marks_overhead import build_loop, slowdown_pct
from gapscope.workloads.registry import get_workload
from gapscope.workloads.runners.layer_ranges import LayerRanges

MAX_SLOWDOWN_PCT = 1.0


def _ranges(loop) -> LayerRanges:
    spec = get_workload("mlp")
    modules = {layer.name: getattr(loop.model, layer.name)
               for layer in spec.layers() if layer.kind != "loss"}
    return LayerRanges({**modules, "loss": loop.loss_fn})


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
    parser.add_argument("--no-check", action="store_true",
                        help=f"report only; do not fail above {MAX_SLOWDOWN_PCT} %% slowdown")
    args = parser.parse_args(argv)

    bare_loop, hooked_loop = build_loop(args.steps), build_loop(args.steps)
    ranges = _ranges(hooked_loop)
    ranges.attach()  # as the runner does at the window's first step ...
    ranges.detach()  # ... and after its last: what is left must cost nothing
    pairs = _interleaved(bare_loop.bare_round, hooked_loop.bare_round, args.rounds)
    untouched = slowdown_pct(pairs)
    bare_ms = statistics.median(t for bare, _ in pairs for t in bare) / 1e6
    print(f"mlp training step on the CPU: {args.rounds} interleaved pairs x {args.steps} steps")
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
