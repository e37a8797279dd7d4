"""Holds gapscope's A/B gap ratio against plain training loops timed beside it, without gapscope."""
from __future__ import annotations

# Usage: python -m benchmarks.gap_truth [--pairs cnn,mlp-compile,mlp-jit] [--trials 5]
#            [--repeats 3] [--plain-repeats P] [--steps N] [--format table|markdown|json]
#            [--quick] [--no-check]
#
# For each pair of configurations and each trial: P plain repeats (default R) of A and of B (each a fresh
# process running benchmarks/plain_loops.py, which imports nothing of gapscope's but its data
# generators) and one `gapscope compare --measure A B --repeats R`, interleaved in time so that
# drift of the shared machine hits both alike. The plain ratio of a trial is the mean over its
# repeats of B_i / A_i; gapscope's is the ratio it reports. Results go to stdout, progress to
# stderr, every raw figure to benchmarks/out/gap_truth-<UTC time>.json.

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "benchmarks" / "out"
WARMUP_STEPS = 5                 # gapscope's default warm-up exclusion; the plain loops match it
# Issue 8's "done when", for cnn: each trial within 7 % of the plain ratio beside it, and the
# trials' gapscope ratios within 5 % of their median. Checked for every pair measured.
MAX_GAP_ERROR_PCT = 7.0
MAX_TRIAL_SPREAD_PCT = 5.0
# A run that hangs must not hold the benchmark forever; a torch.compile repeat takes ~1 min here.
PLAIN_TIMEOUT_S = 30 * 60
GAPSCOPE_TIMEOUT_S = 3 * 60 * 60
# The A/B folders go beside the raw figures, not into the user's traces/.
GAPSCOPE_OUT = OUT_DIR / "gap_truth-runs"


@dataclass(frozen=True)
class Config:
    workload: str
    framework: str
    variant: str = "default"

    @property
    def spec(self) -> str:
        """gapscope's `workload:framework[:variant]` form."""
        base = f"{self.workload}:{self.framework}"
        return base if self.variant == "default" else f"{base}:{self.variant}"


@dataclass(frozen=True)
class Pair:
    name: str
    a: Config
    b: Config
    ratio_label: str             # what B/A means, in words
    steps: int                   # default steps per run: enough steady steps for a stable mean
    quick_steps: int


PAIRS = {p.name: p for p in (
    # Quick steps stay above gapscope's warm-up + profiler warm-up + 10 traced steps, so that
    # its runs still have unprofiled steady steps to time.
    Pair("cnn", Config("cnn", "keras"), Config("cnn", "torch"), "torch/keras", 40, 25),
    # The compile run spends its first step (~30 s on a 2-core CPU) compiling; that is warm-up.
    Pair("mlp-compile", Config("mlp", "torch"), Config("mlp", "torch", "compile"),
         "compile/eager", 200, 40),
    Pair("mlp-jit", Config("mlp", "keras"), Config("mlp", "keras", "jit"), "jit/nojit", 200, 40),
)}


class GapscopeUnavailable(Exception):
    """gapscope's A/B command cannot be run at all here (absent, or refuses its arguments):
    said once, and the plain loops still run."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")   # as gapscope's launcher sets for its runs
    return env


def last_json_object(text: str) -> dict:
    """The JSON a child printed: the whole stdout, or else its last line that is an object
    (TensorFlow and friends may print lines of their own first)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON object in the output")


def tail(text: str, lines: int = 3) -> str:
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "no output"


def run_plain(config: Config, steps: int) -> dict:
    command = [sys.executable, "-m", "benchmarks.plain_loops", config.workload,
               config.framework, config.variant, "--steps", str(steps),
               "--warmup", str(WARMUP_STEPS)]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=PLAIN_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"plain loop {config.spec} failed ({done.returncode}): "
                           f"{tail(done.stderr)}")
    result = last_json_object(done.stdout)
    result["process_s"] = round(time.perf_counter() - started, 2)
    return result


def run_gapscope(pair: Pair, repeats: int, steps: int, extra: list[str]) -> dict:
    """One A/B measurement by gapscope: its first comparison of B against A."""
    command = [sys.executable, "-m", "gapscope.cli", "compare", "--measure", pair.a.spec, pair.b.spec,
               "--repeats", str(repeats), "--steps", str(steps), "--format", "json",
               "--out", str(GAPSCOPE_OUT), *extra]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=GAPSCOPE_TIMEOUT_S)
    output = done.stdout + done.stderr
    # click answers an unknown option or argument with exit code 2 and these words.
    if done.returncode == 2 and ("No such option" in output or "Usage:" in output):
        raise GapscopeUnavailable(tail(output, 2))
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {tail(output)}")
    try:
        comparisons = last_json_object(done.stdout)["comparisons"]
        comparison = dict(comparisons[0])
        missing = [k for k in ("a_step_ms", "b_step_ms", "ratio", "ratio_ci95") if k not in comparison]
        if missing:  # a broken contract: say which field, not a KeyError three calls later
            raise KeyError(", ".join(missing))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise RuntimeError(f"unexpected JSON ({type(exc).__name__}: {exc}): "
                           f"{tail(done.stdout)}") from None
    comparison["process_s"] = round(time.perf_counter() - started, 2)
    return comparison


