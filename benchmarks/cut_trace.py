"""Cuts a real torch.profiler trace down to a few consecutive steps: a test fixture small enough to commit.

    python -m benchmarks.cut_trace SRC DST [--first 3] [--steps 2] [--marker ProfilerStep#]

Keeps the metadata events, every host event that lies wholly inside steps first..first+steps-1
(their ProfilerStep spans, or the ranges whose name starts with --marker, by start time), and the device events and flow arrows that those
steps' runtime calls launched (matched by correlation id, since a kernel may run after its step's
host span has ended), in the file's order. DST is written gzipped when it ends in .gz."""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

from gapscope.analysis.readers.safe_files import open_stream, read_block
from gapscope.analysis.readers.torch_trace import DEVICE_CATEGORIES as _DEVICE
from gapscope.profilers.errors import EXIT_BAD_INPUT, GapscopeInputError
from gapscope.profilers.run_dir import write_atomic


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _read(path: str) -> dict:
    """The trace's JSON, through the reader's own checks: a regular file (not /dev/zero, which
    grew this to 5.5 GB), within the reader's size limits, gunzipped by its magic bytes."""
    with open_stream(path) as stream:
        blocks = []
        while block := read_block(stream, 1 << 20, path):
            blocks.append(block)
    document = json.loads(b"".join(blocks))
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise ValueError("not a torch profiler trace (no traceEvents list)")
    return document


def _write(path: str, document: dict) -> None:
    """Whole or not at all."""
    data = json.dumps(document, separators=(",", ":")).encode()
    write_atomic(Path(path), gzip.compress(data) if path.endswith(".gz") else data)


def cut(document: dict, first: int, count: int, marker: str = "ProfilerStep#") -> dict:
    """A copy of `document` (a trace's JSON) holding steps first..first+count-1 only: the
    ranges whose name starts with `marker` (a serving engine's own step range, say)."""
    events = [e for e in document["traceEvents"] if isinstance(e, dict)]
    if any(e.get("ph") == "X" and not (_number(e.get("ts")) and _number(e.get("dur", 0)))
           for e in events):
        raise ValueError("a complete event ('ph': 'X') without a numeric ts and dur")
    steps = sorted((e for e in events if e.get("ph") == "X"
                    and e.get("cat") not in _DEVICE
                    and str(e.get("name", "")).startswith(marker)), key=lambda e: e["ts"])
    if first < 0 or count < 1 or first + count > len(steps):
        raise ValueError(f"the trace has {len(steps)} {marker.rstrip('#')} spans: steps {first} to "
                         f"{first + count - 1} are not all there")
    start = steps[first]["ts"]
    end = steps[first + count - 1]["ts"] + steps[first + count - 1].get("dur", 0)
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") not in _DEVICE
            and start <= e["ts"] and e["ts"] + e.get("dur", 0) <= end]
    launched = {c for c in ((e.get("args") or {}).get("correlation") for e in host) if c is not None}
    kept = [e for e in events if e.get("ph") == "M"
            or (e.get("ph") == "X" and e.get("cat") in _DEVICE
                and (e.get("args") or {}).get("correlation") in launched)
            or (e.get("ph") in ("s", "f") and e.get("id") in launched)]
    # In the file's own order: a reader may depend on it (on a GPU, Kineto writes the autograd
    # thread's events before the main thread's layer ranges).
    chosen = {id(e) for e in kept + host}
    return {**document, "traceEvents": [e for e in events if id(e) in chosen]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cut_trace",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--first", type=int, default=3,
                        help="index of the first step kept (0: the trace's first)")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--marker", default="ProfilerStep#",
                        help="the start of the step ranges' name (default: ProfilerStep#)")
    args = parser.parse_args(argv)
    if not Path(args.dst).resolve().parent.is_dir():  # said before the read, not as a temp file
        print(f"cut_trace: {args.dst}: no folder {Path(args.dst).parent} to write it in", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        document = _read(args.src)
        result = cut(document, args.first, args.steps, args.marker)
        _write(args.dst, result)
    except GapscopeInputError as problem:  # the reader's own one-line refusals name the path
        print(f"cut_trace: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as problem:  # the output could not be written
        print(f"cut_trace: {args.dst}: {problem.strerror or problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ValueError as problem:  # json's errors are ValueErrors
        print(f"cut_trace: {args.src}: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{args.dst}: {len(result['traceEvents']):,} of {len(document['traceEvents']):,} events")
    return 0


if __name__ == "__main__":
    sys.exit(main())
