"""The timeline's segments, cut from each phase's exclusive time over the whole trace at once, are
those of the per-step subtraction they replaced (kept here as the reference), to the last bit."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gapscope.analysis.events import intervals
from gapscope.analysis.events.timeline import PRIORITY, _cut_at_steps, _exclusive
from gapscope.analysis.events.trace import STEP, Event


def _per_step(by_phase: dict, steps: list[Event]) -> list:
    """The implementation before: per step, each phase clipped, less the phases before it."""
    segments = []
    for step in steps:
        taken, found = [], []
        for phase in PRIORITY:
            own = intervals.clip_merged(by_phase.get(phase, []), step.start_us, step.end_us)
            found += [(s, e, phase) for s, e in intervals.subtract(own, taken)]
            taken = intervals.merge(taken + own)
        segments.append(sorted(found))
    return segments


# On a 0.1 µs grid, so that ends often touch, or anywhere, so that values do not round alike.
_TIME = st.one_of(st.integers(0, 600).map(lambda k: k * 0.1), st.integers(0, 6_000_000).map(lambda k: k / 99_991))
_SPAN = st.tuples(_TIME, _TIME).map(sorted).map(tuple)


@settings(max_examples=300, deadline=None)
@given(phases=st.fixed_dictionaries({}, optional={p: st.lists(_SPAN, max_size=12) for p in PRIORITY}),
       cuts=st.lists(_TIME, min_size=2, max_size=8, unique=True))
def test_segments_equal_the_per_step_subtraction(phases, cuts):
    base = 1_712_345_678.123  # a clock far from zero, as Kineto's
    by_phase = {p: intervals.merge([(base + s, base + e) for s, e in spans]) for p, spans in phases.items()}
    bounds = sorted(base + c for c in cuts)
    steps = [Event(f"ProfilerStep#{i}", STEP, lo, hi - lo, "host/1/1", i)
             for i, (lo, hi) in enumerate(zip(bounds, bounds[1:]))]
    assert _cut_at_steps(_exclusive(by_phase), steps) == _per_step(by_phase, steps)
