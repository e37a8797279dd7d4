"""Splits a trace's `other` time (in the step, in no phase) by what the host was doing meanwhile."""
from __future__ import annotations

import enum

import numpy as np

from gapscope.analysis.events import intervals
from gapscope.analysis.events.columns import code
from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.trace import HOST_OP, OTHER, RUNTIME, Trace
from gapscope.analysis.measures.collectives import is_collective_range
from gapscope.analysis.measures.runtime_calls import waits_for_device


class OtherPart(enum.StrEnum):
    """What covered an instant of `other`, most specific first: an instant covered by several
    goes to the first of them, so the parts add up to `other` exactly."""

    OPS = "ops in no phase"            # framework ops outside the phases: metrics, variable updates, loss reads
    COMMUNICATION = "communication"    # a collective's host range in flight (gloo:all_reduce on gloo's
                                       # thread, c10d::/nccl: ops): the rank waiting on its peers
    DEVICE_WAIT = "device wait"        # host blocked in a synchronising runtime call
    DISPATCH = "framework dispatch"    # the framework's runtime around the ops: tf.function call,
                                       # executor scheduling, Dynamo guards, kernel launches
    LOOP = "loop and callbacks"        # no framework event at all: the training loop's own Python
                                       # (Keras fit loop, callbacks, a user's code between phases)
    HOST_UNTRACED = "host not traced"  # a capture of the device's activities alone: the trace
                                       # holds no host event, so what the host did is unknown


# The parts an event can cover, by the category `_categories` gives it; LOOP is what is left.
_COVERED = (OtherPart.OPS, OtherPart.COMMUNICATION, OtherPart.DEVICE_WAIT, OtherPart.DISPATCH)


def other_shares(trace: Trace, timeline: PhaseTimeline) -> dict[str, float]:
    """Each part's share of the trace's `other` time over its steps (empty where there is none)."""
    steps = timeline.steps
    if not steps:
        return {}
    columns = trace.columns
    category = _categories(columns)
    # Only the events that cover a part, as 32-bit row numbers: a 1 GB trace's millions of
    # events made every whole-trace temporary here tens of MB (a third of the command's peak).
    relevant = np.flatnonzero(category >= 0).astype(np.int32)
    category = category[relevant]
    starts = columns.start_us[relevant]
    ends = starts + columns.dur_us[relevant]
    del relevant
    step_starts = np.array([s.start_us for s in steps])
    step_ends = np.array([s.end_us for s in steps])
    owner = (np.searchsorted(step_starts, starts, side="right") - 1).astype(np.int32)
    # Each event once, grouped by the step it starts in (a 1 GB trace has millions of events
    # and hundreds of steps: no pass over all of them per step); and apart, the few that run
    # past the end of their own step (or start before the first) into a later one.
    grouped = np.argsort(owner, kind="stable").astype(np.int32)
    grouped_owner = owner[grouped]
    own_end = np.where(owner >= 0, step_ends[np.clip(owner, 0, None)], step_starts[0])
    reaching = np.flatnonzero(ends > own_end).astype(np.int32)
    del own_end
    totals = dict.fromkeys(OtherPart, 0.0)
    for index, step in enumerate(steps):
        taken = intervals.merge([(s, e) for s, e, _ in timeline.segments[index]])
        left = intervals.subtract([(step.start_us, step.end_us)], taken)
        if not left:
            continue
        lo, hi = np.searchsorted(grouped_owner, [index, index + 1])
        rows = np.concatenate([grouped[lo:hi], reaching[(owner[reaching] < index)
                                                        & (ends[reaching] > step.start_us)]])
        for which, part in enumerate(_COVERED):
            chosen = rows[category[rows] == which]
            covered = intervals.clip_merged(intervals.merge_arrays(starts[chosen], ends[chosen]),
                                            step.start_us, step.end_us) if len(chosen) else []
            inside = intervals.subtract(left, intervals.subtract(left, covered))
            totals[part] += intervals.total(inside)
            left = intervals.subtract(left, inside)
        totals[OtherPart.LOOP] += intervals.total(left)
    if not columns.on_host().any():  # no host event anywhere: "the loop's own Python" would be a guess
        totals[OtherPart.HOST_UNTRACED], totals[OtherPart.LOOP] = totals[OtherPart.LOOP], 0.0
    whole = sum(totals.values())
    return {str(part): value / whole for part, value in totals.items() if value > 0} if whole else {}


def _categories(columns) -> np.ndarray:
    """Per event, the index in _COVERED of the part it covers, or -1 (device events, the
    phases' own marks, a user's annotation: what they leave is the loop's)."""
    kinds = columns.kind_codes()
    host = columns.on_host()
    waits = np.array([waits_for_device(n) for n in columns.names], bool)[columns.name]
    runtime = kinds == code(RUNTIME)
    category = np.full(len(kinds), -1, np.int8)
    collective = np.array([is_collective_range(n) for n in columns.names], bool)[columns.name]
    category[host & (kinds == code(HOST_OP))] = 0
    category[host & runtime & waits] = 2
    category[host & ((runtime & ~waits) | (kinds == code(OTHER)))] = 3
    # Whatever its category (a gloo range is an annotation, a c10d op an op): the host waiting
    # on its peers, never dispatch or ops of its own.
    category[host & collective] = 1
    return category


def split_other(other_ms: float, shares: dict[str, float], digits: int = 6) -> dict[str, float]:
    """`other_ms` in the trace's proportions, rounded so that the parts add up to it exactly
    (the largest part takes the rounding)."""
    if not shares:
        return {}
    parts = {p: round(other_ms * s, digits) for p, s in shares.items()}
    largest = max(parts, key=parts.get)
    parts[largest] = round(other_ms - sum(v for k, v in parts.items() if k != largest), digits)
    return parts