def check_parameters(pairs: list[Pair]) -> dict:
    """gapscope's parameter counts (`gapscope list`), so that a plain model that drifted from
    gapscope's is caught before anything is timed. Empty when they cannot be had."""
    log("checking parameter counts with `gapscope list` ...")
    done = subprocess.run([sys.executable, "-m", "gapscope.cli", "list", "--format", "json"], cwd=ROOT,
                          env=child_env(), capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        log(f"  gapscope list failed ({tail(done.stdout + done.stderr)}): counts not checked")
        return {}
    entries = last_json_object(done.stdout)["workloads"]
    wanted = {c.workload for p in pairs for c in (p.a, p.b)}
    return {e["name"]: e.get("parameters", {}) for e in entries if e["name"] in wanted}


def verify_parameters(result: dict, config: Config, counts: dict) -> None:
    expected = counts.get(config.workload, {}).get(config.framework)
    if expected is not None and result["parameters"] != expected:
        raise SystemExit(f"plain {config.spec} has {result['parameters']:,} parameters, "
                         f"gapscope's has {expected:,}: the plain loop no longer mirrors it")


def pct(value: float, reference: float) -> float:
    return (value / reference - 1.0) * 100.0


def measure_trial(pair: Pair, trial: int, trials: int, repeats: int, plain_repeats: int,
                  steps: int, gapscope: dict, counts: dict, extra: list[str]) -> dict:
    """Plain pairs before and after the gapscope measurement (half each), each pair in
    alternating order (AB, BA, ...) so that a steady drift or an order effect cancels."""
    tag = f"[{pair.name} {trial}/{trials}]"
    plain_a, plain_b = [None] * plain_repeats, [None] * plain_repeats
    before = (plain_repeats + 1) // 2
    comparison, gapscope_error = None, None

    def plain_pair(index: int) -> None:
        order = ((pair.a, plain_a), (pair.b, plain_b))
        for config, into in (order if index % 2 == 0 else order[::-1]):
            result = run_plain(config, steps)
            verify_parameters(result, config, counts)
            into[index] = result
            log(f"{tag} plain {config.spec} {index + 1}/{plain_repeats}: {result['step_ms']:.2f} ms "
                f"({result['process_s']:.0f} s)")

    for index in range(before):
        plain_pair(index)
    if gapscope["available"]:
        try:
            comparison = run_gapscope(pair, repeats, steps, extra)
            low, high = comparison["ratio_ci95"]
            log(f"{tag} gapscope {comparison.get('a_label', pair.a.spec)} vs "
                f"{comparison.get('b_label', pair.b.spec)}: ratio {comparison['ratio']:.3f} "
                f"[{low:.3f}, {high:.3f}] ({comparison['process_s']:.0f} s)")
        except GapscopeUnavailable as exc:
            gapscope.update(available=False, reason=str(exc))
            log(f"gapscope A/B: not available ({exc})")
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            gapscope_error = str(exc)
            log(f"{tag} gapscope A/B failed: {exc}")
    for index in range(before, plain_repeats):
        plain_pair(index)

    ratios = [b["step_ms"] / a["step_ms"] for a, b in zip(plain_a, plain_b)]
    row = {"pair": pair.name, "trial": trial, "steps": steps, "repeats": repeats,
           "plain_repeats": plain_repeats,
           "plain_a_ms": statistics.fmean(r["step_ms"] for r in plain_a),
           "plain_b_ms": statistics.fmean(r["step_ms"] for r in plain_b),
           "plain_ratios": ratios, "plain_ratio": statistics.fmean(ratios),
           "gapscope": comparison, "gapscope_error": gapscope_error,
           "plain_runs": {"a": plain_a, "b": plain_b}}
    if comparison is not None:
        row["gapscope_ratio"] = comparison["ratio"]
        row["gapscope_ci95"] = list(comparison["ratio_ci95"])
        row["difference_pct"] = pct(comparison["ratio"], row["plain_ratio"])
        # False when gapscope had no unprofiled steady steps and fell back to traced ones.
        row["gapscope_unprofiled"] = comparison.get("unprofiled")
    return row


def summarise(pair: Pair, rows: list[dict]) -> dict:
    plain = [r["plain_ratio"] for r in rows]
    summary = {"pair": pair.name, "ratio": pair.ratio_label, "a": pair.a.spec, "b": pair.b.spec,
               "trials": len(rows), "plain_ratio_median": statistics.median(plain),
               "plain_max_deviation_pct": max(abs(pct(p, statistics.median(plain)))
                                              for p in plain),
               # The control for "within 7 % of the plain ratio beside it": how far two plain
               # measurements of the same pair, minutes apart, lie from each other here.
               "plain_vs_plain_max_pct": max((abs(pct(b, a)) for a, b in zip(plain, plain[1:])),
                                             default=None)}
    measured = [r for r in rows if "gapscope_ratio" in r]
    if measured:
        median = statistics.median(r["gapscope_ratio"] for r in measured)
        spread = max(abs(pct(r["gapscope_ratio"], median)) for r in measured)
        error = max(abs(r["difference_pct"]) for r in measured)
        summary.update(gapscope_trials=len(measured), gapscope_ratio_median=median,
                       gapscope_max_deviation_pct=spread, max_abs_difference_pct=error,
                       targets_met=spread <= MAX_TRIAL_SPREAD_PCT and error <= MAX_GAP_ERROR_PCT)
    return summary


# ---- rendering: rows and summaries in, text out -------------------------------------------

ROW_COLUMNS = ("pair", "trial", "plain A ms", "plain B ms", "plain B/A", "gapscope B/A [95% CI]",
               "difference")
SUMMARY_COLUMNS = ("pair", "ratio", "plain median", "gapscope median",
                   "max trial deviation", "max |gapscope - plain|", "targets",
                   "plain: max trial deviation", "plain vs plain")


def row_cells(row: dict) -> list[str]:
    if "gapscope_ratio" in row:
        low, high = row["gapscope_ci95"]
        gapscope = f"{row['gapscope_ratio']:.3f} [{low:.3f}, {high:.3f}]"
        if row.get("gapscope_unprofiled") is False:
            gapscope += " (traced)"
        difference = f"{row['difference_pct']:+.1f} %"
    else:
        gapscope, difference = ("failed" if row["gapscope_error"] else "n/a"), "-"
    return [row["pair"], str(row["trial"]), f"{row['plain_a_ms']:.2f}", f"{row['plain_b_ms']:.2f}",
            f"{row['plain_ratio']:.3f}", gapscope, difference]


def summary_cells(summary: dict) -> list[str]:
    cells = [summary["pair"], summary["ratio"], f"{summary['plain_ratio_median']:.3f}"]
    if "gapscope_ratio_median" in summary:
        cells += [f"{summary['gapscope_ratio_median']:.3f}",
                  f"{summary['gapscope_max_deviation_pct']:.1f} %",
                  f"{summary['max_abs_difference_pct']:.1f} %",
                  "met" if summary["targets_met"] else "MISSED"]
    else:
        cells += ["n/a", "-", "-", "-"]
    between = summary.get("plain_vs_plain_max_pct")
    return cells + [f"{summary['plain_max_deviation_pct']:.1f} %",
                    "-" if between is None else f"{between:.1f} %"]


def footer(rows: list[dict], pairs: list[Pair], settings: dict, gapscope: dict) -> list[str]:
    lines = [f"Step times in ms: mean of the steady steps after {WARMUP_STEPS} warm-up steps, "
             f"mean over {settings['repeats']} fresh-process repeats per trial (plain: "
             f"{settings['plain_repeats']}); ratio = B/A "
             f"({'; '.join(f'{p.name}: A {p.a.spec}, B {p.b.spec}' for p in pairs)}). "
             f"Steps per run: {settings['steps']}.",
             f"Targets: each trial within {MAX_GAP_ERROR_PCT:g} % of the plain ratio beside it; "
             f"trials within {MAX_TRIAL_SPREAD_PCT:g} % of their median.",
             "Control, the plain loop against itself: its own trials' deviation from their "
             "median, and the largest difference between one trial's plain ratio and the next's."]
    if any(r.get("gapscope_unprofiled") is False for r in rows):
        lines.append("(traced): gapscope had no unprofiled steady steps and timed traced ones; "
                     "give more --steps.")
    if not gapscope["available"]:
        lines.append(f"gapscope A/B: not available ({gapscope['reason']})")
    return lines


def render_table(header, rows) -> list[str]:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]

    def line(cells):  # names left, figures right
        return "  ".join(str(c).rjust(w) if i > 1 else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(header), line(["-" * w for w in widths]), *map(line, rows)]


