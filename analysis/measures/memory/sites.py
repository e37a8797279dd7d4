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
    trace's columns: only the ops of the events' threads become tuples."""
    columns = trace.columns
    wanted = {e.track for e in events}
    where_track = {i: track for i, (kind, track) in enumerate(columns.wheres)
                   if kind == HOST_OP and track in wanted}
    ops: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    if where_track:
        rows = np.flatnonzero(np.isin(columns.where, list(where_track)))
        for row in rows.tolist():
            start = float(columns.start_us[row])
            ops[where_track[int(columns.where[row])]].append(
                (start, start + float(columns.dur_us[row]), columns.names[columns.name[row]]))
    names: list[str | None] = [None] * len(events)
    by_track: dict[str, list[int]] = defaultdict(list)
    for i, event in enumerate(events):
        by_track[event.track].append(i)
    for track, indices in by_track.items():
        # Ops of one thread nest: swept in start order (outer first where two begin together).
        pending = sorted(ops.get(track, []), key=lambda o: (o[0], o[0] - o[1]))
        indices.sort(key=lambda i: events[i].ts_us)
        for i, op in zip(indices, latest_covering(pending, [events[i].ts_us for i in indices])):
            names[i] = None if op is None else pending[op][2]
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
