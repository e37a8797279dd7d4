"""Cost against steps, this tree against an older commit, interleaved, each command in a fresh process:
`breakdown` of a real run whose steps.csv holds 1k, 10k and 100k rows, and of real-shaped traces of
100, 1,000 and 10,000 steps of one size; seconds, the process tree's peak RSS, the reader's MB/s
alone, and the ratios that must hold on any machine."""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import loop_trace
from benchmarks.reader_versions import _one as read_alone
from benchmarks.reader_versions import export_commit

REPO = Path(__file__).resolve().parent.parent
SIZES = (1_000, 10_000, 100_000)
MAX_TENFOLD = 12.0    # 10x the rows in at most this many times the time
MAX_100K_OVER_1K = 3.0
MAX_REFRESH_S = 0.1       # `watch`: one refresh of a run whose steps.csv holds 100k rows
TRACE_STEPS = (100, 1_000, 10_000)
MAX_PER_MB_SPREAD = 0.20  # time per MB of trace, most over least among the step counts, minus 1
MAX_TREE_MB = 400.0       # the process tree's peak RSS on a trace of about 800 MB
MIN_SPEEDUP = 2.0         # new end to end against the older commit, on the traces
_PAGE = os.sysconf("SC_PAGE_SIZE")
TINY_TRACE = REPO / "tests" / "fixtures" / "marked_two_steps.pt.trace.json"


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


def one(tree: Path, target: Path) -> tuple[float, float]:
    """Seconds and the process tree's peak RSS (MB) of `breakdown TARGET --format json` run by
    `tree`'s cli.py."""
    seconds, mb, _ = timed_breakdown(tree, target)
    return seconds, mb


def timed_breakdown(tree: Path, target: Path, *options: str, output: bool = False) -> tuple[float, float, bytes]:
    """Seconds, the process tree's peak RSS (MB) and (with `output`) the printed JSON of
    `breakdown TARGET [OPTIONS] --format json` run by `tree`'s cli.py in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, str(tree / "cli.py"), "breakdown", str(target), *options,
                                "--format", "json"], env=env, cwd=tree,
                               stdout=subprocess.PIPE if output else subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = TreePeak(process.pid)
    stdout, stderr = process.communicate()
    seconds = time.perf_counter() - start
    peak.stop()
    if process.returncode != 0:
        raise SystemExit(f"{tree}: breakdown {' '.join(options)} of {target} failed: {stderr.decode()[-500:]}")
    return seconds, peak.mb, stdout or b""


class TreePeak:
    """The largest sum of RSS over a process and all its descendants (the reader's workers, a
    gunzip child), sampled every 20 ms until stop(): ru_maxrss gives one process's peak only."""

    def __init__(self, pid: int):
        self.pid, self.mb, self._done = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            self.mb = max(self.mb, sum(map(_rss, _tree(self.pid))) / 2**20)


def _tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        pid = todo.pop()
        found.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as handle:
                    todo += [int(child) for child in handle.read().split()]
        except OSError:  # gone meanwhile
            pass
    return found


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def interleaved(trees: dict[str, Path], targets: dict, rounds: int, measure) -> tuple[dict, dict]:
    """Median seconds and peak MB of measure(tree, target) per (tree, key), the trees' order
    swapped every round so that neither always runs on a warmer cache."""
    times = {(t, k): [] for t in trees for k in targets}
    peaks = dict.fromkeys(times, 0.0)
    for round_ in range(rounds):
        for key, target in targets.items():
            for name in (list(trees) if round_ % 2 == 0 else list(trees)[::-1]):
                seconds, peak = measure(trees[name], target)
                times[name, key].append(seconds)
                peaks[name, key] = max(peaks[name, key], peak)
    return {key: statistics.median(values) for key, values in times.items()}, peaks


