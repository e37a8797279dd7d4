"""Cuts a real torch.profiler trace down to a few consecutive steps: a test fixture small enough to commit.

    python -m benchmarks.cut_trace SRC DST [--first 3] [--steps 2]

Keeps the metadata events, every host event that lies wholly inside steps first..first+steps-1
(their ProfilerStep spans, by start time), and the device events and flow arrows that those
steps' runtime calls launched (matched by correlation id, since a kernel may run after its step's
host span has ended). DST is written gzipped when it ends in .gz."""
from __future__ import annotations

import argparse
import gzip
import json
import sys

from analysis.readers.torch_trace import DEVICE_CATEGORIES as _DEVICE


def _open(path: str, mode: str):
    return gzip.open(path, mode) if path.endswith(".gz") else open(path, mode)


def cut(document: dict, first: int, count: int) -> dict:
    """A copy of `document` (a trace's JSON) holding steps first..first+count-1 only."""
    events = document["traceEvents"]
    steps = sorted((e for e in events if e.get("ph") == "X"
                    and str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    if first < 0 or count < 1 or first + count > len(steps):
        raise ValueError(f"the trace has {len(steps)} ProfilerStep spans: steps {first} to "
                         f"{first + count - 1} are not all there")
    start = steps[first]["ts"]
    end = steps[first + count - 1]["ts"] + steps[first + count - 1]["dur"]
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") not in _DEVICE
            and start <= e["ts"] and e["ts"] + e.get("dur", 0) <= end]
    launched = {c for c in ((e.get("args") or {}).get("correlation") for e in host) if c is not None}
    kept = [e for e in events if e.get("ph") == "M"
            or (e.get("ph") == "X" and e.get("cat") in _DEVICE
                and (e.get("args") or {}).get("correlation") in launched)
            or (e.get("ph") in ("s", "f") and e.get("id") in launched)]
    ordered = sorted(kept + host, key=lambda e: (e.get("ph") != "M", e.get("ts", 0)))  # metadata first
    return {**document, "traceEvents": ordered}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cut_trace",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--first", type=int, default=3,
                        help="index of the first step kept (0: the trace's first)")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        with _open(args.src, "rt") as handle:
            document = json.load(handle)
        result = cut(document, args.first, args.steps)
    except (OSError, ValueError, KeyError, TypeError) as problem:  # json's errors are ValueErrors
        print(f"cut_trace: {args.src}: {problem}", file=sys.stderr)
        return 1
    with _open(args.dst, "wt") as handle:
        json.dump(result, handle, separators=(",", ":"))
    print(f"{args.dst}: {len(result['traceEvents']):,} of {len(document['traceEvents']):,} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
