"""Throughput and memory of a job's analysis on each engine: synthetic ranks made from the
hand-made sampled-rank trace (tests/fixtures/foreign/sampled_ranks, one step repeated until a
rank's file is the size asked), analysed by `local`, `dask` and `ray` in turn, interleaved.

    python benchmarks/job_scale.py                      # 1,024 ranks of 1 MB, 64 ranks of 20 MB
    python benchmarks/job_scale.py --jobs 32x1 4x5 --repeats 1 --engines local dask

Each measurement runs in a fresh process: the engine is started and its workers warmed (every
worker up, the analysis imported: timed apart, as "start"), the job broken down through it, and it prints ranks/s, MB/s per worker, the driver's peak RSS (getrusage) and
the largest worker's peak RSS (its processes sampled every 50 ms; Ray's own services, raylet and
GCS, left out). Workers: GAPSCOPE_JOB_WORKERS, else one per core. On a shared machine the times
measure its load as much as the engines: say the load beside any figure quoted."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "tests" / "fixtures" / "foreign" / "sampled_ranks" / "worker0.17000000000.pt.trace.json"
STEP_US = 1000
# Ray's own services: not workers, whatever memory they hold.
_SERVICES = ("raylet", "gcs_server", "dashboard", "log_monitor", "monitor.py", "runtime_env")


def make_job(folder: Path, ranks: int, megabytes: float) -> Path:
    """`ranks` traces of about `megabytes` each: the template's step with LAYERS ops (and their
    kernels) inside its forward and its backward, as a model's step has, repeated."""
    if (folder / "done").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    doc = json.loads(TEMPLATE.read_text())
    first = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    step = [e for e in doc["traceEvents"] if e.get("ph") == "X" and STEP_US <= e["ts"] < 2 * STEP_US]
    step += _layers(step)
    steps = max(2, int(megabytes * 1e6 / len(json.dumps(step))))
    events = list(first)
    for k in range(steps):
        for e in step:
            shifted = dict(e, ts=e["ts"] + k * STEP_US)
            if e["name"].startswith("ProfilerStep#"):
                shifted["name"] = f"ProfilerStep#{k + 1}"
            if "correlation" in e.get("args", {}):
                shifted["args"] = dict(e["args"], correlation=e["args"]["correlation"] + 100_000 * (k + 1))
            events.append(shifted)
    for rank in range(ranks):
        doc["distributedInfo"].update(rank=rank, world_size=ranks)
        doc["traceEvents"] = events
        (folder / f"rank{rank}.pt.trace.json").write_text(json.dumps(doc))
    (folder / "done").write_text("")
    return folder


LAYERS = 40


def _layers(step: list[dict]) -> list[dict]:
    """LAYERS ops of 5 µs, each launching a 4 µs kernel, inside the step's forward op
    (aten::linear, 200 µs) and inside its backward op."""
    out = []
    for parent in step:
        if parent["name"] not in ("aten::linear", "autograd::engine::evaluate_function: AddmmBackward0"):
            continue
        name = "aten::addmm" if parent["name"] == "aten::linear" else "aten::mm"
        for i in range(LAYERS):
            ts, correlation = parent["ts"] + 5 * i, 1000 + len(out)
            out += [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 4},
                    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                     "ts": ts + 1, "dur": 1, "args": {"correlation": correlation}},
                    {"ph": "X", "cat": "kernel", "name": f"gemm_{name}", "pid": 0, "tid": 7,
                     "ts": ts + 2, "dur": 4, "args": {"device": 0, "stream": 7, "correlation": correlation}}]
    return out


def _worker_peak(stop: threading.Event, peak: list) -> None:
    import psutil
    me = psutil.Process()
    while not stop.is_set():
        for p in me.children(recursive=True):
            try:
                if not any(s in " ".join(p.cmdline()) for s in _SERVICES):
                    peak[0] = max(peak[0], p.memory_info().rss)
            except psutil.Error:
                pass
        time.sleep(0.05)


def _warm() -> int:
    import gapscope.analysis.results.rank_summary  # noqa: F401 - what a rank's task imports first
    return os.getpid()


