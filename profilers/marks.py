"""The phase API every runner uses on the host: one `phase()` marks a record_function range,
an NVTX range and a step timer at once."""
from __future__ import annotations

import importlib

import nvtx

from gapscope.profilers.phases import check_phase, torch_range_name
from gapscope.profilers.timers import StepTimer

NVTX_DOMAIN = "gapscope"


class _NoTorchProfiler:
    _is_profiler_enabled = False


def _torch_profiler_state():
    """torch's module whose `_is_profiler_enabled` flag is True while any profiler records."""
    try:
        return importlib.import_module("torch.autograd.profiler")
    except ImportError:
        return _NoTorchProfiler


class PhaseMarks:
    """Marks the phases of a training loop.

    record_function costs about 5 µs even with no profiler running, a share a 1 ms step
    notices, so it is entered only while a profiler is recording; NVTX ranges cost well
    under 1 µs and stay on, so Nsight Systems sees phases without a torch.profiler window."""

    def __init__(self, timer: StepTimer | None = None, uses_torch: bool = True):
        # `is None`, not `or`: a StepTimer with no steps yet is falsy (it has __len__).
        self.timer = timer if timer is not None else StepTimer()
        self.profiler_state = _torch_profiler_state() if uses_torch else _NoTorchProfiler
        self.domain = nvtx.get_domain(NVTX_DOMAIN)
        self._ranges: dict[str, _PhaseRange] = {}

    def phase(self, name: str) -> "_PhaseRange":
        phase_range = self._ranges.get(name)
        if phase_range is None:
            phase_range = self._ranges[check_phase(name)] = _PhaseRange(self, name)
        return phase_range

    def begin_step(self) -> None:
        self.timer.begin_step()

    def end_step(self, loss=None) -> None:
        self.timer.end_step(loss)


class _PhaseRange:
    """Reusable context manager for one phase (not re-entrant: phases do not nest).

    Everything the hot path touches is bound once here: a mark is then two clock reads, an
    NVTX push/pop and one list append."""

    __slots__ = ("_phase", "_name", "_now", "_add", "_push", "_pop", "_attributes",
                 "_profiler_state", "_start", "_record")

    def __init__(self, marks: PhaseMarks, phase: str):
        self._phase = phase
        self._name = torch_range_name(phase)
        self._now = marks.timer.now
        self._add = marks.timer.add_phase
        self._push = marks.domain.push_range
        self._pop = marks.domain.pop_range
        self._attributes = marks.domain.get_event_attributes(message=self._name)
        self._profiler_state = marks.profiler_state
        self._start = None
        self._record = None

    def __enter__(self):
        self._push(self._attributes)
        if self._profiler_state._is_profiler_enabled:
            from torch.profiler import record_function
            self._record = record_function(self._name)
            self._record.__enter__()
        self._start = self._now()
        return self

    def __exit__(self, *exc_info):
        end = self._now()
        if self._record is not None:
            self._record.__exit__(*exc_info)
            self._record = None
        self._pop()
        self._add((self._phase, self._start, end))
        return False