def rows_table(run: Path, trees: dict[str, Path], rounds: int, folder: Path) -> bool:
    """steps.csv of 1k, 10k and 100k rows; True where the targets hold."""
    runs = {n: grown(run, n, folder) for n in SIZES}
    median, rss = interleaved(trees, runs, rounds, one)
    print(f"breakdown of {run.name} grown to 1k/10k/100k steps.csv rows")
    print(f"{'rows':>8} {'old s':>8} {'new s':>8} {'new/old':>8} {'old MB':>8} {'new MB':>8}")
    for n in SIZES:
        print(f"{n:>8,} {median['old', n]:>8.2f} {median['new', n]:>8.2f} "
              f"{median['new', n] / median['old', n]:>8.2f} {rss['old', n]:>8.0f} {rss['new', n]:>8.0f}")
    tenfold = [median["new", b] / median["new", a] for a, b in zip(SIZES, SIZES[1:])]
    over = median["new", SIZES[-1]] / median["new", SIZES[0]]
    print("new: 10x the rows took " + ", ".join(f"{r:.2f}x" for r in tenfold)
          + f" the time (target <= {MAX_TENFOLD:g}x); 100k rows {over:.2f}x 1k (target <= "
          f"{MAX_100K_OVER_1K:g}x)")
    refresh = watch_refresh(runs[SIZES[-1]] / "steps.csv", folder)
    print(f"new: a watch refresh after {SIZES[-1]:,} rows (one row appended, read, the state worked "
          f"out): median {refresh * 1000:.1f} ms of 20 (target <= {MAX_REFRESH_S * 1000:.0f} ms)")
    return max(tenfold) <= MAX_TENFOLD and over <= MAX_100K_OVER_1K and refresh <= MAX_REFRESH_S


def watch_refresh(steps_csv: Path, folder: Path) -> float:
    """Median seconds of a `watch` refresh (this tree's) on a copy of `steps_csv` already read
    once: one row appended, then what the loop does each interval (read what was appended,
    keep it in the window, work out the state)."""
    from gapscope.analysis.readers.live_steps import StepsFollower
    from gapscope.watch.state import StepWindow, watch_state

    copy = folder / "watch_steps.csv"
    shutil.copyfile(steps_csv, copy)
    follower, window = StepsFollower(copy), StepWindow()
    window.add(follower.new_rows())
    with open(copy, newline="") as handle:
        *_, last = csv.reader(handle)
    times = []
    for n in range(20):
        with open(copy, "a", newline="") as handle:
            csv.writer(handle).writerow([str(int(last[0]) + 1 + n), *last[1:]])
        start = time.perf_counter()
        window.add(follower.new_rows())
        watch_state({"run_id": "watch", "status": "running"}, window, None)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def traces_table(base: Path, mb: float, trees: dict[str, Path], rounds: int, folder: Path) -> bool:
    """Traces of TRACE_STEPS steps and `mb` MB each, made from `base`; True where the targets hold."""
    traces = {}
    for n in TRACE_STEPS:
        traces[n] = folder / f"loop_{n}steps_{mb:g}mb.pt.trace.json"
        if not traces[n].exists():
            loop_trace.stretch(base, traces[n], n, mb)
    median, rss = interleaved(trees, traces, rounds, one)
    middle = {TRACE_STEPS[1]: traces[TRACE_STEPS[1]]}
    read, _ = interleaved(trees, middle, rounds, _read_alone)
    # What every breakdown costs whatever its trace (start-up, imports, output): a two-step one's.
    fixed, _ = interleaved(trees, {"fixed": TINY_TRACE}, max(rounds, 5), one)
    size = {n: traces[n].stat().st_size / 1e6 for n in TRACE_STEPS}
    print(f"breakdown of {base.name}'s events as traces of {mb:g} MB")
    print(f"{'steps':>8} {'MB':>6} {'old s':>8} {'new s':>8} {'new/old':>8} {'old s/MB':>9} "
          f"{'new s/MB':>9} {'old tree MB':>12} {'new tree MB':>12}")
    for n in TRACE_STEPS:
        print(f"{n:>8,} {size[n]:>6.0f} {median['old', n]:>8.2f} {median['new', n]:>8.2f} "
              f"{median['new', n] / median['old', n]:>8.2f} {median['old', n] / size[n]:>9.4f} "
              f"{median['new', n] / size[n]:>9.4f} {rss['old', n]:>12.0f} {rss['new', n]:>12.0f}")
    per_mb = [median["new", n] / size[n] for n in TRACE_STEPS]
    spread = max(per_mb) / min(per_mb) - 1
    tenfold = [median["new", b] / median["new", a] for a, b in zip(TRACE_STEPS, TRACE_STEPS[1:])]
    speedup = min(median["old", n] / median["new", n] for n in TRACE_STEPS)
    n = TRACE_STEPS[1]
    print(f"reading alone, the {n:,}-step trace: old {size[n] / read['old', n]:.0f} MB/s, new "
          f"{size[n] / read['new', n]:.0f} MB/s (new/old time {read['new', n] / read['old', n]:.2f}); "
          f"the rest of the breakdown (imports, analysis, output) {median['new', n] / read['new', n] - 1:.0%} "
          f"of the reading, new (old {median['old', n] / read['old', n] - 1:.0%}); less the fixed "
          f"cost (a two-step trace's whole breakdown: old {fixed['old', 'fixed']:.2f} s, new "
          f"{fixed['new', 'fixed']:.2f} s), the analysis after reading "
          f"{_analysis_share(median, read, fixed, 'new', n):.0%} of the reading, new (old "
          f"{_analysis_share(median, read, fixed, 'old', n):.0%})")
    big = mb >= 800
    print(f"new: time per MB varies {spread:.0%} between {TRACE_STEPS[0]:,} and {TRACE_STEPS[-1]:,} steps "
          f"(target <= {MAX_PER_MB_SPREAD:.0%} at about 800 MB); 10x the steps took "
          + ", ".join(f"{r:.2f}x" for r in tenfold) + f" the time (target <= {MAX_TENFOLD:g}x); "
          f"old/new >= {speedup:.2f}x (target >= {MIN_SPEEDUP:g}x at about 800 MB); process tree "
          f"<= {max(rss['new', n] for n in TRACE_STEPS):.0f} MB (target < {MAX_TREE_MB:.0f} MB at about 800 MB)"
          + ("" if big else "; below 800 MB only 10x the steps is checked"))
    # On small traces the fixed costs (imports, a step's own figures) outweigh the bytes: the
    # targets on bytes hold from the size they were set at.
    met = max(tenfold) <= MAX_TENFOLD
    if big:
        met = met and spread <= MAX_PER_MB_SPREAD and speedup >= MIN_SPEEDUP \
            and max(rss["new", n] for n in TRACE_STEPS) < MAX_TREE_MB
    return met


