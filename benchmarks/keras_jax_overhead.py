"""Holds gapscope's unprofiled keras-jax step against a plain model.fit loop on JAX, fresh processes interleaved."""
from __future__ import annotations

# Usage: python -m benchmarks.keras_jax_overhead [--workload cnn] [--rounds 8] [--steps 60] [--no-check]
#
# Issue 48's "done when": the unprofiled step time under gapscope within 5 % of a plain
# `model.fit` loop on the same backend. Every round starts one plain loop (benchmarks/plain_loops.py
# keras-jax: Keras' own jitted step, a timing callback, nothing of gapscope) and one `gapscope run
# WORKLOAD --framework keras-jax` as a user types it (its trace window included: its unprofiled
# steady steps are the figure), in an order rotated every round, through process_spread's arms.
# The overhead is the median over rounds of the paired ratio of the two processes' steady means:
# pairing cancels what the machine does slowly in a round. Fresh processes spread by several %
# here (process_spread), so take it on a quiet machine, with enough rounds.

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.gap_truth import log
from benchmarks.process_spread import Arm, steady_times
from gapscope.profilers.machine_load import load_snapshot

MAX_OVERHEAD_PCT = 5.0


def paired_rounds(workload: str, rounds: int, steps: int, scratch: Path) -> list[dict]:
    """Per round, each arm's steady mean (ms) and the load before the round."""
    arms = [Arm.parse("plain"), Arm.parse("run")]
    found = []
    for i in range(rounds):
        order = arms[i % 2:] + arms[:i % 2]
        load = load_snapshot()["loadavg_1m"]
        means = {}
        for arm in order:
            times, _ = steady_times(arm, workload, "keras-jax", "default", steps, scratch)
            means[arm.name] = statistics.fmean(times)
        log(f"round {i + 1}/{rounds}: plain {means['plain']:.3f} ms, gapscope {means['run']:.3f} ms "
            f"(load {load:.2f})")
        found.append({**means, "load": load})
    return found


def overhead_pct(rounds: list[dict]) -> float:
    return 100.0 * (statistics.median(r["run"] / r["plain"] for r in rounds) - 1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", choices=("cnn", "mlp"), default="cnn")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60,
                        help="steps per process (gapscope's warm-up and trace window included)")
    parser.add_argument("--no-check", action="store_true",
                        help=f"report only; do not fail above {MAX_OVERHEAD_PCT} %%")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="keras-jax-overhead-") as scratch:
        rounds = paired_rounds(args.workload, args.rounds, args.steps, Path(scratch))
    overhead = overhead_pct(rounds)
    loads = [r["load"] for r in rounds]
    print(f"keras-jax {args.workload} on the CPU, {args.rounds} rounds x {args.steps} steps, fresh "
          f"processes interleaved: plain median {statistics.median(r['plain'] for r in rounds):.3f} ms, "
          f"gapscope median {statistics.median(r['run'] for r in rounds):.3f} ms, "
          f"gapscope {overhead:+.2f} % (median paired ratio); load {min(loads):.2f} to {max(loads):.2f}")
    if args.no_check or overhead <= MAX_OVERHEAD_PCT:
        return 0
    print(f"overhead above {MAX_OVERHEAD_PCT} %")
    return 1


if __name__ == "__main__":
    sys.exit(main())
