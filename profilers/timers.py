"""Per-step phase timers: perf_counter on the host, CUDA events on a GPU, read only after the run."""
from __future__ import annotations

import time

from profilers.phases import MARKED_PHASES


class HostClock:
    """Wall-clock marks; on a CPU the work is done when the call returns, so host time is step time."""

    def mark(self) -> int:
        return time.perf_counter_ns()

    @staticmethod
    def elapsed_ms(start: int, end: int) -> float:
        return (end - start) / 1e6

    def resolve(self) -> None:
        pass


class CudaEventClock:
    """CUDA events recorded on the current stream: they time the device's work without a
    synchronize inside the step; all are read once, after the last step."""

    def __init__(self):
        import torch
        self._event = lambda: torch.cuda.Event(enable_timing=True)
        self._synchronize = torch.cuda.synchronize

    def mark(self):
        event = self._event()
        event.record()
        return event

    @staticmethod
    def elapsed_ms(start, end) -> float:
        return start.elapsed_time(end)

    def resolve(self) -> None:
        self._synchronize()


class StepTimer:
    """Collects, per step, the time of each marked phase and of the whole step.

    Marks are kept raw (timestamps or events) and turned into milliseconds in `rows()`,
    so the hot path costs two clock reads per phase and nothing else."""

    def __init__(self, clock=None):
        self.clock = clock or HostClock()
        self._steps: list[tuple[object, object, list, object]] = []
        self._open: dict[str, object] = {}
        self._phase_marks: list[tuple[str, object, object]] = []
        self._step_start = None

    def begin_step(self) -> None:
        self._phase_marks = []
        self._step_start = self.clock.mark()

    def begin(self, phase: str) -> None:
        self._open[phase] = self.clock.mark()

    def end(self, phase: str) -> None:
        self._phase_marks.append((phase, self._open.pop(phase), self.clock.mark()))

    def end_step(self, loss=None) -> None:
        """loss may be a tensor: it is read after the run, so reading it never stalls a step."""
        self._steps.append((self._step_start, self.clock.mark(), self._phase_marks, loss))
        self._step_start = None

    def __len__(self) -> int:
        return len(self._steps)

    def rows(self, timed_phases=MARKED_PHASES) -> list[dict]:
        """One dict per step with step_ms, <phase>_ms for the phases this timer saw, and loss."""
        self.clock.resolve()
        rows = []
        for number, (start, end, marks, loss) in enumerate(self._steps):
            row = {"step": number, "step_ms": self.clock.elapsed_ms(start, end)}
            for phase in timed_phases:
                row[f"{phase}_ms"] = 0.0
            for phase, phase_start, phase_end in marks:
                row[f"{phase}_ms"] += self.clock.elapsed_ms(phase_start, phase_end)
            row["loss"] = _as_float(loss)
            rows.append(row)
        return rows


def _as_float(loss) -> float | None:
    if loss is None:
        return None
    if hasattr(loss, "item"):
        return float(loss.item())
    return float(loss)
