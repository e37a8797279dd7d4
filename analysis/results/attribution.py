"""Host time against device time per phase: device work goes to the phase that launched it, not
to whatever the host was doing while it ran; the step time the device sat idle is dispatch cost."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from gapscope.analysis.events import intervals
from gapscope.analysis.events.hlo_metadata import MIXED, UNATTRIBUTED
from gapscope.analysis.measures.kernels import DEVICE_KERNELS, NOT_TRACED, Work
from gapscope.analysis.measures.runtime_calls import calls_by_phase, queued
from gapscope.analysis.results.records import Breakdown
from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.profilers.phases import PHASES


@dataclass
class Attribution:
    """Means per steady-state step, in ms. On the CPU the "device" is the cores running the
    ops or thunks that stand for kernels, and device time is the time inside them."""

    device_kind: str                  # "gpu", "cpu" or "none" (a GPU run whose device was not traced)
    steps: int
    host_ms: dict[str, float]         # the breakdown's phases (host view)
    device_ms: dict[str, float]       # busy time of the work each phase launched (+ mixed / unattributed)
    device_busy_ms: float             # step window with device work, streams merged (+ idle = step)
    device_idle_ms: float             # step window with no device work at all
    late_ms: float                    # work launched in the step that ran after the step ended
    launches_per_step: float | None   # GPU: runtime calls that queue work
    launch_ms: float | None           # GPU: host time in those calls
    # GPU: {phase: {launch|copy|sync: {count_per_step, ms_per_step}}}, runtime calls by the phase
    # they were made in; sync = the host blocked until the device finished.
    calls_by_phase: dict[str, dict] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def dispatch_ms(self) -> float:
        """Host time not overlapped by device work: launching, Python, framework bookkeeping."""
        return self.device_idle_ms

    def to_json_dict(self) -> dict:
        doc = {k: _r(v) for k, v in self.__dict__.items()}
        doc["dispatch_ms"] = _r(self.dispatch_ms)
        return doc


def attribute(work: Work, timeline: PhaseTimeline, breakdown: Breakdown) -> Attribution:
    steps = timeline.steps
    n = max(work.steps, 1)  # per update: a traced call may run several (steps_per_execution)
    by_step_phase: dict[tuple[int, str], list] = defaultdict(list)
    by_step: dict[int, list] = defaultdict(list)
    for item in work.items:
        by_step_phase[(item.step, item.phase)] += item.busy
        by_step[item.step] += item.busy
    everything = intervals.merge([i for item in work.items for i in item.busy])

    buckets = list(PHASES) + [b for b in (MIXED, UNATTRIBUTED)
                              if any(phase == b for _, phase in by_step_phase)]
    device_ms = {b: sum(intervals.total(intervals.merge(by_step_phase.get((i, b), [])))
                        for i in range(len(steps))) / n / 1000.0 for b in buckets}
    busy = late = idle = 0.0
    for i, step in enumerate(steps):
        own = intervals.merge(by_step.get(i, []))
        late += intervals.total(intervals.clip(own, step.end_us, float("inf")))
        # Busy is the union of every device interval inside the step's window, whichever step
        # launched it: work that spills past the window counts in the next step's, where it
        # ran, and streams that overlap count once. So busy + idle = the step, never more.
        inside = intervals.total(intervals.clip_merged(everything, step.start_us, step.end_us))
        busy += inside
        idle += step.dur_us - inside

    gpu = work.source == DEVICE_KERNELS
    launches = queued(work.launches) if gpu else []
    notes = list(work.notes)
    untraced = work.source == NOT_TRACED
    if untraced:
        idle = 0.0  # no device seen: neither its busy time nor its idle time is known
    elif not gpu:
        notes.append("CPU run: device time = time inside the executed ops/thunks that stand for kernels")
    return Attribution(
        device_kind="gpu" if gpu else "none" if untraced else "cpu", steps=work.steps,
        host_ms=_host_view(breakdown),
        device_ms=device_ms,
        device_busy_ms=busy / n / 1000.0, device_idle_ms=idle / n / 1000.0, late_ms=late / n / 1000.0,
        launches_per_step=len(launches) / n if gpu else None,
        launch_ms=sum(e.dur_us for e in launches) / n / 1000.0 if gpu else None,
        calls_by_phase=calls_by_phase(work.launches, timeline, n) if gpu else {},
        notes=notes)


def _host_view(breakdown: Breakdown) -> dict[str, float]:
    """The phases as the trace recorded them: device time is the trace's too, so the two
    sides of the comparison carry the same profiler cost."""
    return {p: f.trace_ms if f.trace_ms is not None else f.ms for p, f in breakdown.phases.items()}


def _r(value):
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _r(v) for k, v in value.items()}
    return value

