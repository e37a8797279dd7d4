"""Activations each layer keeps: bytes a layer allocated in forward that are still held when backward begins."""
from __future__ import annotations

import bisect
from collections import defaultdict

import numpy as np

from gapscope.analysis.events.intervals import latest_covering
from gapscope.analysis.events.memory_event import MemoryEvent
from gapscope.analysis.events.module_depth import at_depth
from gapscope.analysis.events.phase_rules import MODULE_RANGE_PREFIX
from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.trace import ANNOTATION, OTHER, Trace
# The layer timing's own reading of layer ranges and Keras scopes, so both name layers alike.
from gapscope.analysis.measures.layer_times import layer_name, scope_layer, scope_names
from gapscope.analysis.measures.memory.levels import Levels
from gapscope.analysis.measures.memory.phase_memory import event_phase
from gapscope.analysis.readers.torch_trace import LAYER_RANGE_PREFIXES


def layer_of_events(events: list[MemoryEvent], trace: Trace, names: list[str] | None,
                    depth: int | None = None) -> list[str | None]:
    """Each event's layer: the Keras scope in its op's name (TF), else the innermost layer
    range around it on its thread (torch's eager runs mark layers with ranges; with_modules'
    module ranges at `depth`, as the layer timing takes them)."""
    known = set(names or ())
    resolved = scope_names(trace, names) if any(e.op for e in events) else {}
    ranges = _layer_ranges(trace, {e.track for e in events if not e.op}, depth)
    found: list[str | None] = [None] * len(events)
    by_track: dict[str, list[int]] = defaultdict(list)
    for i, event in enumerate(events):
        if event.op:
            scoped = scope_layer(event.op, known, resolved)
            found[i] = scoped[0] if scoped else None
        elif event.track in ranges:
            by_track[event.track].append(i)
    # The range begun last that still runs, per thread in one sweep (a walk back over every
    # range begun before each event took 4 s for 76k events outside the layers of 1,000 steps).
    for track, indices in by_track.items():
        indices.sort(key=lambda i: events[i].ts_us)
        spans = ranges[track]
        for i, span in zip(indices, latest_covering(spans, [events[i].ts_us for i in indices])):
            found[i] = None if span is None else spans[span][2]
    return found


def kept_by_layer(levels: Levels, layers: list[str | None], timeline: PhaseTimeline) -> dict[str, float]:
    """Per layer, the bytes a step's forward allocated in it and had not freed (matched by
    address) when backward next began, averaged over the traced steps: what it keeps for
    backward. Without a backward after it, an allocation is kept if forward's end finds it held."""
    events = levels.events
    kept: dict[str, float] = defaultdict(float)
    steps = len(timeline.steps)
    for index, window in enumerate(timeline.steps):
        segments = timeline.covering(index)
        forward = [b for _, b, phase in segments if phase == "forward"]
        if not forward:
            continue
        # Backward's starts, not forward's end: TF's executor runs forward-scoped ops (metrics)
        # while backward runs, and backward's frees of activations came before such an op's end.
        backward = [a for a, _, phase in segments if phase == "backward"]
        inside = levels.between(window.start_us, window.end_us)
        # Per address, the times of its frees (in time order: events are sorted).
        frees: dict[int, list[float]] = defaultdict(list)
        for i in inside:
            if events[i].nbytes < 0 and events[i].addr is not None:
                frees[events[i].addr].append(events[i].ts_us)
        for i in inside:
            event, layer = events[i], layers[i]
            if (layer is None or event.nbytes <= 0 or event.addr is None
                    or event_phase(event, timeline, index) != "forward"):
                continue
            after = bisect.bisect_left(backward, event.ts_us)
            until = backward[after] if after < len(backward) else max(forward[-1], event.ts_us)
            times = frees.get(event.addr, ())
            first_free = bisect.bisect_left(times, event.ts_us)
            if first_free == len(times) or times[first_free] >= until:
                kept[layer] += event.nbytes
    return {layer: total / steps for layer, total in kept.items()} if steps else {}


def _layer_ranges(trace: Trace, tracks: set[str], depth: int | None) -> dict[str, list[tuple[float, float, str]]]:
    """The layer ranges on `tracks`, sorted by start, from the trace's columns."""
    if not tracks:
        return {}
    columns = trace.columns
    ids = [i for i, name in enumerate(columns.names) if name.startswith(LAYER_RANGE_PREFIXES)]
    wheres = {i: track for i, (kind, track) in enumerate(columns.wheres)
              if kind in (ANNOTATION, OTHER) and track in tracks}
    if not ids or not wheres:
        return {}
    rows = np.flatnonzero(np.isin(columns.name, ids) & np.isin(columns.where, list(wheres)))
    found: dict[str, list] = defaultdict(list)
    modules: dict[str, list] = defaultdict(list)
    for row in rows.tolist():
        start = float(columns.start_us[row])
        name = columns.names[columns.name[row]]
        into = modules if name.startswith(MODULE_RANGE_PREFIX) else found
        into[wheres[int(columns.where[row])]].append((start, start + float(columns.dur_us[row]),
                                                      layer_name(name)))
    for track, spans in at_depth(modules, depth)[0].items() if modules else ():
        found[track] += spans
    for ranges in found.values():
        ranges.sort()
    return found
