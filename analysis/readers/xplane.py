"""Reads TensorFlow and JAX profiler XSpace files (.xplane.pb) into the neutral Trace, without importing either."""
from __future__ import annotations

import bisect
import re
from collections import Counter
from pathlib import Path

import msgspec

from gapscope.profilers.errors import TraceFormatError
from gapscope.analysis.readers import safe_files, validate, xplane_memory
from gapscope.analysis.events.trace import (ANNOTATION, HOST_OP, KERNEL, MEMCPY, MEMSET, OTHER, RUNTIME, STEP,
                            Event, Trace)
from gapscope.analysis.readers.xplane_proto import xplane_pb2 as _xplane_pb2

# A TF op event reads "<scope path>:<OpType>", e.g. "StatefulPartitionedCall/gapscope_forward/dense/MatMul:MatMul".
_TF_OP = re.compile(r"^[\w.\-/]+:[A-Z_][A-Za-z0-9_]*$")
# The op that hands the next batch to the step; the tf.data threads behind it run ahead (prefetch).
_GET_NEXT_OPS = ("IteratorGetNextOp::DoCompute", "IteratorGetNextAsOptionalOp::DoCompute")
_TF_FUNCTION_STATS = ("tf_function_call", "tracing_count")
# `gapscope trace --out *.xplane.pb` of a torch trace (analysis.renderers.traces.xspace): a line of
# phases, and one line per thread of the torch trace, named so. The categories are not kept: the
# thread's ops are host ops, its CUDA/HIP calls runtime calls (without the correlation ids).
PHASES_LINE = "gapscope phases"
# gapscope's layers line: derived from the ops again, never read as events of the trace.
LAYERS_LINE = "gapscope layers"
_TORCH_THREAD = re.compile(r"^thread \S+ \(process \S+\)$")
_TORCH_RUNTIME = ("cuda", "hip")
_TORCH_SESSION = "PyTorch Profiler"
_JAX_CALLS = ("PjitFunction(", "PmapFunction(")
_JAX_MODULES = ("jit_", "pmap_")
# A device plane's line of steps (XProf's "Steps"), when the host events carry no step_num.
STEPS_LINE = "Steps"
_MEMCPY_SIZE = re.compile(r"\bsize:(\d+)")
# A stream line's activities, as the GPU tracers name its line: "Stream #7(MemcpyH2D,MemcpyD2H)".
_LINE_KINDS = re.compile(r"^Stream #\d+\s*\(([^)]*)\)")
# The plane stats that name the device ("AMD GPU - gfx942", "Tesla V100-SXM2-16GB").
_DEVICE_NAME_STATS = ("device_type_string", "device_name", "device_description")
# XLA puts the HloProto of every module it ran into this plane, one event metadata per module.
_METADATA_PLANE = "/host:metadata"
_HLO_PROTO_STAT = "Hlo Proto"


def read_xplane(path: str | Path) -> Trace:
    path = Path(path)
    data = safe_files.read_bytes(path)  # before the schema: a FIFO or a device fails here
    xplane_pb2 = _xplane_pb2()
    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(data)
    except Exception as exc:  # protobuf raises its own DecodeError type per backend
        raise TraceFormatError(f"{path}: not an XSpace profile ({exc})") from None
    del data

    try:
        return _trace_of(path, space)
    except (ValueError, TypeError, KeyError, OverflowError) as exc:
        # Bytes that happen to parse as protobuf (random or truncated files often do) give
        # fields that make no sense together: refused in one line.
        raise TraceFormatError(f"{path}: not an XSpace profile ({type(exc).__name__}: "
                               f"{str(exc)[:120]})") from None


