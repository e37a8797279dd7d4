"""Checks the profiler-cost compensation against the truth: on eager loops the step timers see
every phase without a profiler, so the compensated trace phases must agree with them.

    .venv/bin/python -m benchmarks.compensation_check [--repeats 2] [--configs mlp:torch,...]

Per configuration and phase: timers (truth), trace as recorded, trace compensated, and the
difference, against the tolerance max(10 %, 0.1 ms)."""
from __future__ import annotations

import argparse
import sys
import tempfile

from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.model.run import load_run
from gapscope.profilers.phases import PHASES
from gapscope.workloads.launch import launch
from gapscope.workloads.settings import RunSettings

# Eager loops whose host timers see all four phases: torch eager and the raw TF eager loop.
CONFIGS = {"mlp:torch": ("mlp", "torch", "default", 120), "cnn:torch": ("cnn", "torch", "default", 60),
           "mlp:tf-eager": ("mlp", "tf", "tf-eager", 120), "cnn:tf-eager": ("cnn", "tf", "tf-eager", 60)}
TOLERANCE_PCT, TOLERANCE_MS = 10.0, 0.1


def within(diff_ms: float, truth_ms: float) -> bool:
    return abs(diff_ms) <= max(TOLERANCE_PCT / 100 * abs(truth_ms), TOLERANCE_MS)


def check(name: str, out_dir: str) -> list[tuple]:
    workload, framework, variant, steps = CONFIGS[name]
    outcome = launch(RunSettings(workload, framework, variant=variant, steps=steps,
                                 warmup_steps=5, trace_steps=20), out_dir)
    if outcome.status != "complete":
        raise SystemExit(f"{name}: run failed: {outcome.error}")
    run = load_run(outcome.run_dir)
    truth, compensated = breakdown(run, "timers"), breakdown(run, "compensated")
    rows = []
    for phase in PHASES:
        t, c = truth.phases[phase].ms, compensated.phases[phase].ms
        rows.append((name, phase, t, compensated.phases[phase].trace_ms, c, c - t, within(c - t, t)))
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    print("| config | phase | timers ms (truth) | trace ms (recorded) | compensated ms | Δ ms | Δ % | within |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    failures = 0
    with tempfile.TemporaryDirectory() as out_dir:
        for _ in range(args.repeats):
            for name in args.configs.split(","):
                print(f"running {name} ...", file=sys.stderr)
                for config, phase, t, raw, c, diff, ok in check(name, out_dir):
                    failures += not ok
                    pct = 100 * diff / t if t else float("nan")
                    print(f"| {config} | {phase} | {t:.3f} | {raw:.3f} | {c:.3f} | {diff:+.3f} | "
                          f"{pct:+.0f} | {'yes' if ok else 'NO'} |", flush=True)
    print(f"\ntolerance per phase: max({TOLERANCE_PCT:.0f} %, {TOLERANCE_MS} ms); "
          f"phases outside it: {failures}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