def render_markdown(header, rows) -> list[str]:
    aligned = ["---" if i < 2 else "---:" for i in range(len(header))]
    return ["| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"
            for cells in (header, aligned, *rows)]


def render(fmt: str, rows: list[dict], summaries: list[dict], pairs: list[Pair],
           settings: dict, gapscope: dict) -> str:
    if fmt == "json":
        slim = [{k: v for k, v in r.items() if k != "plain_runs"} for r in rows]
        return json.dumps({"settings": settings, "gapscope": gapscope, "rows": slim,
                           "summaries": summaries}, indent=2)
    table = render_markdown if fmt == "markdown" else render_table
    lines = table(ROW_COLUMNS, [row_cells(r) for r in rows]) + [""]
    lines += table(SUMMARY_COLUMNS, [summary_cells(s) for s in summaries]) + [""]
    notes = footer(rows, pairs, settings, gapscope)
    lines += [f"*{n}*" if fmt == "markdown" else n for n in notes]
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", default=",".join(PAIRS),
                        help=f"comma-separated, from {', '.join(PAIRS)} (default: all)")
    parser.add_argument("--trials", type=int, default=5, help="A/B measurements per pair")
    parser.add_argument("--repeats", type=int, default=3,
                        help="fresh processes per configuration in one trial (plain and gapscope)")
    parser.add_argument("--plain-repeats", type=int, default=None,
                        help="plain processes per configuration in one trial (default: --repeats); "
                             "more make the reference steadier than what it checks")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps per run, warm-up included (default per pair: cnn 40, "
                             "mlp 200; --quick: cnn 25, mlp 40)")
    parser.add_argument("--format", choices=("table", "markdown", "json"), default="table")
    parser.add_argument("--quick", action="store_true",
                        help="1 trial, 1 repeat, few steps: a smoke test of a few minutes")
    parser.add_argument("--no-gapscope", action="store_true",
                        help="plain loops only (no gapscope A/B measurement)")
    parser.add_argument("--gapscope-args", default="",
                        help="extra arguments for `gapscope compare --measure`, e.g. '--out DIR'")
    parser.add_argument("--no-check", action="store_true",
                        help="exit 0 even when a target is missed")
    args = parser.parse_args(argv)
    unknown = [n for n in args.pairs.split(",") if n.strip() not in PAIRS]
    if unknown:
        parser.error(f"unknown pair(s) {', '.join(unknown)}; known: {', '.join(PAIRS)}")
    if args.quick:
        args.trials, args.repeats, args.plain_repeats = 1, 1, 1
    args.plain_repeats = args.plain_repeats or args.repeats
    if args.steps is not None and args.steps <= WARMUP_STEPS:
        parser.error(f"--steps must exceed the {WARMUP_STEPS} warm-up steps")
    if min(args.trials, args.repeats, args.plain_repeats) < 1:
        parser.error("--trials, --repeats and --plain-repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pairs = [PAIRS[n.strip()] for n in args.pairs.split(",")]
    steps_of = {p.name: args.steps or (p.quick_steps if args.quick else p.steps) for p in pairs}
    settings = {"pairs": [p.name for p in pairs], "trials": args.trials,
                "repeats": args.repeats, "plain_repeats": args.plain_repeats,
                "warmup_steps": WARMUP_STEPS,
                "steps": ", ".join(f"{n} {s}" for n, s in steps_of.items()),
                "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "python": sys.executable}
    gapscope = ({"available": False, "reason": "--no-gapscope"} if args.no_gapscope
                else {"available": True, "reason": None})
    counts = check_parameters(pairs)
    for pair in pairs:
        for config in (pair.a, pair.b):
            expected = counts.get(config.workload, {}).get(config.framework)
            log(f"  {config.spec}: gapscope {expected if expected is not None else '?'} parameters")

    rows, summaries = [], []
    started = time.perf_counter()
    for pair in pairs:
        pair_rows = [measure_trial(pair, trial, args.trials, args.repeats, args.plain_repeats,
                                   steps_of[pair.name], gapscope, counts,
                                   args.gapscope_args.split())
                     for trial in range(1, args.trials + 1)]
        rows += pair_rows
        summaries.append(summarise(pair, pair_rows))
    settings["wall_s"] = round(time.perf_counter() - started, 1)

    print(render(args.format, rows, summaries, pairs, settings, gapscope))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    raw = OUT_DIR / f"gap_truth-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}.json"
    raw.write_text(json.dumps({"settings": settings, "gapscope": gapscope, "rows": rows,
                               "summaries": summaries}, indent=2))
    log(f"raw figures (every step of every plain run): {raw}; took {settings['wall_s']:.0f} s")
    missed = [s["pair"] for s in summaries if s.get("targets_met") is False]
    if missed and not args.no_check:
        log(f"targets missed: {', '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
