"""The one segmentation of a trace into steps and exclusive phase segments, which the breakdown,
attribution, kernels and compile analyzers all read, so they can never disagree on a phase."""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from gapscope.analysis.events import intervals
from gapscope.analysis.events.batch_copy import batch_copies
from gapscope.analysis.events.columns import code
from gapscope.analysis.events.gc_pause import collector_paused
from gapscope.analysis.events.phase_rules import (MODULE_RANGE_PREFIX, PhaseOrigin, annotation_phase, framework_phase,
                                         gapscope_phase)
from gapscope.analysis.events.step_windows import cut_off_last, step_windows
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, Event, Trace
from gapscope.analysis.events.trace import OTHER as OTHER_EVENT  # OTHER below is the phase
from gapscope.analysis.events.trace_rules import TraceRules, unused_patterns
from gapscope.profilers.phases import MARKED_PHASES

OTHER = "other"
# No trace clock is finer than a nanosecond: a shorter stretch between two segments is float
# noise of the µs times, and an `other` drawn for it would be an event whose ends round to the
# same nanosecond (zero length), which XProf's Trace Viewer does not draw.
CLOCK_RESOLUTION_US = 1e-3
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
    # What the segmentation itself says about the steps (a whole-trace window, a step left out).
    notes: list[str] = field(default_factory=list)

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

    def step_number(self, step: int) -> int:
        """The step's own number, or its index where the trace gave none."""
        number = self.steps[step].step_num
        return step if number is None else number

    def covering(self, step: int) -> list[tuple[float, float, str]]:
        """The step's marked segments, and `other` for every stretch they leave: the five phases
        cover the step exactly once, as the views that draw them need."""
        window = self.steps[step]
        found, cursor = [], window.start_us
        for start, end, phase in self.segments[step]:
            if start - cursor >= CLOCK_RESOLUTION_US:
                found.append((cursor, start, OTHER))
            found.append((start, end, phase))
            cursor = max(cursor, end)
        if window.end_us - cursor >= CLOCK_RESOLUTION_US:
            found.append((cursor, window.end_us, OTHER))
        return found

    def phase_ms(self, step: int) -> dict[str, float]:
        """The four marked phases' exclusive time in one step, in ms (other is the rest)."""
        found = dict.fromkeys(MARKED_PHASES, 0.0)
        for start, end, phase in self.segments[step]:
            found[phase] += (end - start) / 1000.0
        return found


def phase_timeline(trace: Trace, rules: TraceRules = TraceRules()) -> PhaseTimeline:
    with collector_paused():
        return _phase_timeline(trace, rules)


def _phase_timeline(trace: Trace, rules: TraceRules) -> PhaseTimeline:
    steps, notes = step_windows(trace, rules)
    if rules.phases:
        notes = notes + unused_patterns(rules, {e.name for e in trace.events})
    by_phase, origins, copies = phase_intervals(trace, steps, rules) if steps else ({}, {}, [])
    segments = _cut_at_steps(_exclusive(by_phase), steps)
    timeline = PhaseTimeline(steps, segments, origins, notes)
    cut = cut_off_last(steps, [timeline.phase_ms(i) for i in range(len(steps))])
    if cut:
        timeline = PhaseTimeline(steps[:-1], segments[:-1], origins, notes + [cut])
    if copies:
        timeline.notes.append(_batch_copy_note(timeline, copies))
    return timeline


