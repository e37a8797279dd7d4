"""Reads TensorFlow profiler XSpace files (.xplane.pb) into the neutral Trace, without importing TF."""
from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

from profilers.errors import GapscopeInputError, TraceFormatError
from analysis.trace import HOST_OP, KERNEL, MEMCPY, MEMSET, OTHER, STEP, Event, Trace

# A TF op event reads "<scope path>:<OpType>", e.g. "StatefulPartitionedCall/gapscope_forward/dense/MatMul:MatMul".
_TF_OP = re.compile(r"^[\w.\-/]+:[A-Z_][A-Za-z0-9_]*$")
# The op that hands the next batch to the step; the tf.data threads behind it run ahead (prefetch).
_GET_NEXT_OPS = ("IteratorGetNextOp::DoCompute",)


@functools.lru_cache(maxsize=1)
def _xplane_pb2():
    """Load TF's generated xplane_pb2 module by file path: importing the tensorflow package
    would cost seconds and gigabytes just to parse a file."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or spec.origin is None:
        raise GapscopeInputError("reading .xplane.pb files needs tensorflow installed")
    module_path = Path(spec.origin).parent / "tsl" / "profiler" / "protobuf" / "xplane_pb2.py"
    module_spec = importlib.util.spec_from_file_location("gapscope_xplane_pb2", module_path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def read_xplane(path: str | Path) -> Trace:
    path = Path(path)
    xplane_pb2 = _xplane_pb2()
    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(path.read_bytes())
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except Exception as exc:  # protobuf raises its own DecodeError type per backend
        raise TraceFormatError(f"{path}: not an XSpace profile ({exc})") from None

    planes = [p for p in space.planes if p.lines]
    if not planes:
        raise TraceFormatError(f"{path}: XSpace profile holds no events")
    # Times are kept relative to the earliest line: absolute nanoseconds in a float would
    # lose sub-microsecond precision.
    origin_ns = min(line.timestamp_ns for plane in planes for line in plane.lines)
    events: list[Event] = []
    for plane in planes:
        if plane.name.startswith("/host:"):
            events.extend(_host_events(plane, origin_ns))
        elif plane.name.startswith("/device:"):
            events.extend(_device_events(plane, origin_ns))
    metadata = {"base_time_ns": origin_ns, "hostnames": list(space.hostnames),
                "planes": [p.name for p in planes]}
    return Trace("xplane", str(path), events, metadata)


def _stat_reader(plane):
    names = {key: meta.name for key, meta in plane.stat_metadata.items()}

    def stats(xevent) -> dict:
        out = {}
        for stat in list(plane.event_metadata[xevent.metadata_id].stats) + list(xevent.stats):
            which = stat.WhichOneof("value")
            value = getattr(stat, which) if which else None
            if which == "ref_value":
                value = names.get(value, "")
            out[names.get(stat.metadata_id, "")] = value
        return out
    return stats


def _line_events(plane, origin_ns):
    for line in plane.lines:
        base_us = (line.timestamp_ns - origin_ns) / 1000.0
        for xevent in line.events:
            yield line, xevent, base_us + xevent.offset_ps / 1e6, xevent.duration_ps / 1e6


def _host_events(plane, origin_ns):
    stats_of = _stat_reader(plane)
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    for line, xevent, start_us, dur_us in _line_events(plane, origin_ns):
        name = names.get(xevent.metadata_id, "")
        track = f"host/{plane.id}/{line.id}"
        if line.name.startswith("tf_data") and name not in _GET_NEXT_OPS:
            # Input-pipeline work on tf.data's own threads overlaps the step; it only
            # costs step time through the IteratorGetNext wait, which is kept.
            continue
        if xevent.stats and "step_num" in (stats := stats_of(xevent)) and stats.get("_r") == 1:
            yield Event(name, STEP, start_us, dur_us, track, int(stats["step_num"]))
        elif _TF_OP.match(name) or name in _GET_NEXT_OPS:
            yield Event(name, HOST_OP, start_us, dur_us, track)
        elif not name.startswith("end: "):
            yield Event(name, OTHER, start_us, dur_us, track)


def _device_events(plane, origin_ns):
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    for line, xevent, start_us, dur_us in _line_events(plane, origin_ns):
        if not line.name.startswith("Stream"):
            continue
        name = names.get(xevent.metadata_id, "")
        lowered = name.lower()
        kind = MEMCPY if "memcpy" in lowered else MEMSET if "memset" in lowered else KERNEL
        yield Event(name, kind, start_us, dur_us, f"device/{plane.id}/{line.id}")
