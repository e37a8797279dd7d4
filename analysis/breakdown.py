"""Breaks every step of a Trace, or of the step timers, into the five phases."""
from __future__ import annotations

import bisect
import statistics
from collections import defaultdict

from analysis import intervals
from profilers.errors import GapscopeInputError
from analysis.phase_rules import (FRAMEWORK, INFERRED, MARKED, MISSING, NOT_APPLICABLE,
                                  framework_phase, gapscope_phase)
from analysis.results import Breakdown, StepBreakdown
from analysis.trace import ANNOTATION, HOST_OP, STEP, Event, Trace
from profilers.phases import MARKED_PHASES, STEP_PREFIX

# Where host work of two phases overlaps (TF runs ops on several threads), the instant goes
# to the first phase in this order: compute before input, since input work that overlaps
# compute (prefetch) does not cost step time. Each instant counts once, so phases add up.
PRIORITY = ("forward", "backward", "optimizer", "data_load")


def _mark_not_applicable(sources: dict, runs_phases) -> None:
    """An inference run has no backward or optimizer: those are not applicable, not missing."""
    for phase in MARKED_PHASES:
        if phase not in runs_phases:
            sources[phase] = NOT_APPLICABLE


def breakdown_from_trace(trace: Trace, runs_phases=MARKED_PHASES) -> Breakdown:
    steps = step_events(trace)
    if not steps:
        raise GapscopeInputError(
            f"{trace.path}: no training steps found (expected ProfilerStep#N, gapscope/step#N "
            "or a TF trace with step_num)")
    by_phase, sources = phase_intervals(trace, steps)
    _mark_not_applicable(sources, runs_phases)
    per_step = []
    for index, step in enumerate(steps):
        lo, hi = step.start_us, step.end_us
        taken: list[intervals.Interval] = []
        marked_ms = {}
        for phase in PRIORITY:
            own = intervals.clip(by_phase.get(phase, []), lo, hi)
            exclusive = intervals.subtract(own, taken)
            marked_ms[phase] = intervals.total(exclusive) / 1000.0
            taken = intervals.merge(taken + own)
        number = step.step_num if step.step_num is not None else index
        per_step.append(StepBreakdown.from_marked(number, step.dur_us / 1000.0, marked_ms))
    notes = []
    if sources.get("forward") == INFERRED:
        notes.append("forward inferred: host ops between data load and the first backward op")
    missing = [p for p in MARKED_PHASES if sources[p] == MISSING]
    if missing:
        notes.append(f"not identified in this trace (counted in other): {', '.join(missing)}")
    return Breakdown("trace", per_step, phase_sources=sources, notes=notes)


def breakdown_from_timers(rows: list[dict], warmup_steps: int,
                          runs_phases=MARKED_PHASES) -> Breakdown:
    """Steps from the per-step timers (steps.csv rows); warm-up steps become compile_ms."""
    if len(rows) <= warmup_steps:
        raise GapscopeInputError(
            f"only {len(rows)} timed steps, all of them warm-up ({warmup_steps}): run more steps")
    steady = rows[warmup_steps:]
    # Steps inside a profiler window carry its overhead; use the untraced ones where any.
    steady = [r for r in steady if not r.get("traced")] or steady
    timed = [p for p in MARKED_PHASES if any(r.get(f"{p}_ms") is not None for r in steady)]
    per_step = [StepBreakdown.from_marked(int(r["step"]), r["step_ms"],
                                          {p: r[f"{p}_ms"] or 0.0 for p in timed}, r.get("loss"))
                for r in steady]
    sources = {p: MARKED if p in timed else MISSING for p in MARKED_PHASES}
    _mark_not_applicable(sources, runs_phases)
    notes = []
    if any(source == MISSING for source in sources.values()):
        notes.append("phases inside a compiled step are not visible to host timers; "
                     "run with --trace for them")
    return Breakdown("timers", per_step, compile_ms=compile_ms(rows, warmup_steps),
                     phase_sources=sources, notes=notes)


def compile_ms(rows: list[dict], warmup_steps: int) -> float | None:
    """One-time cost of the warm-up steps: what they took beyond a steady-state step."""
    if warmup_steps == 0 or len(rows) <= warmup_steps:
        return None
    median = statistics.median(r["step_ms"] for r in rows[warmup_steps:])
    return sum(max(0.0, r["step_ms"] - median) for r in rows[:warmup_steps])