def _exclusive(by_phase: dict[str, list]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per phase in PRIORITY, its merged intervals outside those of the phases before it (as
    start and end arrays), over the whole trace at once: a piece is where the phase's interval
    meets a gap between the intervals taken before it (the same pieces as a subtraction)."""
    found = []
    taken = (np.zeros(0), np.zeros(0))
    for phase in PRIORITY:
        own = np.array(by_phase.get(phase, []), float).reshape(-1, 2)
        gaps = (np.r_[-np.inf, taken[1]], np.r_[taken[0], np.inf])
        found.append(intervals.overlaps((np.zeros(len(own), np.int8), own[:, 0], own[:, 1]), *gaps)[1:])
        taken = intervals.merged_arrays(np.r_[taken[0], own[:, 0]], np.r_[taken[1], own[:, 1]])
    return found


def _cut_at_steps(exclusive: list[tuple[np.ndarray, np.ndarray]],
                  steps: list[Event]) -> list[list[tuple[float, float, str]]]:
    """Per step, the phases' disjoint pieces (_exclusive) clipped to its window, sorted, every
    step's at once (one subtraction, merge, clip and sort a step and phase was two thirds of
    a 1,000-step timeline; clipping commutes with the subtraction: the same pieces)."""
    windows = (np.arange(len(steps)), np.array([s.start_us for s in steps], float),
               np.array([s.end_us for s in steps], float))
    cut = [intervals.overlaps(windows, starts, ends) for starts, ends in exclusive]
    step = np.concatenate([c[0] for c in cut])
    starts, ends = np.concatenate([c[1] for c in cut]), np.concatenate([c[2] for c in cut])
    phases = np.repeat(np.arange(len(PRIORITY)), [len(c[0]) for c in cut])
    # Pieces of one step are disjoint and of positive length: their starts differ, and sort them.
    order = np.lexsort((starts, step))
    found = list(zip(starts[order].tolist(), ends[order].tolist(), [PRIORITY[p] for p in phases[order].tolist()]))
    bounds = np.searchsorted(step[order], np.arange(len(steps) + 1)).tolist()
    return [found[lo:hi] for lo, hi in zip(bounds, bounds[1:])]


def _batch_copy_note(timeline: PhaseTimeline, copies: list[intervals.Interval]) -> str:
    """data_load's two parts where the batch's copy ran after the loader's range, so that the
    range alone (what torch-tb-profiler calls DataLoader time) can still be read."""
    n = len(timeline.steps)
    copy_ms = sum(e - s for step in timeline.steps
                  for s, e in intervals.clip_merged(copies, step.start_us, step.end_us)) / 1000.0 / n
    data_ms = sum(timeline.phase_ms(i)["data_load"] for i in range(n)) / n
    return (f"data_load {data_ms:.3f} ms a step: the data loader's ranges {data_ms - copy_ms:.3f} ms "
            f"and the batch's copy to the device after them {copy_ms:.3f} ms")


def phase_intervals(trace: Trace, steps: list[Event], rules: TraceRules = TraceRules()):
    """Merged intervals per phase, from the best marker origin the trace has for each.
    Works on the trace's columns: each distinct name is classified once, then every event
    at once by its name id (a 1 GB trace holds millions of events and a few thousand names)."""
    columns = trace.columns
    kinds = columns.kind_codes()
    considered = columns.on_host() & ((kinds == code(ANNOTATION)) | (kinds == code(HOST_OP)))
    claims = [_claim(name, rules) for name in columns.names]
    keys = sorted({claim for claim in claims if claim is not None})
    index = {claim: i for i, claim in enumerate(keys)}
    name_claim = np.array([-1 if claim is None else index[claim] for claim in claims], np.int32)
    row_claim = name_claim[columns.name]
    row_claim[~considered] = _NOT_CONSIDERED  # in place: each array of every row costs (4M rows)
    starts = columns.start_us
    # Each claim's rows (32-bit), its times taken only for the origin a phase uses: a 1 GB
    # trace's times of every claimed event at once were a few hundred MB.
    claimed = np.flatnonzero(row_claim >= 0).astype(np.int32)
    claim_of = row_claim[claimed]
    found = {}
    for i, claim in enumerate(keys):
        rows = claimed[claim_of == i]
        if len(rows):
            found[claim] = rows
    del claimed, claim_of

    by_phase, origins = {}, {}
    for phase in MARKED_PHASES:
        for origin in (PhaseOrigin.MARKED, PhaseOrigin.ANNOTATED, PhaseOrigin.FRAMEWORK):
            if (phase, origin) in found:
                rows = found[(phase, origin)]
                by_phase[phase] = intervals.merge_arrays(starts[rows], starts[rows] + columns.dur_us[rows])
                origins[phase] = origin
                break
        else:
            origins[phase] = PhaseOrigin.MISSING
    if origins["data_load"] in (PhaseOrigin.ANNOTATED, PhaseOrigin.FRAMEWORK):
        # gapscope's own data mark holds the copy where the loop put it; elsewhere the batch's
        # copy right after the loader's range is data_load's (see batch_copy).
        copies = batch_copies(trace, by_phase["data_load"], found[("data_load", origins["data_load"])])
        if copies:
            by_phase["data_load"] = intervals.merge(by_phase["data_load"] + copies)
    else:
        copies = []
    # A torch trace of ops with no autograd op and no optimizer anywhere is inference (an
    # inference_mode loop): those two phases do not apply, and forward runs to the step's end.
    # Ops and ranges decide, never Python frames: with_stack writes the profiler's own
    # `torch/autograd/profiler.py(358): _start_trace` into inference traces too.
    # (An XLA or TF trace whose marks cannot be read may be training all the same.)
    inference = (trace.source_format == "torch" and origins["backward"] == PhaseOrigin.MISSING
                 and origins["optimizer"] == PhaseOrigin.MISSING
                 and bool(((row_claim == _UNCLAIMED) & (kinds == code(HOST_OP))).any())
                 and not _any_autograd_op(columns.names, columns.name[considered]))
    if inference:
        origins["backward"] = origins["optimizer"] = PhaseOrigin.NOT_APPLICABLE
    # A framework's forward is a wrapper's range (DistributedDataParallel.forward): the loss
    # computed after it is forward's too, found as an unmarked forward is.
    if origins["forward"] in (PhaseOrigin.MISSING, PhaseOrigin.FRAMEWORK) \
            and (origins["backward"] != PhaseOrigin.MISSING or inference):
        # A module's call (with_modules' range) is forward all through, the Python between its
        # ops included, as the module ranges that are the trace's layers count it.
        ops = ((row_claim == _UNCLAIMED) & (kinds == code(HOST_OP))) | _module_ranges(columns, kinds)
        # A block of ops at a time (the union of the blocks' forward stretches is the whole's).
        forward = []
        limits, marked = _forward_limits(steps, by_phase, to_step_end=inference), _marked(by_phase)
        for first in range(0, len(ops), _OPS_BLOCK):
            rows = np.flatnonzero(ops[first:first + _OPS_BLOCK]) + first
            forward += _infer_forward(starts[rows], starts[rows] + columns.dur_us[rows], limits, marked)
        forward = intervals.merge(forward)
        if forward:
            by_phase["forward"] = intervals.merge(by_phase.get("forward", []) + forward)
            if origins["forward"] == PhaseOrigin.MISSING:
                origins["forward"] = PhaseOrigin.INFERRED
    return by_phase, origins, copies


def _module_ranges(columns, kinds: np.ndarray) -> np.ndarray:
    """Rows of with_modules' `nn.Module: …` ranges on the host."""
    ids = [i for i, name in enumerate(columns.names) if name.startswith(MODULE_RANGE_PREFIX)]
    return np.isin(columns.name, ids) & (kinds == code(OTHER_EVENT)) & columns.on_host()


