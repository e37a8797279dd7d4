"""Per-process spread of the steady step: gapscope's run process against a plain loop, one knob at a time."""
from __future__ import annotations

# Usage: python -m benchmarks.process_spread [--workload cnn] [--framework torch|keras|keras-jax]
#            [--variant default] [--rounds 8] [--steps 60]
#            [--arms plain,run,run:no-trace,child,child:no-trace:no-sampler,plain:omp1,run:omp1]
#
# Every round starts one fresh process per arm, in a rotated order (so that no arm always runs
# first after a quiet pause), and takes the mean of its steady steps (after the warm-up, and
# for gapscope runs only the unprofiled ones). An arm's spread is the coefficient of variation
# of those per-process means: how much "which process you got" moves the figure. The plain
# loop (benchmarks/plain_loops.py, no gapscope code) is the control every other arm is held to.
#
# Arms: a kind, then knobs, separated by ':'.
#   plain            the plain loop
#   run              `gapscope run` as a user types it (launcher process + run process)
#   child            the run process alone (workloads.runners.execute), no launcher reading its pipe
#   knobs: no-trace (no profiler window), no-sampler (no resource sampler thread),
#          omp1 (OMP_NUM_THREADS=1), omp2 (OMP_NUM_THREADS=2),
#          mmap-fixed (glibc's mmap threshold fixed at 32 MiB: no adjusting to what was freed),
#          arena1 (one malloc arena for every thread),
#          malloc-kept (glibc keeps what it freed: fixed mmap threshold, no trim, a 256 MiB top
#          pad; the steps then take no fresh pages from the kernel),
#          full-epoch (plain only: hold the whole generated epoch, 60,000 CNN samples, as
#          gapscope's runs do, not only the 15,360 that 60 steps use),
#          bookkeeping (plain only: keep a (phase, start, end) tuple a phase in one list that
#          grows all run, as gapscope's step timer does: its storage outgrows Python's small-
#          object allocator after 64 marks and moves through glibc's heap between steps),
#          cached (plain only: the data comes through gapscope's data path, its .npz cache, so
#          the allocations before the loop, which set glibc's dynamic thresholds, are gapscope's),
#          faults (plain only: count each step's page faults, one getrusage a step, as gapscope's
#          step timer does; gapscope's runs always count them),
#          no-cache (gapscope's data cache unusable, so the run process generates its data as
#          the plain loop does),
#          gapscope-step (plain Keras only: gapscope's marked train_step and step callback in
#          the plain process, the rest of it plain),
#          gc-off (Python's cyclic garbage collector disabled from the interpreter's start, through
#          a sitecustomize module: when collections run, and what they free, then no longer
#          depends on which thread allocated what and when)

import argparse
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.gap_truth import OUT_DIR, ROOT, WARMUP_STEPS, child_env, last_json_object, log, tail
from gapscope.profilers.machine_load import load_snapshot
from gapscope.workloads.runners.malloc_keep import SETTINGS as MALLOC_KEEP

KINDS = ("plain", "run", "child")
KNOBS = ("no-trace", "no-sampler", "omp1", "omp2", "mmap-fixed", "arena1", "malloc-kept",
         "full-epoch", "bookkeeping", "cached", "faults", "no-cache", "gc-off", "gapscope-step")
# Knobs of the plain loop alone, passed on as its flags (gapscope's runs always hold the epoch,
# keep their marks and read the cache).
PLAIN_FLAGS = ("full-epoch", "bookkeeping", "cached", "faults", "gapscope-step")
# Environment each knob sets in the process it starts.
KNOB_ENV = {"omp1": {"OMP_NUM_THREADS": "1"}, "omp2": {"OMP_NUM_THREADS": "2"},
            "mmap-fixed": {"MALLOC_MMAP_THRESHOLD_": str(32 << 20)},
            "arena1": {"MALLOC_ARENA_MAX": "1"},
            # A cache folder under a file: it can be neither read nor made.
            "no-cache": {"GAPSCOPE_CACHE": "/dev/null/gapscope-cache"},
            # The malloc-keep variant's values, set from the environment at the process's start.
            "malloc-kept": {f"MALLOC_{name[2:]}_": str(value)
                            for name, (_, value) in MALLOC_KEEP.items()}}
DEFAULT_ARMS = "plain,run,child,child:no-trace:no-sampler"
PROCESS_TIMEOUT_S = 15 * 60


