"""`other_shares` in one sweep over the trace gives, to the last digit, what the per-step pass it
replaced gave (kept here as the reference) on random traces of touching, nested and straddling events."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gapscope.analysis.events import intervals
from gapscope.analysis.events.timeline import phase_timeline
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, KERNEL, OTHER, RUNTIME, STEP, Event, Trace
from gapscope.analysis.measures import other_split
from gapscope.analysis.measures.other_split import OtherPart, other_shares, other_totals


def _per_step_totals(trace, timeline):
    """The implementation before the sweep: for each step, every event that starts in it or
    reaches into it, merged and subtracted part by part (steps x events on a long trace)."""
    steps = timeline.steps
    if not steps:
        return dict.fromkeys(OtherPart, 0.0)
    columns = trace.columns
    category = other_split._categories(columns)
    relevant = np.flatnonzero(category >= 0).astype(np.int32)
    category = category[relevant]
    starts = columns.start_us[relevant]
    ends = starts + columns.dur_us[relevant]
    step_starts = np.array([s.start_us for s in steps])
    step_ends = np.array([s.end_us for s in steps])
    owner = (np.searchsorted(step_starts, starts, side="right") - 1).astype(np.int32)
    grouped = np.argsort(owner, kind="stable").astype(np.int32)
    grouped_owner = owner[grouped]
    own_end = np.where(owner >= 0, step_ends[np.clip(owner, 0, None)], step_starts[0])
    reaching = np.flatnonzero(ends > own_end).astype(np.int32)
    totals = dict.fromkeys(OtherPart, 0.0)
    for index, step in enumerate(steps):
        taken = intervals.merge([(s, e) for s, e, _ in timeline.segments[index]])
        left = intervals.subtract([(step.start_us, step.end_us)], taken)
        if not left:
            continue
        lo, hi = np.searchsorted(grouped_owner, [index, index + 1])
        rows = np.concatenate([grouped[lo:hi], reaching[(owner[reaching] < index)
                                                        & (ends[reaching] > step.start_us)]])
        for which, part in enumerate(other_split._COVERED):
            chosen = rows[category[rows] == which]
            covered = intervals.clip_merged(intervals.merge_arrays(starts[chosen], ends[chosen]),
                                            step.start_us, step.end_us) if len(chosen) else []
            inside = intervals.subtract(left, intervals.subtract(left, covered))
            totals[part] += intervals.total(inside)
            left = intervals.subtract(left, inside)
        totals[OtherPart.LOOP] += intervals.total(left)
    if not columns.on_host().any():
        totals[OtherPart.HOST_UNTRACED], totals[OtherPart.LOOP] = totals[OtherPart.LOOP], 0.0
    return totals


# What an event can be: each part's kinds, the phases' marks, a user's range, a kernel.
KINDS = [("aten::add_", HOST_OP, "host/1/1"), ("cudaLaunchKernel", RUNTIME, "host/1/1"),
         ("cudaDeviceSynchronize", RUNTIME, "host/1/1"), ("EagerExecute", OTHER, "host/1/2"),
         ("gloo:all_reduce", ANNOTATION, "host/1/3"), ("my_logging", ANNOTATION, "host/1/1"),
         ("gapscope/forward", ANNOTATION, "host/1/1"), ("gapscope/backward", ANNOTATION, "host/1/1"),
         ("gapscope/optimizer", ANNOTATION, "host/1/1"), ("gapscope/data_load", ANNOTATION, "host/1/1"),
         ("volta_sgemm", KERNEL, "gpu/0/7")]
# Times on a 0.1 µs grid, so that ends often touch, or anywhere, so that sums round.
TIME = st.one_of(st.integers(0, 800).map(lambda k: k * 0.1), st.integers(0, 8_000_000).map(lambda k: k / 99_991))
LENGTH = st.one_of(st.integers(0, 40).map(lambda k: k * 0.1), st.integers(0, 400_000).map(lambda k: k / 99_991))


@st.composite
def traces(draw):
    # A trace's clock far from zero, as Kineto's, makes every length a rounded difference.
    base = draw(st.sampled_from([0.0, 1_712_345.678, 1_712_345_678_901.123]))
    events, cursor = [], base + draw(TIME)
    for number in range(draw(st.integers(1, 10))):  # steps in time order, touching or apart
        length = draw(st.integers(1, 100)) * 0.1 + draw(st.sampled_from([0.0, 1 / 3]))
        events.append(Event(f"ProfilerStep#{number}", STEP, cursor, length, "host/1/1", step_num=number))
        cursor += length + draw(st.sampled_from([0.0, 0.0, 0.1, 0.7, 3.0]))
    for _ in range(draw(st.integers(0, 120))):
        name, kind, track = draw(st.sampled_from(KINDS))
        events.append(Event(name, kind, base + draw(TIME), draw(LENGTH), track))
    return Trace("torch", "random", events)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(traces())
def test_one_sweep_gives_the_per_step_shares_to_the_last_digit(trace):
    timeline = phase_timeline(trace)
    expected = _per_step_totals(trace, timeline)
    assert other_totals(trace, timeline) == expected
    whole = sum(expected.values())
    assert other_shares(trace, timeline) == ({str(p): v / whole for p, v in expected.items() if v > 0}
                                             if whole else {})


def test_each_steps_pieces_are_summed_as_that_steps_own():
    """Step 1's `other` is 0.1 µs; step 2's is two pieces around its forward, 0.4000000000000001
    and 0.5 µs. Summed a step at a time, as the per-step pass did, that is 0.1 + 0.9000000000000001
    = 1.0000000000000002 µs; summed in one run over all pieces it would be 1.0 (random traces
    rarely tell the two apart)."""
    trace = Trace("torch", "hand-made", [
        Event("ProfilerStep#1", STEP, 0.0, 0.1, "host/1/1", step_num=1),
        Event("ProfilerStep#2", STEP, 1.0, 1.5, "host/1/1", step_num=2),
        Event("gapscope/forward", ANNOTATION, 14 * 0.1, 2.0 - 14 * 0.1, "host/1/1")])
    timeline = phase_timeline(trace)
    assert len(timeline.steps) == 2
    totals = other_totals(trace, timeline)
    assert totals[OtherPart.LOOP] == 1.0000000000000002 == _per_step_totals(trace, timeline)[OtherPart.LOOP]
    assert sum(totals.values()) == totals[OtherPart.LOOP]