def _any_autograd_op(names: list[str], rows: np.ndarray) -> bool:
    """Whether an op or range among `rows` (name ids) is autograd's (torch::autograd::CopySlices
    runs in backward without a Backward node's name)."""
    return any("autograd" in names[i] for i in np.unique(rows))


_UNCLAIMED, _NOT_CONSIDERED = -1, -2  # row claims that are no phase: an unmarked host op, other events


def _claim(name: str, rules: TraceRules) -> tuple[str, PhaseOrigin] | None:
    """The phase an event name marks and how: gapscope's own marks, then the user's (--phase
    before the common names), then the framework's."""
    phase = gapscope_phase(name)
    if phase:
        return phase, PhaseOrigin.MARKED
    phase = rules.user_phase(name) or annotation_phase(name)
    if phase:
        return phase, PhaseOrigin.ANNOTATED
    phase = framework_phase(name)
    return (phase, PhaseOrigin.FRAMEWORK) if phase else None


_OPS_BLOCK = 1 << 20


def _marked(by_phase: dict) -> list:
    """The union of the phases' intervals, merged."""
    merged = np.fromiter(chain.from_iterable(chain.from_iterable(by_phase.values())), np.float64)
    return intervals.merge_arrays(merged[0::2], merged[1::2])


def _infer_forward(starts: np.ndarray, ends: np.ndarray, limits: tuple, marked: list) -> list:
    """Forward in an unmarked trace: host ops (given as start and end arrays, at most _OPS_BLOCK)
    of a step after its data load ends and before its first backward op begins (the loss
    computation included), or (inference) before the step ends: `limits` (_forward_limits).
    Linear in the ops: each step's bounds are found once, by bisection, and the ops are tested
    against them as arrays (a 1 GB trace holds millions of ops). Ops inside a marked range
    (zero_grad's aten::zero_, say) belong to that range's phase (`marked`: the phases' union)."""
    step_starts, step_ends, data_end, first_backward = limits
    if not len(starts) or not len(step_starts):
        return []
    if intervals.in_start_order(starts) and intervals.in_start_order(step_starts):
        keep, hi = _forward_rows(starts, limits)
        found = intervals.merge_arrays(starts[keep], np.minimum(ends[keep], hi))
        return intervals.subtract(found, marked)
    step = np.searchsorted(step_starts, starts, side="right") - 1
    inside = step >= 0
    step[~inside] = 0
    inside &= starts < step_ends[step]
    lo, hi = data_end[step], first_backward[step]
    del step
    keep = inside & (lo <= starts) & (starts < hi)  # NaN (no backward in the step) keeps none
    found = intervals.merge_arrays(starts[keep], np.minimum(ends[keep], hi[keep]))
    return intervals.subtract(found, marked)


