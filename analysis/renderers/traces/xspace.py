"""A trace as an XSpace (.xplane.pb) for XProf's Trace Viewer: gapscope's steps and phases (and
its layers, where the run names them) as the first lines of the host plane, above one line per
thread of the trace; device streams on a plane per GPU. A TF profiler's own XSpace gets the step
and phase lines added."""
from __future__ import annotations

import math

import numpy as np

from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.trace import Trace
from gapscope.analysis.readers.xplane import LAYERS_LINE, PHASES_LINE  # how the reader knows such a file again
from gapscope.analysis.readers.xplane_proto import PlaneBuilder, xplane_pb2

# XProf's trace viewer shows the host threads of the plane named so, and GPUs from planes named
# with this prefix (the plane id is the device's number; XProf numbers their lines itself).
HOST_PLANE = "/host:CPU"
GPU_PLANE = "/device:GPU:{}"
# XProf orders the host plane's lines by id: gapscope's come first, so they sit above the ops.
# "Steps" is the name XProf gives the step line it derives on device planes.
STEPS_LINE = "Steps"
STEPS_ID, PHASES_ID, LAYERS_ID = 1, 2, 3
STEP_STAT = "step"
# What makes an event a step marker for XProf's step analysis (the Overview page's step times),
# as TF's own `train` TraceMe writes it: a root event (`_r`) carrying its step number. XProf only
# groups a marker with the ops nested in it on its own line, so the trace's step events carry it
# (a marker alone on gapscope's Steps line measured no step).
ROOT_STAT, STEP_NUM_STAT = "_r", "step_num"
# Times are whole nanoseconds, as the profilers record them: picoseconds would only keep the
# noise of µs since the epoch in a float, whose last bit there is about a nanosecond.
NS_PER_US, PS_PER_NS = 1_000, 1_000


def render(trace: Trace, timeline: PhaseTimeline, hostname: str, layers: list | None = None) -> bytes:
    """Times count from the trace's first whole microsecond: XProf adds an event's picoseconds to
    its line's nanoseconds in 64 bits, which absolute epoch times would overflow. `layers`: the
    run's layer spans (layer_times.layer_spans), a line below the phases where there are any."""
    space = xplane_pb2().XSpace()
    space.hostnames.append(hostname)
    columns = trace.columns
    origin_us = math.floor(float(columns.start_us.min())) if len(columns) else 0
    host = PlaneBuilder(space.planes.add(id=0, name=HOST_PLANE))
    if timeline.steps:
        _phase_lines(host, timeline, origin_us, (STEPS_ID, PHASES_ID))
    if timeline.steps and layers:
        _layer_line(host, timeline, layers, origin_us)
    lines = _trace_lines(space, host, trace, origin_us, LAYERS_ID if timeline.steps and layers else PHASES_ID)
    _mark_steps(host, lines, timeline, origin_us)
    return space.SerializeToString()


def with_phase_lines(data: bytes, timeline: PhaseTimeline, base_time_ns: int) -> bytes:
    """A TF profiler's XSpace with gapscope's step and phase lines added to its host plane, above
    TF's threads. `timeline` counts µs from `base_time_ns`, as gapscope's XPlane reader does. TF
    marks its steps itself (`train N`), so gapscope's step line adds no second marker."""
    space = xplane_pb2().XSpace()
    space.ParseFromString(data)
    plane = next((p for p in space.planes if p.name == HOST_PLANE), None)
    if plane is None:
        plane = space.planes.add(id=max((p.id for p in space.planes), default=-1) + 1,
                                 name=HOST_PLANE)
    # XProf draws lines in the order of their ids cut to 32 bits (unsigned), and two lines with
    # one such id are one to it: the two smallest free ones, where TF's hashed thread ids are
    # all but never.
    used = {line.id & 0xFFFFFFFF for line in plane.lines}
    free = [i for i in range(STEPS_ID, len(used) + STEPS_ID + 2) if i not in used][:2]
    host = PlaneBuilder(plane)
    _phase_lines(host, timeline, 0.0, (free[0], free[1]))
    for line in plane.lines[-2:]:
        line.timestamp_ns = base_time_ns
    return space.SerializeToString()


def _phase_lines(host: PlaneBuilder, timeline: PhaseTimeline, origin_us: float,
                 ids: tuple[int, int]) -> None:
    """A step line and a phase line whose five phases cover each traced step exactly once."""
    steps = host.plane.lines.add(id=ids[0], name=STEPS_LINE)
    phases = host.plane.lines.add(id=ids[1], name=PHASES_LINE)
    step_stat = host.stat(STEP_STAT)

    def add(line, name: str, start_us: float, end_us: float, number: int) -> None:
        # Both ends rounded, not the duration: adjacent phases then meet to the picosecond.
        start, end = int(_ps(start_us, origin_us)), int(_ps(end_us, origin_us))
        event = line.events.add(metadata_id=host.event_meta(name), offset_ps=start,
                                duration_ps=end - start)
        event.stats.add(metadata_id=step_stat, int64_value=number)

    for index, step in enumerate(timeline.steps):
        number = timeline.step_number(index)
        add(steps, f"step {number}", step.start_us, step.end_us, number)
        for start, end, phase in timeline.covering(index):
            add(phases, phase, start, end, number)


