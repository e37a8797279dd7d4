"""Reads torch.profiler Chrome-trace JSON (.pt.trace.json[.gz]) into the neutral Trace."""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import msgspec

from profilers.errors import TraceFormatError
from analysis.trace import (ANNOTATION, HOST_OP, KERNEL, MEMCPY, MEMSET, OTHER, RUNTIME, STEP,
                            Event, Trace)


class _Args(msgspec.Struct):
    # Only the fields an analyzer needs: decoding skips every other key without building it.
    correlation: int | None = None
    nbytes: int | None = msgspec.field(default=None, name="bytes")  # gpu_memcpy / gpu_memset


class _RawEvent(msgspec.Struct):
    ph: str = ""
    name: str = ""
    cat: str = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: int | str = 0
    tid: int | str = 0
    args: _Args | None = None


class _RawTrace(msgspec.Struct):
    traceEvents: list[_RawEvent]
    deviceProperties: list[dict] = []
    baseTimeNanoseconds: int | None = None


_DECODER = msgspec.json.Decoder(_RawTrace)

_DEVICE_CATEGORIES = {"kernel": KERNEL, "gpu_memcpy": MEMCPY, "gpu_memset": MEMSET,
                      "gpu_user_annotation": ANNOTATION}
_HOST_CATEGORIES = {"cpu_op": HOST_OP, "user_annotation": ANNOTATION,
                    "cuda_runtime": RUNTIME, "cuda_driver": RUNTIME}
# Ranges torch itself emits once per step; gapscope's own step ranges take the same role.
_STEP_PREFIXES = ("ProfilerStep#", "gapscope/step#")


def read_torch_trace(path: str | Path) -> Trace:
    path = Path(path)
    try:
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        raw = _DECODER.decode(data)
    except (msgspec.DecodeError, zlib.error, EOFError, gzip.BadGzipFile) as exc:
        # BadGzipFile is an OSError: it must be caught before the plain read failure below.
        raise TraceFormatError(f"{path}: not a torch profiler trace ({exc})") from None
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None

    events = []
    for raw_event in raw.traceEvents:
        if raw_event.ph != "X":
            continue
        events.append(_to_event(raw_event))
    if not events:
        raise TraceFormatError(f"{path}: torch profiler trace holds no complete events")
    metadata = {"device_properties": raw.deviceProperties,
                "base_time_ns": raw.baseTimeNanoseconds}
    return Trace("torch", str(path), events, metadata)


def _to_event(raw: _RawEvent) -> Event:
    correlation = raw.args.correlation if raw.args is not None else None
    cat = raw.cat
    if cat in _DEVICE_CATEGORIES:
        nbytes = raw.args.nbytes if raw.args is not None else None
        return Event(raw.name, _DEVICE_CATEGORIES[cat], raw.ts, raw.dur,
                     f"device/{raw.pid}/{raw.tid}", None, correlation, nbytes)
    kind = _HOST_CATEGORIES.get(cat, OTHER)
    step_num = None
    if kind == ANNOTATION and raw.name.startswith(_STEP_PREFIXES):
        kind = STEP
        step_num = _step_number(raw.name)
    return Event(raw.name, kind, raw.ts, raw.dur, f"host/{raw.pid}/{raw.tid}", step_num, correlation)


def _step_number(name: str) -> int | None:
    tail = name.rpartition("#")[2]
    return int(tail) if tail.isdigit() else None
