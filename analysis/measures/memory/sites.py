"""Top allocation sites: the ops that allocated the most bytes a step, named by the trace or by the op around each event."""
from __future__ import annotations

from collections import Counter, defaultdict

from analysis.events.memory_event import MemoryEvent
from analysis.events.timeline import PhaseTimeline
from analysis.events.trace import HOST_OP, Trace

UNNAMED = "(no op around it)"


def enclosing_ops(events: list[MemoryEvent], trace: Trace) -> list[str | None]:
    """For each event, the innermost host op running on its thread at its instant (torch's
    memory events name no op: the op that allocated is the one around them)."""
    ops: dict[str, list] = defaultdict(list)
    wanted = {e.track for e in events}
    for op in trace.events:
        if op.kind == HOST_OP and op.track in wanted:
            ops[op.track].append(op)
    names: list[str | None] = [None] * len(events)
    by_track: dict[str, list[int]] = defaultdict(list)
    for i, event in enumerate(events):
        by_track[event.track].append(i)
    for track, indices in by_track.items():
        # Ops of one thread nest: sweep them in start order (outer first) with a stack.
        pending = sorted(ops.get(track, []), key=lambda o: (o.start_us, -o.dur_us))
        stack, next_op = [], 0
        for i in sorted(indices, key=lambda i: events[i].ts_us):
            t = events[i].ts_us
            while next_op < len(pending) and pending[next_op].start_us <= t:
                op = pending[next_op]
                while stack and stack[-1].end_us <= op.start_us:
                    stack.pop()
                stack.append(op)
                next_op += 1
            while stack and stack[-1].end_us <= t:
                stack.pop()
            names[i] = stack[-1].name if stack else None
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