def _trace_of(path: Path, space) -> Trace:
    planes = [p for p in space.planes if p.lines]
    hlo_protos = _hlo_protos(space)
    if not planes:
        raise TraceFormatError(f"{path}: XSpace profile holds no events")
    # Times are kept relative to the earliest line: absolute nanoseconds in a float would
    # lose sub-microsecond precision.
    origin_ns = min(line.timestamp_ns for plane in planes for line in plane.lines)
    events: list[Event] = []
    groups: dict[int, list] = {}  # group_id -> [start, end, track] of the host events in it
    device_steps: list[Event] = []
    devices = []
    memory: list = []  # the allocator's events (MemoryEvent), beside the events as read
    for plane in planes:
        if plane.name.startswith("/host:"):
            events.extend(_host_events(plane, origin_ns, groups, memory))
        elif plane.name.startswith("/device:"):
            events.extend(_device_events(plane, origin_ns, device_steps))
            device = _device_properties(plane)
            if device:
                devices.append(device)
    jax = _is_jax(events)
    if jax:
        events = _jax_annotations(events)
    modules, hlo_error = _hlo_modules(hlo_protos)
    longest, step_note = _longest_device_steps(device_steps)
    host_steps = [e for e in events if e.kind == STEP]
    if host_steps:
        # TF 2.21 stores an XSpace ungrouped (XProf groups it as it reads it): no Steps lines.
        step_note = _xprof_times_devices(host_steps, longest or _launched_device_steps(events, host_steps))
    else:
        # TF 2.x XSpaces may group steps only on the device's Steps line, or by the group_id
        # the profiler gave every host event of a step (as XProf reads them); a JAX loop by
        # the TraceAnnotation ranges around its training calls.
        events += longest or _group_steps(groups) or \
            (_jax_annotated_steps(events, modules) if jax and modules else [])
    events, dropped = _valid_times(events)
    if not events and not dropped:
        raise TraceFormatError(f"{path}: XSpace profile holds no host or device events")
    validate.refuse_mostly_garbage(path, len(events), dropped)
    events, step_problems = validate.check_steps(path, events, dropped)
    metadata = {"base_time_ns": origin_ns, "hostnames": list(space.hostnames),
                "planes": [p.name for p in planes], "hlo_protos": hlo_protos}
    if devices:
        metadata["device_properties"] = devices
    if jax:
        metadata["framework"] = "jax"
    if dropped:
        metadata["dropped_events"] = dict(dropped)
    if step_problems:
        metadata["step_problems"] = step_problems
    if step_note:
        metadata["step_note"] = step_note
    if memory:
        metadata["memory_events"] = memory
    if hlo_error:
        metadata["hlo_error"] = hlo_error
    if modules is not None:
        # Parsed once here; Run.hlo hands these to the kernel view instead of parsing again.
        metadata["hlo_modules"] = modules
        events += _framework_ops_of_thunks(events, modules)
    return Trace("xplane", str(path), events, metadata)


def _hlo_modules(hlo_protos: dict):
    """The profile's HLO modules, or None, and why they could not be read."""
    if not hlo_protos:
        return None, None
    from gapscope.analysis.readers.hlo_proto import read_hlo_protos
    try:
        return read_hlo_protos(hlo_protos), None
    except TraceFormatError as exc:
        return None, str(exc)


def _jax_annotations(events: list[Event]) -> list[Event]:
    """A JAX trace's user ranges (jax.profiler.TraceAnnotation, a TraceMe of the user's code)
    as annotations: the host events around a jitted call (PjitFunction(f)) on its thread that are
    neither a call themselves nor a Python frame of JAX's Python tracer ($file.py:10 f). JAX's
    own host events lie inside the calls, so none encloses one."""
    calls: dict[str, list[float]] = {}
    for e in events:
        if e.kind == OTHER and e.name.startswith(_JAX_CALLS):
            calls.setdefault(e.track, []).append(e.start_us)
    for starts in calls.values():
        starts.sort()
    found = []
    for e in events:
        starts = calls.get(e.track)
        if starts and e.kind == OTHER and not e.name.startswith(_JAX_CALLS) and not e.name.startswith("$"):
            i = bisect.bisect_left(starts, e.start_us)
            if i < len(starts) and starts[i] < e.end_us:
                e = msgspec.structs.replace(e, kind=ANNOTATION)
        found.append(e)
    return found


def _jax_annotated_steps(events: list[Event], modules) -> list[Event]:
    """A JAX loop's steps where it marked them with TraceAnnotation (not StepTraceAnnotation):
    the annotation, of those repeated around calls that ran gradient ops, that runs most often
    (the outermost of equals), one step each, numbered in order. None where no range does."""
    backward = sorted(e.start_us for e in events if e.kind == HOST_OP and e.hlo_op
                      and (op := modules.find(e.hlo_module, e.hlo_op)) is not None
                      and "backward" in op.phases)
    if not backward:
        return []
    by_name: dict[str, list[Event]] = {}
    for e in events:
        if e.kind == ANNOTATION and e.track.startswith("host"):
            by_name.setdefault(e.name, []).append(e)
    candidates = []
    for name, ranges in by_name.items():
        ranges.sort(key=lambda e: e.start_us)
        serial = all(b.start_us >= a.end_us for a, b in zip(ranges, ranges[1:]))
        each = all(bisect.bisect_left(backward, r.start_us) < len(backward)
                   and backward[bisect.bisect_left(backward, r.start_us)] < r.end_us for r in ranges)
        if len(ranges) >= 2 and serial and each:
            candidates.append((len(ranges), sum(r.dur_us for r in ranges), name))
    if not candidates:
        return []
    _, _, name = max(candidates)
    return [Event(name, STEP, r.start_us, r.dur_us, r.track, i) for i, r in enumerate(by_name[name])]


