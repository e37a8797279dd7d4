"""`breakdown` of one real run whose steps.csv holds 1k, 10k and 100k rows, this tree against an
older commit, interleaved, each in a fresh process: seconds, peak RSS and the ratios that must hold
on any machine (10x the rows in at most 12x the time; 100k rows at most 3x the cost of 1k)."""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.reader_versions import export_commit

REPO = Path(__file__).resolve().parent.parent
SIZES = (1_000, 10_000, 100_000)
MAX_TENFOLD = 12.0    # 10x the rows in at most this many times the time
MAX_100K_OVER_1K = 3.0


def grown(run: Path, rows: int, into: Path) -> Path:
    """A copy of `run` whose steps.csv is its own rows, then its steady unprofiled rows over and
    over, renumbered, up to `rows`: a long job's file, the run's trace unchanged."""
    copy = into / f"rows{rows}"
    if copy.exists():
        return copy
    shutil.copytree(run, copy)
    with open(run / "steps.csv", newline="") as handle:
        original = list(csv.DictReader(handle))
    steady = [r for r in original if r.get("warmup") == "0" and r.get("traced") == "0"]
    with open(copy / "steps.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, list(original[0]))
        writer.writeheader()
        writer.writerows(original)
        for n in range(len(original), rows):
            writer.writerow({**steady[n % len(steady)], "step": str(n)})
    return copy


def one(tree: Path, run: Path) -> tuple[float, float]:
    """Seconds and peak RSS (MB) of `breakdown RUN --format json` run by `tree`'s cli.py."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, str(tree / "cli.py"), "breakdown", str(run),
                                "--format", "json"], env=env, cwd=tree,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{tree}: breakdown of {run} failed: {process.stderr.read().decode()[-500:]}")
    return seconds, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run", type=Path, required=True, help="a real run directory to grow")
    parser.add_argument("--against", default="HEAD~1", help="the older commit (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "gapscope-steps-scale")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    runs = {n: grown(args.run, n, args.dir) for n in SIZES}
    with tempfile.TemporaryDirectory() as folder:
        trees = {"old": export_commit(args.against, Path(folder)), "new": REPO}
        times = {(t, n): [] for t in trees for n in SIZES}
        rss = dict.fromkeys(times, 0.0)
        load = os.getloadavg()[0]
        for round_ in range(args.rounds):
            for n in SIZES:
                # Alternate which tree goes first, so neither always runs on a warmer cache.
                order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
                for name in order:
                    seconds, peak = one(trees[name], runs[n])
                    times[name, n].append(seconds)
                    rss[name, n] = max(rss[name, n], peak)
    median = {key: statistics.median(values) for key, values in times.items()}
    print(f"breakdown of {args.run.name} grown to 1k/10k/100k steps.csv rows, {args.rounds} "
          f"interleaved rounds; load {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"{'rows':>8} {'old s':>8} {'new s':>8} {'new/old':>8} {'old MB':>8} {'new MB':>8}")
    for n in SIZES:
        print(f"{n:>8,} {median['old', n]:>8.2f} {median['new', n]:>8.2f} "
              f"{median['new', n] / median['old', n]:>8.2f} {rss['old', n]:>8.0f} {rss['new', n]:>8.0f}")
    tenfold = [median["new", b] / median["new", a] for a, b in zip(SIZES, SIZES[1:])]
    over = median["new", SIZES[-1]] / median["new", SIZES[0]]
    print("new: 10x the rows took " + ", ".join(f"{r:.2f}x" for r in tenfold)
          + f" the time (target <= {MAX_TENFOLD:g}x); 100k rows {over:.2f}x 1k (target <= "
          f"{MAX_100K_OVER_1K:g}x)")
    return 0 if max(tenfold) <= MAX_TENFOLD and over <= MAX_100K_OVER_1K else 1


if __name__ == "__main__":
    sys.exit(main())