def measure(folder: Path, engine_name: str) -> dict:
    """In this process: start the engine, break the job down through it, with the peaks."""
    sys.path.insert(0, str(ROOT))
    from gapscope.analysis.model.job import load_job
    from gapscope.analysis.results.distributed_breakdown import job_breakdown
    from gapscope.analysis.results.engines.choose import _open_cluster, parse_engine, using_engine
    from gapscope.analysis.results.engines.local import LocalEngine, worker_count

    job = load_job(folder)
    megabytes = sum(p.stat().st_size for p in folder.glob("*.json")) / 1e6
    t0 = time.perf_counter()
    spec = parse_engine(engine_name)
    engine = (LocalEngine(worker_count(len(job.ranks))) if spec.kind == "local"
              else _open_cluster(spec))
    for key in range(2 * engine.workers):  # every worker up, the analysis imported: start apart
        engine.submit(key, _warm, ())
    while engine.pending:
        engine.next_done()
    started = time.perf_counter() - t0
    stop, peak = threading.Event(), [0]
    sampler = threading.Thread(target=_worker_peak, args=(stop, peak), daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    with engine, using_engine(engine):
        result = job_breakdown(job)
        seconds = time.perf_counter() - t0
        workers = engine.workers
    stop.set()
    sampler.join()
    return {"engine": engine_name, "ranks": len(job.ranks), "megabytes": round(megabytes, 1),
            "workers": workers, "start_s": round(started, 2), "seconds": round(seconds, 2),
            "ranks_per_s": round(len(job.ranks) / seconds, 2),
            "mb_per_s_per_worker": round(megabytes / seconds / workers, 2),
            "driver_peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "worker_peak_mib": round(peak[0] / 2**20) if peak[0] else None,
            "job_step_ms": round(result.job_step_ms, 6)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="+", default=["1024x1", "64x20"], metavar="RANKSxMB",
                        help="jobs to make: ranks x megabytes per rank [1024x1 64x20]")
    parser.add_argument("--engines", nargs="+", default=["local", "dask", "ray"])
    parser.add_argument("--repeats", type=int, default=2, help="rounds over the engines [2]")
    parser.add_argument("--out", default="/tmp/gapscope-job-scale", help="where the jobs are made")
    parser.add_argument("--measure", nargs=2, metavar=("FOLDER", "ENGINE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(Path(args.measure[0]), args.measure[1])))
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} cores, load average {load:.1f} at the start")
    for spec in args.jobs:
        ranks, _, mb = spec.partition("x")
        folder = make_job(Path(args.out) / f"{ranks}x{mb}", int(ranks), float(mb))
        print(f"\n{ranks} ranks x {mb} MB ({folder})")
        print(f"{'engine':<8}{'workers':>8}{'start s':>9}{'wall s':>8}{'ranks/s':>9}"
              f"{'MB/s/worker':>13}{'driver MiB':>12}{'worker MiB':>12}")
        walls: dict[str, list[float]] = {}
        for _ in range(args.repeats):  # interleaved: each round runs every engine once
            for engine in args.engines:
                done = subprocess.run([sys.executable, __file__, "--measure", str(folder), engine],
                                      capture_output=True, text=True, env=env)
                if done.returncode:
                    print(f"{engine:<8} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
                    continue
                f = json.loads(done.stdout.strip().splitlines()[-1])
                walls.setdefault(engine, []).append(f["seconds"])
                print(f"{engine:<8}{f['workers']:>8}{f['start_s']:>9}{f['seconds']:>8}"
                      f"{f['ranks_per_s']:>9}{f['mb_per_s_per_worker']:>13}"
                      f"{f['driver_peak_mib']:>12}{f['worker_peak_mib'] or '-':>12}")
        if "local" in walls:
            base = min(walls["local"])
            for engine, times in walls.items():
                if engine != "local":
                    print(f"{engine}: best wall {min(times)} s against local's {base} s "
                          f"({100 * (min(times) / base - 1):+.0f} %, engine start apart)")
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
