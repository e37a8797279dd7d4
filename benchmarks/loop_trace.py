"""Writes real-shaped torch traces of any size and step count: a real DataLoader loop's events, repeated with shifted times."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import msgspec

STEP_PREFIX = "ProfilerStep#"
# Timestamps as Kineto writes them: microseconds with three decimals (nanoseconds).
_DIGITS = 3


def record(out: Path, steps: int = 70, shapes: bool = False) -> Path:
    """A real trace, `out`: the PyTorch tutorials' loop (DataLoader, forward, loss, backward,
    Adam step) for `steps` iterations under torch.profiler on the CPU, prof.step() each (the
    last `steps` - 2 recorded, each a ProfilerStep#N), and no gapscope mark in it, as the
    59 MB trace of the issue-46 measurements was made. `shapes`: recorded with record_shapes,
    with_stack and with_modules, as a user recording their model's layers does (every op's
    Input Dims, the `nn.Module: …` ranges)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    samples = 64 * steps
    loader = DataLoader(TensorDataset(torch.randn(samples, 100), torch.randint(0, 10, (samples,))),
                        batch_size=64, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(100, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    optimizer = torch.optim.AdamW(model.parameters(), foreach=False)  # an op per parameter, as many loops
    loss_fn = torch.nn.CrossEntropyLoss()  # (torch.nn.functional is not in the torch floor's snapshot)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=1, warmup=1, active=steps - 2),
                                record_shapes=shapes, with_stack=shapes, with_modules=shapes) as prof:
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss_fn(model(inputs), targets).backward()
            optimizer.step()
            prof.step()
    out.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out))
    return out


def stretch(base: Path, out: Path, steps: int, size_mb: float) -> Path:
    """`out`: `base`'s events between its first and last step, repeated with their times
    shifted by the loop's span (correlation and flow ids made unique per copy) until the file
    holds `size_mb` MB, then cut into `steps` equal ProfilerStep ranges. Traces of one size and
    different step counts then hold the same events: only the steps differ."""
    with open(base, "rb") as handle:
        document = json.load(handle)
    events = document.pop("traceEvents")
    is_mark = [e.get("ph") == "X" and str(e.get("name", "")).startswith(STEP_PREFIX) for e in events]
    marks = [e for e, mark in zip(events, is_mark) if mark]
    # The loop's span: its steps where it has some, else all of its timed events.
    spanned = marks or [e for e in events if e.get("ph") == "X" and "ts" in e]
    first = min(float(e["ts"]) for e in spanned)
    last = max(float(e["ts"]) + float(e.get("dur", 0)) for e in spanned)
    span = last - first
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e, mark in zip(events, is_mark) if e.get("ph") != "M" and not mark and "ts" in e
            and first <= float(e["ts"]) < last]
    like = marks[0] if marks else {"ph": "X", "cat": "user_annotation", "pid": spanned[0].get("pid", 0),
                                   "tid": spanned[0].get("tid", 0)}
    ids = max([int(e.get("id", 0)) for e in body if isinstance(e.get("id"), int)]
              + [int(e["args"].get("correlation", 0)) for e in body
                 if isinstance(e.get("args"), dict) and isinstance(e["args"].get("correlation"), int)]
              + [0]) + 1
    width = None  # each step's length, once the events' span is known
    encode = msgspec.json.Encoder().encode
    mark_bytes = len(encode(_mark(like, steps, first, span / steps))) * steps + 2 * steps
    target = int(size_mb * 1e6)
    head = json.dumps(document)[:-1].encode() + (b', ' if document else b'') + b'"traceEvents": ['
    with open(out, "wb") as handle:
        handle.write(head)
        for event in meta:
            handle.write(encode(event) + b",\n")
        written, copy, end = handle.tell(), 0, first
        while written + mark_bytes < target:
            shift = copy * span
            for event in body:
                moved = dict(event, ts=round(float(event["ts"]) + shift, _DIGITS))
                if isinstance(event.get("id"), int):
                    moved["id"] = event["id"] + copy * ids
                args = event.get("args")
                if isinstance(args, dict) and isinstance(args.get("correlation"), int):
                    moved["args"] = dict(args, correlation=args["correlation"] + copy * ids)
                line = encode(moved) + b",\n"
                handle.write(line)
                written += len(line)
                end = max(end, moved["ts"] + float(event.get("dur", 0)))
                if written + mark_bytes >= target:
                    break
            copy += 1
        width = (end - first) / steps
        lines = [encode(_mark(like, number, first, width)) for number in range(steps)]
        handle.write(b",\n".join(lines) + b"\n]}\n")
    return out


def _mark(like: dict, number: int, start: float, width: float) -> dict:
    """Step `number` of those `width` µs long from `start`: its end rounds to where the next
    one starts, so that steps neither overlap nor leave gaps."""
    begin = round(start + number * width, _DIGITS)
    return dict(like, name=f"{STEP_PREFIX}{number}", ts=begin,
                dur=round(round(start + (number + 1) * width, _DIGITS) - begin, _DIGITS), args={})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, help="the trace to write (.pt.trace.json)")
    parser.add_argument("--base", type=Path, help="a real trace to repeat (default: record one)")
    parser.add_argument("--loop-steps", type=int, default=70, help="iterations of the recorded loop")
    parser.add_argument("--steps", type=int, default=1_000)
    parser.add_argument("--mb", type=float, default=800.0)
    args = parser.parse_args(argv)
    base = args.base or record(args.out.with_name("loop_base.pt.trace.json"), args.loop_steps)
    stretch(base, args.out, args.steps, args.mb)
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB, {args.steps} steps, from {base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