def _valid_times(events: list[Event]) -> tuple[list[Event], Counter]:
    """Events with a finite, non-negative, plausible start and duration; the rest counted."""
    dropped: Counter = Counter()
    kept = []
    for e in events:
        problem = validate.time_problem(e.start_us, e.dur_us)
        if problem:
            dropped[problem] += 1
        else:
            kept.append(e)
    return kept, dropped


def _framework_ops_of_thunks(events: list[Event], modules) -> list[Event]:
    """Under XLA the trace names HLO ops, not the TF ops inside the name scopes that mark
    phases. The profile's own HloProto says which TF op each HLO op was compiled from: add
    that op (`<op_name>:<op_type>`, as TF op events read; JAX's name stack) as a range over
    each thunk."""
    added = []
    for e in events:
        if e.hlo_op and e.track.startswith("host"):
            op = modules.find(e.hlo_module, e.hlo_op)
            if op is not None and op.framework_op:
                added.append(Event(op.framework_op, ANNOTATION, e.start_us, e.dur_us, e.track))
    return added


def _hlo_protos(space) -> dict[str, bytes]:
    """Serialized HloProto per module name, as XLA stored them in the profile: the link from
    a thunk's `hlo_op` to the framework op names (and so the phase) it was compiled from."""
    found = {}
    for plane in space.planes:
        if plane.name != _METADATA_PLANE:
            continue
        stat_ids = {key for key, meta in plane.stat_metadata.items() if meta.name == _HLO_PROTO_STAT}
        for meta in plane.event_metadata.values():
            for stat in meta.stats:
                if stat.metadata_id in stat_ids and stat.bytes_value:
                    # Names read "<module>(<program id>)"; thunks name the module alone.
                    found[meta.name.rpartition("(")[0] or meta.name] = stat.bytes_value
    return found


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


def _host_events(plane, origin_ns, groups: dict | None = None, memory: list | None = None):
    stats_of = _stat_reader(plane)
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    with_stats = {key for key, meta in plane.event_metadata.items() if meta.stats}
    torch_view = any(line.name == PHASES_LINE for line in plane.lines)
    for line, xevent, start_us, dur_us in _line_events(plane, origin_ns):
        name = names.get(xevent.metadata_id, "")
        track = f"host/{plane.id}/{line.id}"
        if line.name == LAYERS_LINE:
            continue
        torch_thread = torch_view and _TORCH_THREAD.match(line.name)
        if line.name.startswith("tf_data") and name not in _GET_NEXT_OPS:
            # Input-pipeline work on tf.data's own threads overlaps the step; it only
            # costs step time through the IteratorGetNext wait, which is kept.
            continue
        stats = stats_of(xevent) if xevent.stats or xevent.metadata_id in with_stats else {}
        if name in xplane_memory.NAMES:
            found = xplane_memory.memory_event(name, stats, start_us, track)
            if memory is not None and found is not None:
                memory.append(found)
        group = stats.get("group_id")
        if groups is not None and isinstance(group, int) and not line.name.startswith("tf_data"):
            span = groups.setdefault(group, [start_us, start_us + dur_us, track])
            span[0], span[1] = min(span[0], start_us), max(span[1], start_us + dur_us)
        number = stats.get("step_num", stats.get("iter_num"))
        if number is not None and stats.get("_r") == 1:
            yield Event(name, STEP, start_us, dur_us, track, _int_or_none(number))
        elif "hlo_op" in stats:
            # An XLA thunk: on the CPU these are the compiled program's kernels.
            yield Event(name, HOST_OP, start_us, dur_us, track, hlo_op=str(stats["hlo_op"]),
                        hlo_module=str(stats.get("hlo_module") or "") or None)
        elif "tf_function_call" in stats:
            # tf.function entry: says whether this call traced (built a graph) and how often.
            kept = {k: stats[k] for k in _TF_FUNCTION_STATS if k in stats}
            yield Event(name, OTHER, start_us, dur_us, track, stats=kept)
        elif "correlation_id" in stats:
            # A CUDA API call (CUPTI): the id links it to the kernel or copy it queued.
            yield Event(name, RUNTIME, start_us, dur_us, track,
                        correlation=_int_or_none(stats["correlation_id"]))
        elif torch_thread and name.startswith(_TORCH_RUNTIME):
            yield Event(name, RUNTIME, start_us, dur_us, track)
        elif torch_thread and not name.startswith(_TORCH_SESSION) or _TF_OP.match(name) \
                or name in _GET_NEXT_OPS:
            yield Event(name, HOST_OP, start_us, dur_us, track)
        elif not name.startswith("end: "):
            yield Event(name, OTHER, start_us, dur_us, track)