@dataclass(frozen=True)
class Arm:
    name: str
    kind: str
    knobs: frozenset

    @classmethod
    def parse(cls, text: str) -> "Arm":
        kind, *knobs = text.split(":")
        if kind not in KINDS or any(k not in KNOBS for k in knobs):
            raise ValueError(f"arm {text!r}: a kind ({', '.join(KINDS)}) then knobs "
                             f"({', '.join(KNOBS)}), separated by ':'")
        return cls(text, kind, frozenset(knobs))

    def env(self) -> dict:
        env = child_env()
        for knob in self.knobs:
            env.update(KNOB_ENV.get(knob, {}))
        if "gc-off" in self.knobs:
            env["PYTHONPATH"] = os.pathsep.join([_gc_off_site(), env["PYTHONPATH"]])
        return env


@functools.cache
def _gc_off_site() -> str:
    """A folder whose sitecustomize module disables the garbage collector at start-up."""
    folder = tempfile.mkdtemp(prefix="gapscope-gc-off-")
    Path(folder, "sitecustomize.py").write_text("import gc\ngc.disable()\n")
    return folder


def steady_times(arm: Arm, workload: str, framework: str, variant: str, steps: int,
                 scratch: Path) -> tuple[list[float], list[float] | None]:
    """One fresh process of `arm`; the step times (ms) its steady state is made of, and the
    page faults of each of those steps where the process counted them."""
    if arm.kind == "plain":
        command = [sys.executable, "-m", "benchmarks.plain_loops", workload, framework, variant,
                   "--steps", str(steps), "--warmup", str(WARMUP_STEPS)]
        command += [f"--{knob}" for knob in PLAIN_FLAGS if knob in arm.knobs]
        done = last_json_object(_run(command, arm).stdout)
        faults = done.get("minor_faults")
        return done["times_ms"][WARMUP_STEPS:], faults and faults[WARMUP_STEPS:]
    if arm.knobs & set(PLAIN_FLAGS):
        raise ValueError(f"{', '.join(PLAIN_FLAGS)} go with the plain kind only")
    out = Path(tempfile.mkdtemp(prefix=f"{arm.kind}-", dir=scratch))
    if arm.kind == "run":
        command = [sys.executable, "-m", "gapscope.cli", "run", workload, "--framework", framework,
                   "--variant", variant, "--steps", str(steps), "--warmup", str(WARMUP_STEPS), "--quiet", "--out", str(out)]
        if "no-trace" in arm.knobs:
            command.append("--no-trace")
        if "no-sampler" in arm.knobs:
            raise ValueError("no-sampler goes with the child kind (the CLI has no such option)")
        _run(command, arm)
        run_dir = next(p for p in out.iterdir() if p.is_dir())
    else:
        if variant != "default":  # a variant's settings come from workloads.variants, as the CLI resolves them
            raise ValueError("the child kind runs the default variant only; use the run kind")
        from gapscope.workloads.settings import RunSettings
        settings = RunSettings(workload=workload, framework=framework, variant=variant, steps=steps,
                               warmup_steps=WARMUP_STEPS, trace="no-trace" not in arm.knobs,
                               sample_resources="no-sampler" not in arm.knobs)
        run_dir = out / "run"
        run_dir.mkdir()
        _run([sys.executable, "-m", "gapscope.workloads.runners.execute", str(run_dir),
              json.dumps(settings.to_dict())], arm)
    return _unprofiled_steady(run_dir / "steps.csv")


def _unprofiled_steady(steps_csv: Path) -> tuple[list[float], list[float]]:
    import csv
    with open(steps_csv, newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["warmup"] == "0" and r["traced"] == "0"]
    return [float(r["step_ms"]) for r in rows], [float(r["minor_faults"]) for r in rows]


def _run(command: list[str], arm: Arm) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=ROOT, env=arm.env(), capture_output=True, text=True,
                          timeout=PROCESS_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"{arm.name} failed ({done.returncode}): {tail(done.stdout + done.stderr)}")
    return done


def cv_pct(values: list[float]) -> float | None:
    return 100 * statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else None


def summarise(arm: Arm, processes: list[dict]) -> dict:
    means = [p["mean_ms"] for p in processes]
    per_step = [p["faults_per_step"] for p in processes if p["faults_per_step"] is not None]
    return {"arm": arm.name, "processes": len(means), "mean_ms": statistics.fmean(means),
            "min_ms": min(means), "max_ms": max(means), "cv_pct": cv_pct(means),
            "within_cv_pct": statistics.median(p["within_cv_pct"] for p in processes),
            "minor_faults": statistics.median(p["minor_faults"] for p in processes),
            "faults_per_step": (min(per_step), max(per_step)) if per_step else None,
            "time_faults_r": _correlation(means, [p["faults_per_step"] for p in processes])}