def _analysis_share(median: dict, read: dict, fixed: dict, tree: str, steps: int) -> float:
    """The analysis after reading, as a share of the reading: the whole breakdown less the
    reading and less what a breakdown costs whatever its trace."""
    return (median[tree, steps] - read[tree, steps] - fixed[tree, "fixed"]) / read[tree, steps]


def _read_alone(tree: Path, trace: Path) -> tuple[float, float]:
    """The reader alone (read_torch_trace in a child): seconds, and its peak RSS (the workers'
    only where they outlive the read, as before this tree's)."""
    found = read_alone(tree, trace, "gapscope")
    return found["wall"], found["rss_mb"] + found.get("workers_rss_mb", 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--run", type=Path, help="a real run directory whose steps.csv is grown "
                        "(without it, the rows table is left out)")
    parser.add_argument("--against", default="HEAD~1", help="the older commit (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trace-mb", type=float, default=800.0, help="each trace's size (0: no traces)")
    parser.add_argument("--base-trace", type=Path, help="a real loop's torch trace whose events the "
                        "traces repeat (default: benchmarks/loop_trace.py records one)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "gapscope-steps-scale")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    met = True
    with tempfile.TemporaryDirectory() as folder:
        trees = {"old": export_commit(args.against, Path(folder)), "new": REPO}
        load = os.getloadavg()[0]
        print(f"this tree against {args.against}, {args.rounds} interleaved rounds, each command in a "
              "fresh process")
        if args.run is not None:
            met = rows_table(args.run, trees, args.rounds, args.dir) and met
        if args.trace_mb > 0:
            base = args.base_trace or args.dir / "loop_base.pt.trace.json"
            if not base.exists():
                loop_trace.record(base)
            met = traces_table(base, args.trace_mb, trees, args.rounds, args.dir) and met
    print(f"load {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
