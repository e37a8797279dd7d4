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
    totals = other_totals(trace, timeline)
    whole = sum(totals.values())
    return {str(part): value / whole for part, value in totals.items() if value > 0} if whole else {}


def other_totals(trace: Trace, timeline: PhaseTimeline) -> dict[OtherPart, float]:
    """Each part's time (µs) over the trace's steps."""
    totals = dict.fromkeys(OtherPart, 0.0)
    if not timeline.steps:
        return totals
    columns = trace.columns
    category = _categories(columns)
    # One sweep per part over the whole trace, never one per step (a 1,000-step trace made
    # that steps x events): what is left of `other` is a list of pieces, each in its step, in
    # (step, start) order; a part takes its pieces' overlap with the union of its events, and
    # leaves the overlap with that union's gaps. Each piece is one maximal stretch in its step,
    # as a per-step subtraction would cut it, and each step's pieces are summed as one step's
    # (in order, with Python's sum): the shares come out the same to the last digit.
    left = _outside_phases(timeline)
    for which, part in enumerate(_COVERED):
        union_starts, union_ends = columns.union(category == which)
        totals[part] = _sum_by_step(intervals.overlaps(left, union_starts, union_ends))
        left = intervals.overlaps(left, np.r_[-np.inf, union_ends], np.r_[union_starts, np.inf])
    totals[OtherPart.LOOP] = _sum_by_step(left)
    if not columns.on_host().any():  # no host event anywhere: "the loop's own Python" would be a guess
        totals[OtherPart.HOST_UNTRACED], totals[OtherPart.LOOP] = totals[OtherPart.LOOP], 0.0
    return totals


# Pieces of time: per piece its step's index, start and end (three arrays of one length).
_Pieces = tuple[np.ndarray, np.ndarray, np.ndarray]


def _outside_phases(timeline: PhaseTimeline) -> _Pieces:
    """Each step's window less its phase segments: the stretches of `other`, in (step, start)
    order. A step's segments are disjoint and sorted (timeline._cut_at_steps cuts them so), so
    what its window leaves are the gaps between them, every step's at once: k segments leave
    k + 1 stretches, each from the step's start or a segment's end to the next one's start or
    the step's end; those of positive length are kept."""
    counts = np.array([len(found) for found in timeline.segments], np.int64)
    flat = [(start, end) for found in timeline.segments for start, end, _ in found]
    starts, ends = (np.array(column, float) for column in (zip(*flat) if flat else ((), ())))
    step_of = np.repeat(np.arange(len(counts)), counts)
    stretches = counts + 1
    first = np.cumsum(stretches) - stretches  # each step's first stretch
    before = np.arange(len(flat)) - (np.cumsum(counts) - counts)[step_of] + first[step_of]
    lo, hi = np.empty(int(stretches.sum())), np.empty(int(stretches.sum()))
    lo[first] = [step.start_us for step in timeline.steps]
    hi[first + counts] = [step.end_us for step in timeline.steps]
    lo[before + 1], hi[before] = ends, starts
    kept = hi > lo
    return np.repeat(np.arange(len(counts)), stretches)[kept], lo[kept], hi[kept]


def _sum_by_step(pieces: _Pieces) -> float:
    """The pieces' total time, summed a step at a time, in order, as Python sums a list."""
    step, lo, hi = pieces
    lengths = (hi - lo).tolist()
    bounds = [0, *(np.flatnonzero(np.diff(step)) + 1).tolist(), len(lengths)]
    found = 0.0
    for first, stop in zip(bounds, bounds[1:]):
        found += sum(lengths[first:stop])
    return found


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
