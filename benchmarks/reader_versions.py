"""The torch trace reader of an old commit against this tree's, interleaved on one trace: each read in
its own process (plain and gzip), with json.load beside them and the machine's load printed."""
from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Run in a child whose PYTHONPATH is the tree under test: one read, its wall and CPU seconds and
# the child's peak RSS, as JSON on stdout.
_CHILD = r"""
import json, resource, sys, time
path, what = sys.argv[1], sys.argv[2]
if what == "json":
    load = lambda p: json.load(open(p, "rb"))
else:
    from gapscope.analysis.readers.torch_trace import read_torch_trace as load
def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
wall, cpu, child_cpu = time.perf_counter(), time.process_time(), children_cpu()
load(path)
wall = time.perf_counter() - wall
workers_rss = 0
try:  # this tree's chunk workers: their peak RSS, then stopped so that their CPU time is counted
    from gapscope.analysis.readers import chunk_pool
    for worker in chunk_pool._workers:
        status = open(f"/proc/{worker.process.pid}/status").read()
        workers_rss = max(workers_rss, int(status.split("VmHWM:")[1].split()[0]) / 1024)
    chunk_pool.discard()
except ImportError:
    pass
print(json.dumps({"wall": wall, "cpu": time.process_time() - cpu + children_cpu() - child_cpu,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "workers_rss_mb": workers_rss}))
"""


def export_commit(commit: str, into: Path) -> Path:
    """The commit's tree (git archive), unpacked under `into`."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True,
                             capture_output=True).stdout
    tree = into / commit
    tree.mkdir(parents=True)
    with tempfile.TemporaryFile() as handle:
        handle.write(archive)
        handle.seek(0)
        with tarfile.open(fileobj=handle) as tar:
            tar.extractall(tree, filter="data")
    return tree


def _one(tree: Path, path: Path, what: str, workers: int | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    if workers is not None:
        env["GAPSCOPE_READ_WORKERS"] = str(workers)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), what], cwd=tree, env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare_versions(path: Path, commit: str, rounds: int, gz: Path | None = None,
                     with_json: bool = True) -> str:
    """Rounds of (json.load, old reader, new reader) on `path` and on its gzip (`gz`, or one
    written here), interleaved. Without json.load for a trace too big for its memory."""
    with tempfile.TemporaryDirectory() as tmp:
        old = export_commit(commit, Path(tmp))
        if gz is None:
            gz = Path(tmp) / (path.name + ".gz")
            gz.write_bytes(gzip.compress(path.read_bytes(), compresslevel=6))
        # "new 1p": this tree's reader in one process (GAPSCOPE_READ_WORKERS=1), as the old one.
        readers = (("old", old, None), ("new 1p", REPO, 1), ("new", REPO, None))
        runs = {"json": []} if with_json else {}
        for suffix in ("", " gz"):
            runs.update({label + suffix: [] for label, _, _ in readers})
        load_before = os.getloadavg()
        for _ in range(rounds):
            if with_json:
                runs["json"].append(_one(REPO, path, "json"))
            for label, tree, workers in readers:
                runs[label].append(_one(tree, path, "gapscope", workers))
                runs[f"{label} gz"].append(_one(tree, gz, "gapscope", workers))
        load_after = os.getloadavg()
    size_mb = path.stat().st_size / 1e6
    json_s = statistics.median(r["wall"] for r in runs["json"]) if with_json else float("nan")
    json_cpu = statistics.median(r["cpu"] for r in runs["json"]) if with_json else float("nan")
    lines = [f"trace: {path} ({size_mb:.1f} MB plain); {rounds} interleaved rounds, each read in its "
             f"own process; old = {commit}, new = this tree",
             f"{'':10}{'wall s':>8}{'cpu s':>8}{'MB/s':>8}{'x json':>8}{'cpu x':>8}{'RSS MB':>8}"
             f"{'worker':>8}"]
    for label, found in runs.items():
        wall = statistics.median(r["wall"] for r in found)
        cpu = statistics.median(r["cpu"] for r in found)
        rss = max(r["rss_mb"] for r in found)
        worker_rss = max(r.get("workers_rss_mb", 0) for r in found)
        lines.append(f"{label:10}{wall:8.3f}{cpu:8.3f}{size_mb / wall:8.0f}{wall / json_s:8.2f}"
                     f"{cpu / json_cpu:8.2f}{rss:8.0f}{worker_rss or float('nan'):8.0f}")
    lines.append("medians; MB/s of the plain size (gzip rows too); x json: wall against json.load's, "
                 "cpu x: CPU seconds (the chunk workers' included) against its; RSS: the reading process's, "
                 "worker: a chunk worker's (nan: none ran), the largest of the rounds")
    lines.append(f"load average (1, 5, 15 min): {_load(load_before)} before, {_load(load_after)} after"
                 f" on {os.cpu_count()} CPUs: a loaded machine's figures are no result")
    return "\n".join(lines)


def _load(values) -> str:
    return ", ".join(f"{v:.1f}" for v in values)
