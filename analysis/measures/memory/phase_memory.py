"""Per step and per phase: the allocator's high-water mark, its net change and the bytes allocated and freed."""
from __future__ import annotations

from dataclasses import dataclass, field

from gapscope.analysis.events.phase_rules import gapscope_phase
from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.measures.memory.levels import Levels
from gapscope.profilers.phases import PHASES


@dataclass
class StepMemory:
    step: int
    peak_allocated: int            # bytes: the highest level the step reached
    peak_reserved: int | None      # bytes: a caching allocator's highest reservation
    start: int                     # level when the step began
    end: int                       # level when it ended
    allocated: int                 # bytes of every allocation in the step
    freed: int                     # bytes of every free in the step
    high_water: dict[str, int] = field(default_factory=dict)  # per phase, bytes
    net: dict[str, int] = field(default_factory=dict)         # per phase: bytes kept (+) or given back (-)
    after_forward: int | None = None  # level when forward ended: what the step holds for backward

    @property
    def churn(self) -> int:
        """Bytes freed and allocated again within the step: what a step takes and gives back."""
        return min(self.allocated, self.freed)


def step_memory(levels: Levels, timeline: PhaseTimeline) -> list[StepMemory]:
    """One StepMemory per step of the timeline. An event goes to the phase its op's name says
    where it says one (TF's `gapscope_forward/...`, `gradient_tape/...`: its executor runs ops of
    two phases at once on several threads, which time alone cannot split), else to the phase
    the timeline gives its instant; so the phases' net changes add up to the step's."""
    found = []
    for index, window in enumerate(timeline.steps):
        start_level = levels.at(window.start_us)
        events = levels.between(window.start_us, window.end_us)
        peak = max([start_level] + [levels.allocated[i] for i in events])
        reserved = [r for r in [levels.reserved_at(window.start_us)]
                    + [levels.reserved[i] for i in events] if r is not None]
        step = StepMemory(timeline.step_number(index), peak, max(reserved) if reserved else None,
                          start_level, levels.at(window.end_us),
                          sum(levels.events[i].nbytes for i in events if levels.events[i].nbytes > 0),
                          -sum(levels.events[i].nbytes for i in events if levels.events[i].nbytes < 0))
        # Each phase's mark starts at the level it entered the step at.
        for seg_start, seg_end, phase in timeline.covering(index):
            step.high_water.setdefault(phase, levels.at(seg_start))
            if phase == "forward":
                step.after_forward = levels.at(seg_end)
        for i in events:
            event = levels.events[i]
            phase = event_phase(event, timeline, index)
            step.net[phase] = step.net.get(phase, 0) + event.nbytes
            level = levels.allocated[i]
            step.high_water[phase] = max(step.high_water.get(phase, level - event.nbytes), level)
        for phase in PHASES:  # a phase the step never entered keeps nothing
            step.net.setdefault(phase, 0)
        found.append(step)
    return found


def event_phase(event, timeline: PhaseTimeline, step: int) -> str:
    """The phase an allocator event belongs to: its op's name where that says one, else the
    phase of its instant in the step."""
    return (gapscope_phase(event.op) if event.op else None) or timeline.phase_at(step, event.ts_us)
