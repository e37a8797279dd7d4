"""Times the gapscope tab's /runs over a logdir of many small runs (copies of one real run): the
first answer the page gets (?wait=2), the time until no run is pending, and the process's RSS;
each request with the analysis pool's workers (one per core) and, interleaved, with none."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# In a fresh process: the plugin over the logdir, the page's first /runs, then /runs each
# 0.5 s until no run is pending; wall times and RSS (VmRSS) before and after.
_CHILD = r"""
import json, sys, time
from tensorboard.plugins import base_plugin
from werkzeug.test import Client
from gapscope.analysis.tensorboard.plugin.plugin import GapscopePlugin

def rss_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) / 1024

logdir, wait = sys.argv[1], sys.argv[2]
before = rss_mb()
app = GapscopePlugin(base_plugin.TBContext(logdir=logdir)).get_plugin_apps()["/runs"]
query = {} if wait == "all" else {"wait": wait}
start = time.perf_counter()
doc = json.loads(Client(app).get("/", query_string=query).get_data())
first, pending, polls = time.perf_counter() - start, doc["pending"], 0
while doc["pending"]:
    time.sleep(0.5)
    polls += 1
    doc = json.loads(Client(app).get("/", query_string=query).get_data())
print(json.dumps({"runs": len(doc["runs"]), "first_s": first, "pending_first": pending,
                  "all_s": time.perf_counter() - start, "polls": polls,
                  "analysed": sum(r["breakdown"] is not None for r in doc["runs"]),
                  "rss_before_mb": before, "rss_after_mb": rss_mb()}))
"""


def make_logdir(source: Path, copies: int, into: Path) -> Path:
    for i in range(copies):
        shutil.copytree(source, into / f"{source.name}-copy{i:03d}")
    return into


def one(logdir: Path, wait: str, workers: str | None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("GAPSCOPE_READ_WORKERS", None)
    if workers is not None:
        env["GAPSCOPE_READ_WORKERS"] = workers
    out = subprocess.run([sys.executable, "-c", _CHILD, str(logdir), wait], cwd=ROOT, env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("run", type=Path, help="a run directory to copy (e.g. a small mlp run)")
    parser.add_argument("--copies", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        logdir = make_logdir(args.run, args.copies, Path(tmp))
        size_mb = sum(p.stat().st_size for p in logdir.rglob("*") if p.is_file()) / 1e6
        print(f"{args.copies} copies of {args.run.name} ({size_mb:.0f} MB in all); "
              f"load average {load[0]:.1f} on {os.cpu_count()} CPUs before")
        print(f"{'request':14}{'workers':>9}{'first s':>9}{'pending':>9}{'all s':>8}{'RSS MB':>14}")
        for _ in range(args.rounds):
            for wait in ("2", "all"):
                for workers in ("1", None):  # the control first: no pool, one process
                    r = one(logdir, wait, workers)
                    label = "/runs?wait=2" if wait == "2" else "/runs (all)"
                    print(f"{label:14}{workers or 'cores':>9}{r['first_s']:9.2f}{r['pending_first']:9d}"
                          f"{r['all_s']:8.2f}{r['rss_before_mb']:7.0f}->{r['rss_after_mb']:.0f}")
    print("workers: 1 = analysed in the serving process (GAPSCOPE_READ_WORKERS=1), cores = the pool; "
          "first s: the first answer; pending: runs it listed as pending; all s: until none was; "
          "RSS: the serving process's before the plugin and after the last answer (not its workers')")
    return 0


if __name__ == "__main__":
    sys.exit(main())