def _device_events(plane, origin_ns, steps: list | None = None):
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    stats_of = _stat_reader(plane)
    with_stats = {key for key, meta in plane.event_metadata.items() if meta.stats}
    for line, xevent, start_us, dur_us in _line_events(plane, origin_ns):
        name = names.get(xevent.metadata_id, "")
        if line.name == STEPS_LINE and steps is not None:
            stats = stats_of(xevent) if xevent.stats or xevent.metadata_id in with_stats else {}
            number = _int_or_none(stats.get("step_num", stats.get("group_id", name)))
            steps.append(Event(name, STEP, start_us, dur_us, f"device/{plane.id}/{line.id}", number))
            continue
        if not line.name.startswith("Stream"):
            continue
        stats = stats_of(xevent) if xevent.stats or xevent.metadata_id in with_stats else {}
        kind = _device_kind(line.name, name, stats)
        correlation = stats.get("correlation_id")
        yield Event(name, kind, start_us, dur_us, f"device/{plane.id}/{line.id}",
                    correlation=_int_or_none(correlation), nbytes=_copy_size(stats),
                    hlo_op=str(stats["hlo_op"]) if stats.get("hlo_op") else None,
                    hlo_module=str(stats["hlo_module"]) if stats.get("hlo_module") else None)


def _device_kind(line_name: str, name: str, stats: dict) -> str:
    """Kernel, copy or set, by what the profiler said of the event (its details stat), else by
    its line ("Stream #3(MemcpyOther)": the ROCm tracer's lines hold one kind of activity),
    and by the event's name only where neither says: a JAX copy is `CopyDeviceToDevice`."""
    if "memcpy_details" in stats:
        return MEMCPY
    if "memset_details" in stats:
        return MEMSET
    if "kernel_details" in stats:
        return KERNEL
    kinds = _LINE_KINDS.search(line_name)
    if kinds:
        activities = {k.strip().lower() for k in kinds.group(1).split(",")}
        if activities and all(a.startswith("memcpy") for a in activities):
            return MEMCPY
        if activities and all(a.startswith("memset") for a in activities):
            return MEMSET
        if activities and all(a in ("kernel", "compute") for a in activities):
            return KERNEL
    lowered = name.lower()
    return MEMCPY if "memcpy" in lowered else MEMSET if "memset" in lowered else KERNEL


def _is_jax(events: list[Event]) -> bool:
    """An XSpace JAX wrote: its jitted calls' TraceMes (PjitFunction(f)) or XLA modules named
    jit_f / pmap_f (TF names its modules a_inference_… or cluster_…)."""
    return any(e.name.startswith(_JAX_CALLS) or (e.hlo_module or "").startswith(_JAX_MODULES)
               for e in events)


def _longest_device_steps(steps: list[Event]) -> tuple[list[Event], str | None]:
    """One step per group from the device planes' Steps lines: the longest device's span, as
    XProf times a step (StepDetails::StepTime, the longest device step marker). Under
    MirroredStrategy every GPU plane has its own Steps line, each the span of that GPU's work
    in the group, and a replica that ends later makes the step longer. Also a note where that
    differs from the first device's Steps line alone."""
    if not steps:
        return [], None
    planes = list(dict.fromkeys(s.track.split("/")[1] for s in steps))
    first = [s for s in steps if s.track.split("/")[1] == planes[0]]
    by_group: dict[int, Event] = {}
    for s in steps:
        if s.step_num is not None and (s.step_num not in by_group or s.dur_us > by_group[s.step_num].dur_us):
            by_group[s.step_num] = s
    # A step with no number is kept from the first device only (it cannot be matched).
    found = sorted(list(by_group.values()) + [s for s in first if s.step_num is None],
                   key=lambda s: s.start_us)
    longer = sum(1 for s in found if s.track.split("/")[1] != planes[0])
    if not longer:
        return found, None
    ms = sum(s.dur_us for s in found) / len(found) / 1000
    first_ms = sum(s.dur_us for s in first) / len(first) / 1000
    return found, (f"steps from the Steps lines of {len(planes)} devices: each is the longest device's "
                   f"span of its step ({longer} of {len(found)} from a device other than the first), as "
                   f"XProf times a step; the first device's line alone averages {first_ms:.3f} ms against "
                   f"{ms:.3f} ms")


