"""Per step and per phase: the allocator's high-water mark, its net change and the bytes allocated and freed."""
from __future__ import annotations

from dataclasses import dataclass, field

from analysis.events.timeline import PhaseTimeline
from analysis.measures.memory.levels import Levels
from profilers.phases import PHASES


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
    """One StepMemory per step of the timeline; each instant of a step goes to the phase
    the timeline gives it (the five phases cover the step once), so the phases' net changes
    add up to the step's."""
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
        for seg_start, seg_end, phase in timeline.covering(index):
            inside = levels.between(seg_start, seg_end)
            # The level the phase entered the step at, then what its own allocations reached:
            # where threads overlap (TF), a later segment may start while another phase's
            # blocks are live, which is no mark of this phase's.
            entered = step.high_water.get(phase, levels.at(seg_start))
            step.high_water[phase] = max([entered] + [levels.allocated[i] for i in inside])
            step.net[phase] = step.net.get(phase, 0) + sum(levels.events[i].nbytes for i in inside)
            if phase == "forward":
                step.after_forward = levels.at(seg_end)
        for phase in PHASES:  # a phase the step never entered keeps nothing
            step.net.setdefault(phase, 0)
        found.append(step)
    return found