def _layer_line(host: PlaneBuilder, timeline: PhaseTimeline, layers: list, origin_us: float) -> None:
    """Each layer's spans on one line, with their step and phase as stats."""
    line = host.plane.lines.add(id=LAYERS_ID, name=LAYERS_LINE)
    step_stat, phase_stat = host.stat(STEP_STAT), host.stat("phase")
    for start_us, end_us, layer, phase, index in layers:
        start, end = int(_ps(start_us, origin_us)), int(_ps(end_us, origin_us))
        event = line.events.add(metadata_id=host.event_meta(layer), offset_ps=start,
                                duration_ps=end - start)
        event.stats.add(metadata_id=step_stat, int64_value=timeline.step_number(index))
        event.stats.add(metadata_id=phase_stat, str_value=phase)


def _mark_steps(host: PlaneBuilder, lines: dict, timeline: PhaseTimeline, origin_us: float) -> None:
    """The trace's own step events (ProfilerStep#N) as XProf's step markers, so its Overview
    and input-pipeline pages measure steps instead of saying "No step marker observed"."""
    wanted = {}
    for index, step in enumerate(timeline.steps):
        key = (host.event_meta(step.name), int(_ps(step.start_us, origin_us)))
        wanted.setdefault(step.track, {})[key] = timeline.step_number(index)
    step_num, root = host.stat(STEP_NUM_STAT), host.stat(ROOT_STAT)
    for track, keys in wanted.items():
        line = lines.get(track)
        for event in line.events if line is not None else ():
            number = keys.get((event.metadata_id, event.offset_ps))
            if number is not None:
                event.stats.add(metadata_id=step_num, int64_value=number)
                event.stats.add(metadata_id=root, int64_value=1)


def _ps(t_us, origin_us: float):
    """Picoseconds after the origin, of a time or an array of them."""
    return np.rint((t_us - origin_us) * NS_PER_US).astype(np.int64) * PS_PER_NS


def _trace_lines(space, host: PlaneBuilder, trace: Trace, origin_us: float, last_own_id: int) -> dict:
    """Every event of the trace on the line of its track ("host/<pid>/<tid>": a thread of the
    host plane; "device/<device>/<stream>": a stream of that GPU's plane), returned by track.
    Works on the columns, a line at a time, with no object per event: a large trace holds
    millions. The threads' lines are numbered after gapscope's own (`last_own_id`)."""
    columns = trace.columns
    starts = _ps(columns.start_us, origin_us)
    ends = _ps(columns.start_us + columns.dur_us, origin_us)
    # Several kinds share a track (a thread's ops and annotations): one line per track.
    tracks = list(dict.fromkeys(track for _, track in columns.wheres))
    track_index = {track: i for i, track in enumerate(tracks)}
    row_track = np.array([track_index[track] for _, track in columns.wheres],
                         np.int64)[columns.where]
    # By track, then by start, the longer of two events that start together first: the
    # order the profiler's own tools write, enclosing events before the ones inside them.
    order = np.lexsort((starts - ends, starts, row_track))
    bounds = np.searchsorted(row_track[order], np.arange(len(tracks) + 1))
    gpus: dict[str, PlaneBuilder] = {}
    lines = {}
    threads = 0
    for i, track in enumerate(tracks):
        side, _, place = track.partition("/")
        process, _, thread = place.partition("/")
        if side == "host":
            plane, threads = host, threads + 1
            # No "/" in the name: XProf groups lines named "<pool>/<n>" into thread pools.
            line = host.plane.lines.add(id=last_own_id + threads,
                                        name=f"thread {thread} (process {process})")
        else:
            if process not in gpus:
                gpus[process] = _gpu_plane(space, process, len(gpus))
            plane = gpus[process]
            line = plane.plane.lines.add(id=_number(thread, len(plane.plane.lines)),
                                         name=f"Stream #{thread}")
        lines[track] = line
        rows = order[bounds[i]:bounds[i + 1]]
        names, inverse = np.unique(columns.name[rows], return_inverse=True)
        metadata = np.array([plane.event_meta(columns.names[n]) for n in names], np.int64)[inverse]
        add = line.events.add
        for meta, start, end in zip(metadata.tolist(), starts[rows].tolist(), ends[rows].tolist()):
            add(metadata_id=meta, offset_ps=start, duration_ps=end - start)
    return lines


def _gpu_plane(space, device: str, count: int) -> PlaneBuilder:
    number = _number(device, count)
    return PlaneBuilder(space.planes.add(id=number, name=GPU_PLANE.format(number)))


def _number(text: str, fallback: int) -> int:
    """A device or stream number as the trace gave it, or a count where it gave a name."""
    return int(text) if text.isdigit() else fallback