def _correlation(means: list[float], per_step: list) -> float | None:
    """How far the processes' speed follows their page faults per step (Pearson r)."""
    if len(means) < 3 or any(f is None for f in per_step) or len(set(per_step)) < 2:
        return None
    return statistics.correlation(means, per_step)


def render(summaries: list[dict], control: dict | None) -> str:
    header = ("arm", "processes", "mean ms", "min ms", "max ms", "CV between", "CV within",
              "CV / plain", "minor faults", "faults / steady step", "r(ms, faults)")
    rows = []
    for s in summaries:
        ratio = (f"{s['cv_pct'] / control['cv_pct']:.2f}" if control and s["cv_pct"] is not None
                 and control.get("cv_pct") else "-")
        rows.append((s["arm"], str(s["processes"]), f"{s['mean_ms']:.2f}", f"{s['min_ms']:.2f}",
                     f"{s['max_ms']:.2f}",
                     "-" if s["cv_pct"] is None else f"{s['cv_pct']:.1f} %",
                     f"{s['within_cv_pct']:.1f} %", ratio, f"{s['minor_faults'] / 1e3:.0f}k",
                     "-" if s["faults_per_step"] is None
                     else "{:,.0f} to {:,.0f}".format(*s["faults_per_step"]),
                     "-" if s["time_faults_r"] is None else f"{s['time_faults_r']:.2f}"))
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines.append("CV between: spread of the per-process steady means; CV within: median over "
                 "processes of the spread of their own steps; minor faults: median per process "
                 "(its whole life, start-up included); faults / steady step: the range of the "
                 "processes' means; r: across processes, their mean step against their faults a step.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", choices=("cnn", "mlp"), default="cnn")
    parser.add_argument("--framework", choices=("torch", "keras", "keras-jax"), default="torch")
    parser.add_argument("--variant", default="default",
                        help="one the plain loops have too (torch: compile; keras: jit)")
    parser.add_argument("--arms", default=DEFAULT_ARMS)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args(argv)
    try:
        arms = [Arm.parse(a) for a in args.arms.split(",")]
    except ValueError as exc:
        parser.error(str(exc))
    if args.steps <= WARMUP_STEPS + 14:
        parser.error(f"--steps must leave unprofiled steps after the trace window (> {WARMUP_STEPS + 14})")
    results: dict[str, list[dict]] = {a.name: [] for a in arms}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="process-spread-") as scratch:
        for round_index in range(args.rounds):
            shift = round_index % len(arms)
            for arm in arms[shift:] + arms[:shift]:
                before = load_snapshot()
                # Minor page faults of the process tree: fresh pages the allocator asked the
                # kernel for, the cost behind the CNN's two step speeds (benchmarks/README.md).
                faults_before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
                times, step_faults = steady_times(arm, args.workload, args.framework, args.variant,
                                                  args.steps, Path(scratch))
                faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - faults_before
                mean = statistics.fmean(times)
                per_step = statistics.fmean(step_faults) if step_faults else None
                results[arm.name].append({"mean_ms": mean, "within_cv_pct": cv_pct(times),
                                          "steps": len(times), "minor_faults": faults,
                                          "faults_per_step": per_step, "step_ms": times,
                                          "step_faults": step_faults,
                                          "load_before": before, "load_after": load_snapshot()})
                counted = "" if per_step is None else f", {per_step:,.0f} a steady step"
                log(f"round {round_index + 1}/{args.rounds} {arm.name}: {mean:.2f} ms, "
                    f"{faults / 1e3:.0f}k minor faults{counted} (load {before['loadavg_1m']:.2f})")
    summaries = [summarise(a, results[a.name]) for a in arms]
    # The control: the first plain arm (`plain`, or the plain loop with a knob such as faults).
    control = next((s for s, a in zip(summaries, arms) if a.kind == "plain"), None)
    print(render(summaries, control))
    loads = [p["load_before"]["loadavg_1m"] for ps in results.values() for p in ps]
    print(f"load (1-min average) before each process: {min(loads):.2f} to {max(loads):.2f}; "
          f"{args.rounds} rounds, {args.steps} steps, {time.perf_counter() - started:.0f} s")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    raw = OUT_DIR / f"process_spread-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}.json"
    raw.write_text(json.dumps({"args": vars(args), "summaries": summaries, "processes": results},
                              indent=2))
    log(f"raw figures: {raw}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
