"""Measures what recording Inductor's CPU kernels one by one (cpp.enable_kernel_profile, which the
compile variants turn on so that a compiled graph's kernels can be placed in layers) costs a
compiled mlp training step: unprofiled (target <= 1 %) and inside a traced window (stated)."""
from __future__ import annotations

import argparse
import statistics
import sys

from benchmarks.layer_ranges_overhead import _interleaved, _profiled
from benchmarks.marks_overhead import build_loop, slowdown_pct

MAX_SLOWDOWN_PCT = 1.0


def _compiled_loop(steps: int, itemised: bool):
    """The mlp loop with its model compiled (Inductor, default mode) with the setting as the
    compile's own option: Dynamo guards on the backend, so the two loops' graphs are compiled
    apart, and with caches off neither reuses a kernel compiled under the other setting."""
    import torch
    loop = build_loop(steps)
    loop.model = torch.compile(loop.model, options={"cpp.enable_kernel_profile": itemised,
                                                    "fx_graph_cache": False})
    loop.bare_round()  # compiles
    return loop


def _itemised_kernels(loop) -> int:
    """Inductor kernel ops one profiled round records: 0 where they were not itemised."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loop.bare_round()
    return sum(1 for e in prof.events() if "cpp_fused" in e.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30, help="pairs of rounds (default %(default)s)")
    parser.add_argument("--steps", type=int, default=100, help="steps per round (default %(default)s)")
    parser.add_argument("--traced-rounds", type=int, default=6,
                        help="pairs of profiled rounds, itemised against not (default %(default)s)")
    parser.add_argument("--no-check", action="store_true",
                        help=f"report only; do not fail above {MAX_SLOWDOWN_PCT} %% slowdown")
    args = parser.parse_args(argv)

    plain = _compiled_loop(args.steps, itemised=False)
    itemised = _compiled_loop(args.steps, itemised=True)
    seen = _itemised_kernels(plain), _itemised_kernels(itemised)
    pairs = _interleaved(plain.bare_round, itemised.bare_round, args.rounds)
    unprofiled = slowdown_pct(pairs)
    plain_ms = statistics.median(t for p, _ in pairs for t in p) / 1e6
    print(f"compiled mlp training step on the CPU: {args.rounds} interleaved pairs x {args.steps} steps")
    print(f"  Inductor kernel ops in one profiled round: {seen[0]} plain, {seen[1]} itemised")
    print(f"  plain compiled step                     median {plain_ms:8.4f} ms")
    print(f"  itemised kernels (unprofiled)           {unprofiled:+8.2f} %   target <= {MAX_SLOWDOWN_PCT} %")
    traced = _interleaved(_profiled(plain.bare_round), _profiled(itemised.bare_round), args.traced_rounds)
    print(f"  inside the traced window (itemised vs not, both profiled) "
          f"{slowdown_pct(traced):+8.2f} %   (stated, no target)")
    if seen[0] or not seen[1]:
        print("the two loops did not differ in what they record: no comparison")
        return 1
    if args.no_check or unprofiled <= MAX_SLOWDOWN_PCT:
        return 0
    print(f"slowdown above {MAX_SLOWDOWN_PCT} %")
    return 1


if __name__ == "__main__":
    sys.exit(main())