def _xprof_times_devices(host_steps: list[Event], device_steps: list[Event]) -> str | None:
    """Where the host marks steps and the devices ran work in them, gapscope's steps are the
    host's (its phases are the host's ranges inside them, device work counts to its launch),
    while XProf times a GPU profile's steps by the devices alone (ConvertXSpaceToOpStats ignores
    host step markers when there is a device): the note says where the two differ."""
    if not device_steps:
        return None
    host_ms = sum(s.dur_us for s in host_steps) / len(host_steps) / 1000
    device_ms = sum(s.dur_us for s in device_steps) / len(device_steps) / 1000
    if abs(device_ms - host_ms) <= 0.005 * host_ms:
        return None
    return (f"steps are the host's step ranges (mean {host_ms:.3f} ms); XProf times them by their "
            f"device work instead, the longest device's span of each step's work (mean "
            f"{device_ms:.3f} ms over {len(device_steps)} steps)")


def _launched_device_steps(events: list[Event], host_steps: list[Event]) -> list[Event]:
    """The device steps XProf derives when it groups an XSpace itself: a device event is in the
    host step whose range holds its launch (the correlation id's runtime call), each device's
    step spans its events in it (DeriveStepEventsFromGroups), and a step is the longest device's.
    XProf links launches on other threads to the step through the profiler's context ids; a
    launch inside the step's time range is taken as the same link."""
    steps = sorted(host_steps, key=lambda s: s.start_us)
    starts = [s.start_us for s in steps]
    step_of: dict[int, int] = {}
    for e in events:
        if e.kind == RUNTIME and e.correlation is not None:
            i = bisect.bisect_right(starts, e.start_us) - 1
            if i >= 0 and e.start_us < steps[i].end_us:
                step_of[e.correlation] = i
    spans: dict[tuple[int, str], list[float]] = {}
    for e in events:
        if e.kind in (KERNEL, MEMCPY, MEMSET) and e.correlation in step_of:
            key = (step_of[e.correlation], e.track.split("/")[1])
            span = spans.setdefault(key, [e.start_us, e.end_us, e.track])
            span[0], span[1] = min(span[0], e.start_us), max(span[1], e.end_us)
    longest: dict[int, Event] = {}
    for (i, _), (start, end, track) in spans.items():
        if i not in longest or end - start > longest[i].dur_us:
            longest[i] = Event(steps[i].name, STEP, start, end - start, track, steps[i].step_num)
    return [longest[i] for i in sorted(longest)]


def _group_steps(groups: dict) -> list[Event]:
    """One step per group_id: the span of the host events the profiler put in it."""
    return [Event(f"group {group}", STEP, start, end - start, track, group)
            for group, (start, end, track) in sorted(groups.items())]


def _copy_size(stats: dict) -> int | None:
    """A copy's bytes from its memcpy_details stat ("size:112 dest:4 async:0")."""
    details = stats.get("memcpy_details")
    if isinstance(details, bytes):
        details = details.decode(errors="replace")
    found = _MEMCPY_SIZE.search(details) if isinstance(details, str) else None
    return int(found.group(1)) if found else None


def _device_properties(plane) -> dict | None:
    """What the device plane says of its device, as Kineto's deviceProperties name it."""
    names = {key: meta.name for key, meta in plane.stat_metadata.items()}
    stats = {}
    for stat in plane.stats:
        which = stat.WhichOneof("value")
        if which:
            value = getattr(stat, which)
            # XLA's GPU tracers store the device's name as a reference to a stat metadata
            # entry named "AMD GPU - gfx942" (XPlaneBuilder's interned strings), or as bytes.
            if which == "ref_value":
                value = names.get(value)
            elif which == "bytes_value":
                value = value.decode(errors="replace")
            stats[names.get(stat.metadata_id, "")] = value
    name = next((stats[k].strip() for k in _DEVICE_NAME_STATS
                 if isinstance(stats.get(k), str) and stats[k].strip()), None)
    if name is None:
        return None
    found = {"id": plane.id, "name": name}
    for stat, key in (("compute_cap_major", "computeMajor"), ("compute_cap_minor", "computeMinor"),
                      ("memory_size", "totalGlobalMem"), ("core_count", "numSms")):
        value = stats.get(stat)
        if isinstance(value, int):
            found[key] = value
    return found


def _int_or_none(value) -> int | None:
    """A stat that should be an integer; a string or float of garbage reads as None."""
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (str, bytes)):
        return validate.step_number(value.decode(errors="replace") if isinstance(value, bytes)
                                    else value)
    return None
