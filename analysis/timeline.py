"""Which step and which phase a host instant belongs to, with the breakdown's own priorities."""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from analysis import intervals
# The breakdown's own step and phase-interval finders: attribution must see the same phases
# the breakdown counted, or host and device time per phase would not line up.
from analysis.breakdown import PRIORITY, phase_intervals, step_events
from analysis.trace import Event, Trace

OTHER = "other"


@dataclass
class PhaseTimeline:
    steps: list[Event]
    # Per step: exclusive (start, end, phase) segments, sorted; what no segment covers is `other`.
    segments: list[list[tuple[float, float, str]]]

    def __post_init__(self):
        self._starts = [s.start_us for s in self.steps]
        self._segment_starts = [[s for s, _, _ in seg] for seg in self.segments]

    def step_at(self, t: float) -> int | None:
        """Index of the step whose host window holds instant t, else None."""
        i = bisect.bisect_right(self._starts, t) - 1
        if i >= 0 and t < self.steps[i].end_us:
            return i
        return None

    def phase_at(self, step: int, t: float) -> str:
        j = bisect.bisect_right(self._segment_starts[step], t) - 1
        if j >= 0:
            start, end, phase = self.segments[step][j]
            if t < end:
                return phase
        return OTHER

    def locate(self, t: float) -> tuple[int | None, str | None]:
        step = self.step_at(t)
        return (step, None) if step is None else (step, self.phase_at(step, t))


def phase_timeline(trace: Trace) -> PhaseTimeline:
    steps = step_events(trace)
    by_phase, _ = phase_intervals(trace, steps) if steps else ({}, {})
    segments = []
    for step in steps:
        taken: list[intervals.Interval] = []
        found = []
        for phase in PRIORITY:
            own = intervals.clip(by_phase.get(phase, []), step.start_us, step.end_us)
            found += [(s, e, phase) for s, e in intervals.subtract(own, taken)]
            taken = intervals.merge(taken + own)
        segments.append(sorted(found))
    return PhaseTimeline(steps, segments)
