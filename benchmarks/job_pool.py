"""Time and peak memory of breaking down a job of N ranks, serial against the process pool: one
real rank trace copied N times into a foreign folder (each copy's distributedInfo given its rank).

    python benchmarks/job_pool.py RANK_TRACE.pt.trace.json.gz --ranks 2 8 --out /tmp/pool

Each configuration runs in a fresh process; peak memory is the most the whole process tree
(this process, the pool's workers and the forkserver) held at once, sampled every 20 ms."""
from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_INFO = re.compile(rb'("distributedInfo"\s*:\s*\{[^}]*?"rank"\s*:\s*)\d+(\s*,\s*"world_size"\s*:\s*)\d+')


def make_folder(trace: Path, ranks: int, out: Path) -> Path:
    folder = out / f"x{ranks}"
    if folder.is_dir():
        return folder
    folder.mkdir(parents=True)
    data = gzip.decompress(trace.read_bytes())
    for rank in range(ranks):
        patched, count = _INFO.subn(rb"\g<1>%d\g<2>%d" % (rank, ranks), data, count=1)
        if count != 1:
            raise SystemExit(f"{trace}: no distributedInfo with rank and world_size to rewrite")
        (folder / f"host_{rank}.pt.trace.json.gz").write_bytes(gzip.compress(patched, 1))
    return folder


def measure(folder: Path, workers: int) -> dict:
    """In this process: the job breakdown, timed, with the tree's peak RSS sampled."""
    import psutil
    sys.path.insert(0, str(ROOT))
    from gapscope.analysis.results.distributed_breakdown import job_breakdown
    from gapscope.analysis.model.job import load_job

    me = psutil.Process()
    peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            peak[0] = max(peak[0], total)
            time.sleep(0.02)
    thread = threading.Thread(target=sample, daemon=True)
    start_rss = me.memory_info().rss
    thread.start()
    t0 = time.perf_counter()
    result = job_breakdown(load_job(folder), workers=workers)
    seconds = time.perf_counter() - t0
    done.set()
    thread.join()
    return {"ranks": result.world_size, "workers": workers, "seconds": round(seconds, 2),
            "peak_tree_mib": round(peak[0] / 2**20), "start_mib": round(start_rss / 2**20),
            "job_step_ms": round(result.job_step_ms, 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace", nargs="?")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--out", default="/tmp/gapscope-job-pool")
    parser.add_argument("--measure", nargs=2, metavar=("FOLDER", "WORKERS"))
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure[0]), int(args.measure[1]))))
        return
    trace = Path(args.trace)
    print(f"trace {trace.name}: {trace.stat().st_size / 2**20:.1f} MiB gzip")
    for ranks in args.ranks:
        folder = make_folder(trace, ranks, Path(args.out))
        for workers in (1, None):
            done = subprocess.run([sys.executable, __file__, "--measure", str(folder),
                                   str(workers or 0)], capture_output=True, text=True, check=True)
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            mode = "serial" if workers == 1 else f"pool ({figures['workers'] or 'auto'} max)"
            print(f"{ranks} ranks, {mode}: {figures['seconds']} s, peak {figures['peak_tree_mib']} MiB "
                  f"(process tree; {figures['start_mib']} MiB before)")


if __name__ == "__main__":
    main()
