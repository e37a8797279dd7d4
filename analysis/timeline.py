"""The one segmentation of a trace into steps and exclusive phase segments, which the breakdown,
attribution, kernels and compile analyzers all read, so they can never disagree on a phase."""
from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass

from analysis import intervals
from analysis.phase_rules import PhaseOrigin, framework_phase, gapscope_phase
from analysis.trace import ANNOTATION, HOST_OP, STEP, Event, Trace
from profilers.phases import MARKED_PHASES

OTHER = "other"
# Where host work of two phases overlaps (TF runs ops on several threads), the instant goes
# to the first phase in this order: compute before input, since input work that overlaps
# compute (prefetch) does not cost step time. Each instant counts once, so phases add up.
PRIORITY = ("forward", "backward", "optimizer", "data_load")


@dataclass
class PhaseTimeline:
    steps: list[Event]
    # Per step: exclusive (start, end, phase) segments, sorted; what no segment covers is `other`.
    segments: list[list[tuple[float, float, str]]]
    origins: dict[str, PhaseOrigin]

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

    def phase_ms(self, step: int) -> dict[str, float]:
        """The four marked phases' exclusive time in one step, in ms (other is the rest)."""
        found = dict.fromkeys(MARKED_PHASES, 0.0)
        for start, end, phase in self.segments[step]:
            found[phase] += (end - start) / 1000.0
        return found


def phase_timeline(trace: Trace) -> PhaseTimeline:
    steps = step_events(trace)
    by_phase, origins = phase_intervals(trace, steps) if steps else ({}, {})
    segments = []
    for step in steps:
        taken: list[intervals.Interval] = []
        found = []
        for phase in PRIORITY:
            own = intervals.clip(by_phase.get(phase, []), step.start_us, step.end_us)
            found += [(s, e, phase) for s, e in intervals.subtract(own, taken)]
            taken = intervals.merge(taken + own)
        segments.append(sorted(found))
    return PhaseTimeline(steps, segments, origins)


def step_events(trace: Trace) -> list[Event]:
    return sorted((e for e in trace.events if e.kind == STEP), key=lambda e: e.start_us)


def phase_intervals(trace: Trace, steps: list[Event]):
    """Merged intervals per phase, from the best marker origin the trace has for each."""
    found: dict[tuple[str, PhaseOrigin], list] = defaultdict(list)
    unclaimed_ops: list[Event] = []
    for event in trace.events:
        if event.kind not in (ANNOTATION, HOST_OP) or not event.track.startswith("host"):
            continue
        phase = gapscope_phase(event.name)
        if phase:
            found[(phase, PhaseOrigin.MARKED)].append((event.start_us, event.end_us))
            continue
        phase = framework_phase(event.name)
        if phase:
            found[(phase, PhaseOrigin.FRAMEWORK)].append((event.start_us, event.end_us))
        elif event.kind == HOST_OP:
            unclaimed_ops.append(event)

    by_phase, origins = {}, {}
    for phase in MARKED_PHASES:
        for origin in (PhaseOrigin.MARKED, PhaseOrigin.FRAMEWORK):
            if found.get((phase, origin)):
                by_phase[phase] = intervals.merge(found[(phase, origin)])
                origins[phase] = origin
                break
        else:
            origins[phase] = PhaseOrigin.MISSING
    if origins["forward"] == PhaseOrigin.MISSING and origins["backward"] != PhaseOrigin.MISSING:
        forward = _infer_forward(unclaimed_ops, steps, by_phase)
        if forward:
            by_phase["forward"] = forward
            origins["forward"] = PhaseOrigin.INFERRED
    return by_phase, origins


def _infer_forward(ops: list[Event], steps: list[Event], by_phase: dict) -> list:
    """Forward in an unmarked trace: host ops of a step after its data load ends and before
    its first backward op begins (the loss computation included). Linear in the ops: each
    step's data-load end and first backward op are looked up once, by bisection."""
    starts = [s.start_us for s in steps]
    data = by_phase.get("data_load", [])
    data_starts = [s for s, _ in data]
    backward_starts = [s for s, _ in by_phase["backward"]]
    bounds: dict[int, tuple[float, float | None]] = {}

    def step_bounds(i: int) -> tuple[float, float | None]:
        lo, hi = steps[i].start_us, steps[i].end_us
        j = bisect.bisect_left(backward_starts, lo)
        first_backward = backward_starts[j] if j < len(backward_starts) and backward_starts[j] < hi else None
        # Merged data intervals are disjoint and sorted: the last one starting before the
        # step's end is the one that ends last inside it.
        k = bisect.bisect_left(data_starts, hi) - 1
        data_end = min(data[k][1], hi) if k >= 0 and data[k][1] > lo else lo
        return data_end, first_backward

    found = []
    for op in ops:
        i = bisect.bisect_right(starts, op.start_us) - 1
        if i < 0 or op.start_us >= steps[i].end_us:
            continue
        if i not in bounds:
            bounds[i] = step_bounds(i)
        data_end, first_backward = bounds[i]
        if first_backward is not None and data_end <= op.start_us < first_backward:
            found.append((op.start_us, min(op.end_us, first_backward)))
    # Ops inside a marked range (zero_grad's aten::zero_, say) belong to that range's phase.
    marked = intervals.merge([i for phase in by_phase.values() for i in phase])
    return intervals.subtract(intervals.merge(found), marked)
