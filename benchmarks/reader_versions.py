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
    from analysis.readers.torch_trace import read_torch_trace as load
wall, cpu = time.perf_counter(), time.process_time()
load(path)
print(json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
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


def _one(tree: Path, path: Path, what: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", _CHILD, str(path), what], cwd=tree, env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare_versions(path: Path, commit: str, rounds: int) -> str:
    """Rounds of (json.load, old reader, new reader) on `path` and on its gzip, interleaved."""
    with tempfile.TemporaryDirectory() as tmp:
        old = export_commit(commit, Path(tmp))
        gz = Path(tmp) / (path.name + ".gz")
        gz.write_bytes(gzip.compress(path.read_bytes(), compresslevel=6))
        runs = {key: [] for key in ("json", "old", "new", "old gz", "new gz")}
        load_before = os.getloadavg()
        for _ in range(rounds):
            runs["json"].append(_one(REPO, path, "json"))
            for label, tree in (("old", old), ("new", REPO)):
                runs[label].append(_one(tree, path, "gapscope"))
                runs[f"{label} gz"].append(_one(tree, gz, "gapscope"))
        load_after = os.getloadavg()
    size_mb = path.stat().st_size / 1e6
    json_s = statistics.median(r["wall"] for r in runs["json"])
    json_cpu = statistics.median(r["cpu"] for r in runs["json"])
    lines = [f"trace: {path} ({size_mb:.1f} MB plain); {rounds} interleaved rounds, each read in its "
             f"own process; old = {commit}, new = this tree",
             f"{'':10}{'wall s':>8}{'cpu s':>8}{'MB/s':>8}{'x json':>8}{'cpu x':>8}{'RSS MB':>8}"]
    for label, found in runs.items():
        wall = statistics.median(r["wall"] for r in found)
        cpu = statistics.median(r["cpu"] for r in found)
        rss = max(r["rss_mb"] for r in found)
        lines.append(f"{label:10}{wall:8.3f}{cpu:8.3f}{size_mb / wall:8.0f}{wall / json_s:8.2f}"
                     f"{cpu / json_cpu:8.2f}{rss:8.0f}")
    lines.append("medians; MB/s of the plain size (gzip rows too); x json: wall against json.load's, "
                 "cpu x: CPU seconds against its; RSS: the largest of the rounds")
    lines.append(f"load average (1, 5, 15 min): {_load(load_before)} before, {_load(load_after)} after"
                 f" on {os.cpu_count()} CPUs: a loaded machine's figures are no result")
    return "\n".join(lines)


def _load(values) -> str:
    return ", ".join(f"{v:.1f}" for v in values)
