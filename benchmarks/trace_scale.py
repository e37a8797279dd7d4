"""Times `gapscope breakdown` on large synthetic torch traces (250 MB and 1 GB; plain and gzipped;
marked and foreign), each in a fresh process whose peak RSS the kernel reports, and prints the scale table."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.synthetic_trace import TraceShape, write_synthetic_trace

TARGET_MB_S = 200.0
TARGET_RSS_MB = 1000.0
BYTES_PER_EVENT = 397  # of the synthetic trace (README): sizes in MB become event counts
DEFAULT_DIR = Path("/tmp/gapscope-scale")
ROOT = Path(__file__).resolve().parent.parent  # the child imports this checkout's gapscope


@dataclass
class Measurement:
    """One command on one trace: its own timing (imports excluded), the whole process's wall
    time, its peak RSS (VmHWM: ru_maxrss of a child starts at its parent's RSS at the fork),
    and the machine's load when it started."""

    trace: str
    size_mb: float  # bytes the reader parsed (the inflated size of a .gz)
    file_mb: float
    command_s: float
    cpu_s: float    # the command's CPU time, both threads: what load on a shared machine does not add to
    process_s: float
    peak_rss_mb: float
    load: float
    reads: int

    @property
    def mb_s(self) -> float:
        return self.size_mb / self.command_s


def trace_path(folder: Path, size_mb: int, marked: bool) -> Path:
    return folder / f"{'marked' if marked else 'foreign'}-{size_mb}mb.pt.trace.json"


def make_traces(folder: Path, size_mb: int, marked: bool, say) -> tuple[Path, Path]:
    """The plain trace and its gzip, written once and kept in `folder` between runs."""
    folder.mkdir(parents=True, exist_ok=True)
    plain = trace_path(folder, size_mb, marked)
    if not plain.exists():
        say(f"writing {plain.name}...")
        partial = plain.with_suffix(".partial")
        write_synthetic_trace(partial, TraceShape(events=size_mb * 1_000_000 // BYTES_PER_EVENT,
                                                  marked=marked))
        partial.rename(plain)
    gz = plain.with_name(plain.name + ".gz")
    if not gz.exists():
        say(f"writing {gz.name}...")
        partial = gz.with_suffix(".partial")
        with open(plain, "rb") as source, open(partial, "wb") as out:
            # gzip(1) at its default level, as torch's trace handler (gzip module, level 9)
            # would take minutes per GB here; the inflate cost the reader pays is the same.
            subprocess.run(["gzip", "-c", "-6"], stdin=source, stdout=out, check=True)
        partial.rename(gz)
    return plain, gz


def measure(command: str, paths: list[Path], size_mb: float, label: str) -> Measurement:
    """Run the command in a fresh child process, which reports its own time and peak RSS."""
    load = os.getloadavg()[0]
    argv = [sys.executable, "-m", "benchmarks.trace_scale", "--child", command, *map(str, paths)]
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    process_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{label}: child exited with {done.returncode}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return Measurement(label, size_mb, paths[0].stat().st_size / 1e6, report["seconds"],
                       report["cpu_seconds"], process_s, report["peak_rss_mb"], load, report["reads"])


def child(command: str, paths: list[str]) -> None:
    """In the measured process: the CLI command on the paths, timed from after the imports,
    with the number of trace reads counted; its output is discarded."""
    import contextlib
    import io

    from gapscope.analysis.model import run as model_run
    from gapscope.cli import cli
    reads = 0
    read_trace = model_run.read_trace

    def counted(path):
        nonlocal reads
        reads += 1
        return read_trace(path)
    model_run.read_trace = counted
    import gapscope.analysis.results.breakdown, gapscope.analysis.results.compare, gapscope.analysis.results.explain  # noqa: E401,F401 - imports are not the read
    started, cpu_started = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            cli.main([command, *paths, "--format", "json"], prog_name="gapscope", standalone_mode=False)
        except SystemExit as exc:
            if exc.code:
                raise
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    status = Path("/proc/self/status").read_text()
    peak_kb = int(status.split("VmHWM:")[1].split()[0])
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu_seconds, "reads": reads,
                      "peak_rss_mb": peak_kb / 1024}))


