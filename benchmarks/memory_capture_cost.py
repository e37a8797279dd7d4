"""Measures what memory capture costs the mlp training step: the RSS read in every step's timer, and the profiler's memory events in the traced window."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import contextmanager

from benchmarks.marks_overhead import TrainingLoop, build_loop, per_call_us, slowdown_pct
from gapscope.profilers import timers
from gapscope.profilers.marks import PhaseMarks
from gapscope.profilers.timers import HostClock, StepTimer

MAX_UNPROFILED_PCT = 1.0  # the bound on the unprofiled step


@contextmanager
def without_rss():
    """The step timer as it was before memory capture: the RSS read replaced by a constant."""
    kept = timers._RESIDENT
    timers._RESIDENT = lambda: None
    try:
        yield
    finally:
        timers._RESIDENT = kept


def timed_round(loop: TrainingLoop, rss: bool) -> list[int]:
    """One round of the runner's marked loop, with or without the RSS read at each step's end."""
    if rss:
        return loop.marked_round(PhaseMarks(StepTimer(HostClock())))
    with without_rss():
        return loop.marked_round(PhaseMarks(StepTimer(HostClock())))


def traced_round(loop: TrainingLoop, profile_memory: bool) -> list[int]:
    """One round under torch.profiler, as gapscope's window records (no shapes, no stacks),
    with or without the allocator's events."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], record_shapes=False, with_stack=False,
                 profile_memory=profile_memory, acc_events=False):
        return loop.marked_round(PhaseMarks(StepTimer(HostClock())))


def interleaved(loop: TrainingLoop, rounds: int, arm) -> list[tuple[list[int], list[int]]]:
    """(without, with) step times of each pair of rounds, the order alternating within pairs."""
    arm(loop, False), arm(loop, True)  # warm-up
    pairs = []
    for i in range(rounds):
        if i % 2:
            with_ = arm(loop, True)
            without = arm(loop, False)
        else:
            without = arm(loop, False)
            with_ = arm(loop, True)
        pairs.append((without, with_))
    return pairs


def _median_ms(times) -> float:
    return statistics.median(times) / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30, help="pairs of unprofiled rounds (default %(default)s)")
    parser.add_argument("--steps", type=int, default=200, help="steps per round (default %(default)s)")
    parser.add_argument("--traced-rounds", type=int, default=8,
                        help="pairs of profiled rounds (default %(default)s)")
    parser.add_argument("--traced-steps", type=int, default=20,
                        help="steps per profiled round (default %(default)s)")
    parser.add_argument("--no-check", action="store_true",
                        help=f"report only; do not fail above {MAX_UNPROFILED_PCT} %% on the unprofiled step")
    args = parser.parse_args(argv)

    import os

    import torch
    loop = build_loop(args.steps)
    started = time.monotonic()
    plain = interleaved(loop, args.rounds, timed_round)
    unprofiled = slowdown_pct(plain)
    short = build_loop(args.traced_steps)
    traced = interleaved(short, args.traced_rounds, traced_round)
    window = slowdown_pct(traced)
    load = os.getloadavg()[0]
    print(f"mlp training step on the CPU, {torch.get_num_threads()} torch threads, load "
          f"{load:.1f} on {os.cpu_count()} cores ({time.monotonic() - started:.0f} s)")
    print(f"unprofiled steps: {args.rounds} interleaved pairs of rounds x {args.steps} steps")
    print(f"  timer without the RSS read        median {_median_ms(t for a, _ in plain for t in a):8.4f} ms")
    print(f"  timer with the RSS read           median {_median_ms(t for _, b in plain for t in b):8.4f} ms")
    print(f"  slowdown, median over pairs       {unprofiled:+8.2f} %   target <= {MAX_UNPROFILED_PCT} %")
    print(f"  one RSS read (tight loop)         {per_call_us(timers._RESIDENT):8.2f} us")
    print(f"traced window: {args.traced_rounds} interleaved pairs of rounds x {args.traced_steps} "
          "steps under torch.profiler")
    print(f"  profile_memory=False              median {_median_ms(t for a, _ in traced for t in a):8.4f} ms")
    print(f"  profile_memory=True               median {_median_ms(t for _, b in traced for t in b):8.4f} ms")
    print(f"  slowdown, median over pairs       {window:+8.2f} %   (inside the traced steps only)")
    if load > (os.cpu_count() or 1):
        print(f"the machine was busy (load {load:.1f}): these figures are no fact about the cost")
    if args.no_check or unprofiled <= MAX_UNPROFILED_PCT:
        return 0
    print(f"unprofiled slowdown above {MAX_UNPROFILED_PCT} %")
    return 1


if __name__ == "__main__":
    sys.exit(main())
