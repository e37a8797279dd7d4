"""`breakdown --layers`, and `breakdown`, of a foreign record_shapes trace, plain and gzipped, this tree against an older commit, interleaved, each command in a fresh process: seconds, the process tree's peak RSS, the same layer FLOPs, and the matrix-product scan's share of decoding one chunk."""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import loop_trace
from benchmarks.reader_versions import export_commit
from benchmarks.steps_scale import REPO, interleaved, timed_breakdown


def layers_json(tree: Path, target: Path, layers: bool) -> tuple[float, float, dict]:
    """Seconds, the tree's peak RSS (MB) and the JSON of `breakdown TARGET [--layers]` by `tree`."""
    seconds, mb, printed = timed_breakdown(tree, target, *(["--layers"] if layers else []), output=True)
    return seconds, mb, json.loads(printed)


def layer_flops(doc: dict) -> dict:
    """Each layer's forward and backward GFLOP, wherever the JSON puts the layer rows."""
    found = {}

    def walk(node):
        if isinstance(node, dict):
            if "forward_gflop" in node and "name" in node:
                found[node["name"]] = (node["forward_gflop"], node.get("backward_gflop"))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(doc)
    return found


def scan_share(trace: Path, chunks: int = 5) -> tuple[float, float]:
    """Best-of-5 ms of decoding one 4 MB chunk of `trace` (whole events) with and without the
    matrix-product scan, alternated."""
    from gapscope.analysis.readers import torch_records, trace_chunks
    data = trace.read_bytes()
    start = data.index(b"[", data.index(b'"traceEvents"')) + 1
    cut = data.index(b"},\n{", start + (4 << 20)) + 1
    chunk = b"[" + data[start:cut] + b"]"
    times = {True: [], False: []}
    holds = torch_records.holds_products
    try:
        for _ in range(chunks):
            for scan in (True, False):
                torch_records.holds_products = holds if scan else (lambda names: False)
                begin = time.perf_counter()
                trace_chunks.decode_chunk(chunk)
                times[scan].append(time.perf_counter() - begin)
    finally:
        torch_records.holds_products = holds
    return min(times[True]) * 1e3, min(times[False]) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--against", default="HEAD~1", help="the older commit (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mb", type=float, default=200.0, help="the trace's size")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "gapscope-layers-read")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    base = args.dir / "shapes_base.pt.trace.json"
    if not base.exists():
        loop_trace.record(base, shapes=True)
    plain = args.dir / f"shapes_{args.steps}.pt.trace.json"
    if not plain.exists():
        loop_trace.stretch(base, plain, args.steps, args.mb)
    zipped = plain.with_name(plain.name + ".gz")
    if not zipped.exists():
        with open(plain, "rb") as source, gzip.open(zipped, "wb", compresslevel=6) as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
    with tempfile.TemporaryDirectory() as folder:
        trees = {"old": export_commit(args.against, Path(folder)), "new": REPO}
        docs = {}

        def measure(tree, target):
            path, layers = target
            seconds, mb, doc = layers_json(tree, path, layers)
            docs[tree, target] = layer_flops(doc) if layers else doc
            return seconds, mb
        targets = {f"{name}{' --layers' * layers}": (path, layers)
                   for name, path in (("plain", plain), ("gzip", zipped)) for layers in (True, False)}
        median, rss = interleaved(trees, targets, args.rounds, measure)
    print(f"breakdown --layers of a record_shapes loop trace, {plain.stat().st_size / 1e6:.0f} MB "
          f"({zipped.stat().st_size / 1e6:.0f} MB gzipped), {args.steps} steps; this tree against "
          f"{args.against}, {args.rounds} interleaved rounds")
    print(f"{'file':>16} {'old s':>8} {'new s':>8} {'new/old':>8} {'old MB':>8} {'new MB':>8}")
    for key in targets:
        print(f"{key:>16} {median['old', key]:>8.2f} {median['new', key]:>8.2f} "
              f"{median['new', key] / median['old', key]:>8.2f} {rss['old', key]:>8.0f} {rss['new', key]:>8.0f}")
    same = all(docs[trees["old"], t] == docs[trees["new"], t] for t in targets.values())
    flops = docs[trees["new"], targets["plain --layers"]]
    print(f"the same layer FLOPs, and the same breakdown without --layers, in both trees: {same} ({len(flops)} layers, "
          f"{sum((f or 0) + (b or 0) for f, b in flops.values()):.6f} GFLOP a step, forward and backward)")
    with_scan, without = scan_share(plain)
    print(f"one 4 MB chunk decoded: {with_scan:.1f} ms with the product scan, {without:.1f} ms without "
          f"(+{with_scan / without - 1:.0%})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
