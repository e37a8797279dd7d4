"""Which steps a profiler records: after warm-up and compile, so one-time costs stay out of the trace."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TraceWindow:
    first: int   # first recorded step (0-based)
    steps: int   # number of recorded steps

    @classmethod
    def after_warmup(cls, warmup_steps: int, trace_steps: int, total_steps: int) -> "TraceWindow":
        first = max(1, warmup_steps)
        return cls(first, max(0, min(trace_steps, total_steps - first)))

    @property
    def last(self) -> int:
        return self.first + self.steps - 1

    def __contains__(self, step: int) -> bool:
        return self.first <= step <= self.last
