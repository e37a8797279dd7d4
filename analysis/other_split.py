"""Splits a trace's `other` time (in the step, in no phase) by what the host was doing meanwhile."""
from __future__ import annotations

import enum
import re

import numpy as np

from analysis import intervals
from analysis.columns import code
from analysis.timeline import PhaseTimeline
from analysis.trace import HOST_OP, OTHER, RUNTIME, Trace

# Runtime calls in which the host waits for the device instead of working.
_WAITS = re.compile(r"Synchronize|cudaMemcpy(?!Async)|cudaStreamWaitEvent")


class OtherPart(enum.StrEnum):
    """What covered an instant of `other`, most specific first: an instant covered by several
    goes to the first of them, so the parts add up to `other` exactly."""

    OPS = "ops in no phase"            # framework ops outside the phases: metrics, variable updates, loss reads
    DEVICE_WAIT = "device wait"        # host blocked in a synchronising runtime call
    DISPATCH = "framework dispatch"    # the framework's runtime around the ops: tf.function call,
                                       # executor scheduling, Dynamo guards, kernel launches
    LOOP = "loop and callbacks"        # no framework event at all: the training loop's own Python
                                       # (Keras fit loop, callbacks, a user's code between phases)


def other_shares(trace: Trace, timeline: PhaseTimeline) -> dict[str, float]:
    """Each part's share of the trace's `other` time over its steps (empty where there is none)."""
    if not timeline.steps:
        return {}
    columns = trace.columns
    kinds = columns.kind_codes()
    host = columns.on_host()
    names = columns.names
    waits = np.array([bool(_WAITS.search(n)) for n in names], bool)[columns.name]
    category = np.full(len(kinds), -1, np.int8)
    category[host & (kinds == code(HOST_OP))] = 0
    category[host & (kinds == code(RUNTIME)) & waits] = 1
    category[host & (((kinds == code(RUNTIME)) & ~waits) | (kinds == code(OTHER)))] = 2
    # The rest (a user's own annotation outside the phases, untraced time) is their loop's code.
    starts = columns.start_us
    ends = starts + columns.dur_us
    totals = dict.fromkeys(OtherPart, 0.0)
    step_starts = np.array([s.start_us for s in timeline.steps])
    owner = np.searchsorted(step_starts, starts, side="right") - 1
    for index, step in enumerate(timeline.steps):
        taken = intervals.merge([(s, e) for s, e, _ in timeline.segments[index]])
        left = intervals.subtract([(step.start_us, step.end_us)], taken)
        if not left:
            continue
        # Events that start in this step, or before it and run into it (rare: long spans).
        rows = (owner == index) | ((owner < index) & (ends > step.start_us))
        for part, which in zip(OtherPart, range(4)):
            if part is OtherPart.LOOP:
                totals[part] += intervals.total(left)
                break
            chosen = rows & (category == which)
            covered = intervals.clip_merged(intervals.merge_arrays(starts[chosen], ends[chosen]),
                                            step.start_us, step.end_us) if chosen.any() else []
            inside = intervals.subtract(left, intervals.subtract(left, covered))
            totals[part] += intervals.total(inside)
            left = intervals.subtract(left, inside)
    whole = sum(totals.values())
    return {str(part): value / whole for part, value in totals.items() if value > 0} if whole else {}


def split_other(other_ms: float, shares: dict[str, float], digits: int = 6) -> dict[str, float]:
    """`other_ms` in the trace's proportions, rounded so that the parts add up to it exactly
    (the largest part takes the rounding)."""
    if not shares:
        return {}
    parts = {p: round(other_ms * s, digits) for p, s in shares.items()}
    largest = max(parts, key=parts.get)
    parts[largest] = round(other_ms - sum(v for k, v in parts.items() if k != largest), digits)
    return parts