def per_update(result: Breakdown, steps_per_execution: int, steps_run: int,
               steps_per_epoch: int) -> Breakdown:
    """With steps_per_execution = N, one traced step event is one call running up to N updates
    (fewer at an epoch's end): split each into its updates, each an equal share."""
    updates = []
    for call in result.steps:
        first = call.step
        count = max(1, min(steps_per_execution, steps_run - first,
                           steps_per_epoch - first % steps_per_epoch))
        updates += [StepBreakdown(first + i, call.step_ms / count,
                                  {p: ms / count for p, ms in call.phase_ms.items()}, call.loss)
                    for i in range(count)]
    result.steps = updates
    result.notes.append(f"each traced call ran up to {steps_per_execution} updates "
                        "(steps_per_execution); figures are per update")
    if result.steps and result.steps[0].step == 0:
        result.notes.append("the traced call began at the first update, so its figures include "
                            "warm-up (tracing, compilation): run more steps than "
                            "steps_per_execution for a steady state")
    return result


def trace_overhead_pct(rows: list[dict], warmup_steps: int) -> float | None:
    """Profiling distorts small steps: median traced step against median untraced step."""
    steady = rows[warmup_steps:]
    traced = [r["step_ms"] for r in steady if r.get("traced")]
    untraced = [r["step_ms"] for r in steady if not r.get("traced")]
    if not traced or not untraced:
        return None
    return 100.0 * (statistics.median(traced) / statistics.median(untraced) - 1.0)


def step_events(trace: Trace) -> list[Event]:
    """Host step events; gapscope's own step ranges win over ProfilerStep when both exist."""
    steps = [e for e in trace.events if e.kind == STEP]
    own = [e for e in steps if e.name.startswith(STEP_PREFIX)]
    return sorted(own or steps, key=lambda e: e.start_us)


def phase_intervals(trace: Trace, steps: list[Event]):
    """Merged intervals per phase, from the best marker source the trace has for each."""
    found: dict[tuple[str, str], list] = defaultdict(list)
    unclaimed_ops: list[Event] = []
    for event in trace.events:
        if event.kind not in (ANNOTATION, HOST_OP) or not event.track.startswith("host"):
            continue
        phase = gapscope_phase(event.name)
        if phase:
            found[(phase, MARKED)].append((event.start_us, event.end_us))
            continue
        phase = framework_phase(event.name)
        if phase:
            found[(phase, FRAMEWORK)].append((event.start_us, event.end_us))
        elif event.kind == HOST_OP:
            unclaimed_ops.append(event)

    by_phase, sources = {}, {}
    for phase in MARKED_PHASES:
        for source in (MARKED, FRAMEWORK):
            if found.get((phase, source)):
                by_phase[phase] = intervals.merge(found[(phase, source)])
                sources[phase] = source
                break
        else:
            sources[phase] = MISSING
    if sources["forward"] == MISSING and sources["backward"] != MISSING:
        forward = _infer_forward(unclaimed_ops, steps, by_phase)
        if forward:
            by_phase["forward"] = forward
            sources["forward"] = INFERRED
    return by_phase, sources


def _infer_forward(ops: list[Event], steps: list[Event], by_phase: dict) -> list:
    """Forward in an unmarked trace: host ops of a step after its data load ends and before
    its first backward op begins (the loss computation included)."""
    starts = [s.start_us for s in steps]
    data = by_phase.get("data_load", [])
    backward_starts = [s for s, _ in by_phase["backward"]]
    found = []
    for op in ops:
        i = bisect.bisect_right(starts, op.start_us) - 1
        if i < 0 or op.start_us >= steps[i].end_us:
            continue
        lo, hi = steps[i].start_us, steps[i].end_us
        first_backward = next((b for b in backward_starts[bisect.bisect_left(backward_starts, lo):]
                               if b < hi), None)
        data_end = max((e for s, e in intervals.clip(data, lo, hi)), default=lo)
        if first_backward is not None and data_end <= op.start_us < first_backward:
            found.append((op.start_us, min(op.end_us, first_backward)))
    # Ops inside a marked range (zero_grad's aten::zero_, say) belong to that range's phase.
    marked = intervals.merge([i for phase in by_phase.values() for i in phase])
    return intervals.subtract(intervals.merge(found), marked)
