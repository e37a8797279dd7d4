"""Top allocation sites: the ops that allocated the most bytes a step, named by the trace or by the op around each event."""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from gapscope.analysis.events.intervals import latest_covering
from gapscope.analysis.events.memory_event import MemoryEvent
from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.trace import HOST_OP, Trace

UNNAMED = "(no op around it)"


def enclosing_ops(events: list[MemoryEvent], trace: Trace) -> list[str | None]:
    """For each event, the innermost host op running on its thread at its instant (torch's
    memory events name no op: the op that allocated is the one around them). Read from the
    trace's columns: only the ops that hold one of the events' instants become tuples."""
    columns = trace.columns
    names: list[str | None] = [None] * len(events)
    by_track: dict[str, list[int]] = defaultdict(list)
    for i, event in enumerate(events):
        by_track[event.track].append(i)
    for where, (kind, track) in enumerate(columns.wheres):
        indices = by_track.get(track)
        if kind != HOST_OP or not indices:
            continue
        indices.sort(key=lambda i: events[i].ts_us)
        times = [events[i].ts_us for i in indices]
        rows = np.flatnonzero(columns.where == where)
        starts = columns.start_us[rows]
        ends = starts + columns.dur_us[rows]
        # An op that holds no event's instant names none (a 1,000-step trace's 1.5 M ops each
        # made a tuple and a step of the sweep for 76k events).
        holds = np.searchsorted(times, starts, "left") < np.searchsorted(times, ends, "left")
        ops = list(zip(starts[holds].tolist(), ends[holds].tolist(), columns.name[rows[holds]].tolist()))
        # Ops of one thread nest: swept in start order (outer first where two begin together).
        ops.sort(key=lambda o: (o[0], o[0] - o[1]))
        for i, op in zip(indices, latest_covering(ops, times)):
            names[i] = None if op is None else columns.names[ops[op][2]]
    return names


def top_sites(events: list[MemoryEvent], names: list[str | None], timeline: PhaseTimeline,
              top: int = 5) -> list[dict]:
    """The ops that allocated the most bytes, per traced step on average, with the phase
    they allocated in most: [{"op", "phase", "bytes_per_step", "allocations_per_step"}]."""
    steps = len(timeline.steps)
    if not steps:
        return []
    size, count, phases = Counter(), Counter(), defaultdict(Counter)
    for event, name in zip(events, names):
        if event.nbytes <= 0:
            continue
        step, phase = timeline.locate(event.ts_us)
        if step is None:
            continue
        op = name or UNNAMED
        size[op] += event.nbytes
        count[op] += 1
        phases[op][phase] += event.nbytes
    return [{"op": op, "phase": phases[op].most_common(1)[0][0], "bytes_per_step": total / steps,
             "allocations_per_step": count[op] / steps}
            for op, total in size.most_common(top)]
