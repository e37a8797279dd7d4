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

    @classmethod
    def at_end(cls, warmup_steps: int, trace_steps: int, total_steps: int) -> "TraceWindow":
        """The run's last steps, so that every unprofiled step is timed before the profiler ever
        started: what it leaves behind cannot reach them. Measured on a torch CNN (2-core CPU):
        after a window right after the warm-up, glibc's allocator stayed in one of two page-fault
        regimes for the rest of the process (about 14,600 or 25,400 minor faults a step; steps
        72 or 90 ms), where a plain loop alternates between them step by step; so gapscope's
        processes spread 3x more than plain ones (benchmarks/README.md, process_spread)."""
        earliest = cls.after_warmup(warmup_steps, trace_steps, total_steps)
        return cls(max(earliest.first, total_steps - earliest.steps), earliest.steps)

    @property
    def last(self) -> int:
        return self.first + self.steps - 1

    def __contains__(self, step: int) -> bool:
        return self.first <= step <= self.last