def _forward_rows(starts: np.ndarray, limits: tuple) -> tuple[np.ndarray, np.ndarray]:
    """_infer_forward's kept ops where ops and steps come in start order (a trace's mostly do),
    and the end of their step's forward: each of the per-op tests is a bound on the ops' index
    within the step, found by one search per step, so only the kept ops are ever gathered (a
    test of every op against its step's limits made some ten arrays of every op: 45 of a
    1,000-step trace's 530 ms of analysis). An op's step is the last one begun at or before it."""
    step_starts, step_ends, data_end, first_backward = limits
    begins = np.searchsorted(starts, step_starts, side="left")  # where each step's ops begin
    lo = np.maximum(begins, np.searchsorted(starts, data_end, side="left"))
    no_backward = np.isnan(first_backward)  # its step keeps none
    stop = np.minimum.reduce([np.append(begins[1:], len(starts)),
                              np.searchsorted(starts, step_ends, side="left"),
                              np.searchsorted(starts, np.where(no_backward, -np.inf, first_backward), side="left")])
    counts = np.maximum(stop - lo, 0)
    keep = np.arange(counts.sum()) + np.repeat(lo - (np.cumsum(counts) - counts), counts)
    return keep, np.repeat(first_backward, counts)


def _forward_limits(steps: list[Event], by_phase: dict, to_step_end: bool = False) -> tuple:
    """Per step (four arrays): its start and end, where its data load ends (its start if it has
    none), and where its forward stops: its first backward op (NaN if it has none), or its end
    (`to_step_end`: inference)."""
    data_end, first_backward = _forward_bounds(steps, by_phase)
    if to_step_end:
        first_backward = np.array([s.end_us for s in steps], float)
    return (np.array([s.start_us for s in steps], float), np.array([s.end_us for s in steps], float),
            data_end, first_backward)


def _forward_bounds(steps: list[Event], by_phase: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per step: where its data load ends (its start if it has none) and where its first
    backward op begins (NaN if it has none)."""
    data = by_phase.get("data_load", [])
    data_starts = [s for s, _ in data]
    backward_starts = [s for s, _ in by_phase.get("backward", [])]
    data_end, first_backward = np.empty(len(steps)), np.full(len(steps), np.nan)
    for i, step in enumerate(steps):
        lo, hi = step.start_us, step.end_us
        j = bisect.bisect_left(backward_starts, lo)
        if j < len(backward_starts) and backward_starts[j] < hi:
            first_backward[i] = backward_starts[j]
        # Merged data intervals are disjoint and sorted: the last one starting before the
        # step's end is the one that ends last inside it.
        k = bisect.bisect_left(data_starts, hi) - 1
        data_end[i] = min(data[k][1], hi) if k >= 0 and data[k][1] > lo else lo
    return data_end, first_backward
