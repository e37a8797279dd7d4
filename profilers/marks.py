"""The phase API every runner uses on the host: one `phase()` marks a record_function range,
an NVTX range and a step timer at once."""
from __future__ import annotations

import nvtx

from profilers.phases import check_phase, torch_range_name
from profilers.timers import StepTimer

NVTX_DOMAIN = "gapscope"


def _torch_profiler_enabled() -> bool:
    try:
        from torch.autograd.profiler import _is_profiler_enabled
    except ImportError:
        return False
    return _is_profiler_enabled


class PhaseMarks:
    """Marks the phases of a training loop.

    record_function costs about 5 µs even with no profiler running, a share a 1 ms step
    notices, so it is entered only while a profiler is recording; NVTX ranges cost well
    under 1 µs and stay on, so Nsight Systems sees phases without a torch.profiler window."""

    def __init__(self, timer: StepTimer | None = None, uses_torch: bool = True):
        self.timer = timer or StepTimer()
        self._uses_torch = uses_torch
        self._domain = nvtx.get_domain(NVTX_DOMAIN)
        self._ranges = {}

    def phase(self, name: str) -> "_PhaseRange":
        phase_range = self._ranges.get(name)
        if phase_range is None:
            check_phase(name)
            phase_range = self._ranges[name] = _PhaseRange(self, name)
        return phase_range

    def begin_step(self) -> None:
        self.timer.begin_step()

    def end_step(self, loss=None) -> None:
        self.timer.end_step(loss)

    def _recording(self) -> bool:
        return self._uses_torch and _torch_profiler_enabled()


class _PhaseRange:
    """Reusable context manager for one phase (not re-entrant: phases do not nest)."""

    __slots__ = ("_marks", "_phase", "_attributes", "_record")

    def __init__(self, marks: PhaseMarks, phase: str):
        self._marks = marks
        self._phase = phase
        self._attributes = marks._domain.get_event_attributes(message=torch_range_name(phase))
        self._record = None

    def __enter__(self):
        marks = self._marks
        marks.timer.begin(self._phase)
        marks._domain.push_range(self._attributes)
        if marks._recording():
            from torch.profiler import record_function
            self._record = record_function(torch_range_name(self._phase))
            self._record.__enter__()
        return self

    def __exit__(self, *exc_info):
        if self._record is not None:
            self._record.__exit__(*exc_info)
            self._record = None
        self._marks._domain.pop_range()
        self._marks.timer.end(self._phase)
        return False