def render(rows: list[Measurement]) -> str:
    lines = [f"{'trace':<30}{'parsed MB':>10}{'file MB':>8}{'command s':>10}{'MB/s':>6}"
             f"{'cpu s':>7}{'process s':>10}{'peak RSS MB':>12}{'reads':>6}{'load':>6}"]
    for r in rows:
        lines.append(f"{r.trace:<30}{r.size_mb:>10.0f}{r.file_mb:>8.0f}{r.command_s:>10.2f}"
                     f"{r.mb_s:>6.0f}{r.cpu_s:>7.2f}{r.process_s:>10.2f}{r.peak_rss_mb:>12.0f}"
                     f"{r.reads:>6}{r.load:>6.2f}")
    lines.append("MB/s: parsed (inflated) MB over the command's own wall time, imports excluded; cpu s: "
                 "its CPU time (both threads); process s: the whole process; peak RSS: VmHWM of the "
                 "process; load: 1-min load average when it started")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="250,1000", help="trace sizes in MB (default %(default)s)")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                        help="where the traces are written and kept (default %(default)s)")
    parser.add_argument("--only", choices=("marked", "foreign"), default=None)
    parser.add_argument("--no-gzip", action="store_true")
    parser.add_argument("--compare", action="store_true",
                        help="also `gapscope compare` of the largest marked trace with itself")
    parser.add_argument("--against", metavar="COMMIT",
                        help="instead: this tree's reader against COMMIT's (e.g. 69ecc53) on the marked "
                             "traces, plain and gzip, interleaved, each read in its own process")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of --against (default %(default)s)")
    parser.add_argument("--clean", action="store_true", help="delete the traces afterwards")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1:])
        return 0

    def say(message):
        print(message, file=sys.stderr, flush=True)
    rows = []
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.against:
        from benchmarks.reader_versions import compare_versions
        for size in sizes:
            plain, gz = make_traces(args.dir, size, True, say)
            # json.load of a trace this size holds several times its size in objects: left out.
            print(compare_versions(plain, args.against, args.rounds, gz=gz, with_json=size <= 300),
                  flush=True)
        return 0
    kinds = [args.only == "marked"] if args.only else [True, False]
    try:
        for marked in kinds:
            for size in sizes:
                plain, gz = make_traces(args.dir, size, marked, say)
                parsed_mb = plain.stat().st_size / 1e6
                for path in [plain] + ([] if args.no_gzip else [gz]):
                    label = plain.name.removesuffix(".pt.trace.json") + (" .gz" if path == gz else "")
                    say(f"breakdown {path.name}...")
                    rows.append(measure("breakdown", [path], parsed_mb, f"breakdown {label}"))
                    say(render(rows[-1:]).splitlines()[1])
        if args.compare:
            plain = trace_path(args.dir, max(sizes), True)
            say(f"compare {plain.name} with itself...")
            rows.append(measure("compare", [plain, plain], plain.stat().st_size / 1e6,
                                f"compare {plain.name.removesuffix('.pt.trace.json')} x2"))
    finally:
        if args.clean:
            shutil.rmtree(args.dir, ignore_errors=True)
    print(render(rows))
    breakdowns = [r for r in rows if r.trace.startswith("breakdown") and r.size_mb >= 900]
    met = all(r.mb_s >= TARGET_MB_S and r.peak_rss_mb < TARGET_RSS_MB for r in breakdowns)
    print(f"target: 1 GB traces at >= {TARGET_MB_S:.0f} MB/s with peak RSS < {TARGET_RSS_MB:.0f} MB: "
          f"{'met' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
