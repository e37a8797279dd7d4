"""Measures what `gapscope.capture` costs the mlp training step in timer mode (trace_steps=None),
by the method of benchmarks/marks_overhead.py: interleaved bare and captured rounds."""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from benchmarks.marks_overhead import MAX_SLOWDOWN_PCT, TrainingLoop, build_loop, slowdown_pct


def captured_round(loop: TrainingLoop, out: str) -> list[int]:
    """The loop of marks_overhead's marked round, written against the public API; the time of
    a step is taken the same way as in the bare round, the batch fetch included."""
    import gapscope

    clock, times = time.perf_counter_ns, []
    with gapscope.capture("overhead", trace_steps=None, out=out, device=loop.device) as cap:
        batches = cap.data(loop.loader)
        for _ in range(len(loop.loader)):
            start = clock()
            inputs, targets = next(batches)
            with cap.phase("optimizer"):
                loop.optimizer.zero_grad(set_to_none=True)
            with cap.phase("forward"):
                loss = loop.loss_fn(loop.model(inputs), targets)
            with cap.phase("backward"):
                loss.backward()
            with cap.phase("optimizer"):
                loop.optimizer.step()
            cap.step(loss)
            times.append(clock() - start)
    return times


def step_calls_cost_us(calls: int = 40_000) -> float:
    """All of the API's calls of one step in a tight loop, no training work: the batch fetch
    through `cap.data`, five phase ranges and `cap.step(loss)`."""
    import itertools

    import torch

    import gapscope
    from benchmarks.marks_overhead import per_call_us
    from benchmarks.marks_overhead import STEP_PHASES

    loss = torch.ones(())
    with tempfile.TemporaryDirectory(prefix="gapscope-capture-overhead-") as out:
        with gapscope.capture("tight", trace_steps=None, out=out) as cap:
            batches = cap.data(itertools.repeat((loss, loss)))
            phase = cap.phase

            def body():
                next(batches)
                for name in STEP_PHASES:
                    with phase(name):
                        pass
                cap.step(loss)
            cost = per_call_us(body, calls)
    return cost


def interleaved_rounds(loop: TrainingLoop, rounds: int, out: str) -> list[tuple[list[int], list[int]]]:
    """(bare, captured) step times per pair of rounds, the order alternating within pairs."""
    loop.bare_round(), captured_round(loop, out)  # warm-up: allocator, caches, lazy imports
    pairs = []
    for i in range(rounds):
        if i % 2:
            captured = captured_round(loop, out)
            bare = loop.bare_round()
        else:
            bare = loop.bare_round()
            captured = captured_round(loop, out)
        pairs.append((bare, captured))
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=40, help="bare/captured pairs (default %(default)s)")
    parser.add_argument("--steps", type=int, default=200, help="steps per round (default %(default)s)")
    parser.add_argument("--no-check", action="store_true",
                        help=f"report only; do not fail above {MAX_SLOWDOWN_PCT} %% slowdown")
    args = parser.parse_args(argv)

    import torch
    loop = build_loop(args.steps)
    with tempfile.TemporaryDirectory(prefix="gapscope-capture-overhead-") as out:
        started = time.perf_counter()
        pairs = interleaved_rounds(loop, args.rounds, out)
        elapsed = time.perf_counter() - started
    bare_ms = statistics.median(t for bare, _ in pairs for t in bare) / 1e6
    captured_ms = statistics.median(t for _, captured in pairs for t in captured) / 1e6
    slowdown = slowdown_pct(pairs)
    step_us = step_calls_cost_us()
    print(f"mlp training step on the CPU, {torch.get_num_threads()} torch threads: "
          f"{args.rounds} interleaved pairs of rounds x {args.steps} steps ({elapsed:.0f} s)")
    print(f"  bare step (no marks)                 median {bare_ms:8.4f} ms")
    print(f"  captured step (gapscope.capture)     median {captured_ms:8.4f} ms")
    print(f"  slowdown, median over pairs          {slowdown:+8.2f} %   target <= {MAX_SLOWDOWN_PCT} %")
    print(f"tight loop: the API's calls of one step   {step_us:8.2f} us   "
          f"= {100 * step_us / 1e3 / bare_ms:.2f} % of the bare step")
    if args.no_check or slowdown <= MAX_SLOWDOWN_PCT:
        return 0
    print(f"slowdown above {MAX_SLOWDOWN_PCT} %")
    return 1


if __name__ == "__main__":
    sys.exit(main())
