"""The run directory of a user's own training loop, from creation to how it ended."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

from profilers.run_lifecycle import RunLifecycle
from profilers.trace_window import TraceWindow

USER_VARIANT = "user"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def trace_window(trace_steps: tuple[int, int] | None) -> TraceWindow | None:
    """`(first, stop)` as in `range(first, stop)`; None records no trace (timers only).

    The first traced step must be 1 or later: the profiler spends one step warming up
    before its window, and that step is better taken from the user's warm-up."""
    if trace_steps is None:
        return None
    first, stop = (int(n) for n in trace_steps)
    if first < 1 or stop <= first:
        raise ValueError(f"trace_steps must be (first, stop) with 1 <= first < stop, got {trace_steps!r}")
    return TraceWindow(first, stop - first)


def default_warmup(window: TraceWindow | None, warmup_steps: int | None) -> int:
    """Unless told, the first 5 steps are warm-up, or fewer where the trace starts earlier."""
    if warmup_steps is not None:
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        return warmup_steps
    return min(5, window.first) if window else 5


class UserRun(RunLifecycle):
    """The run directory of a capture, named after the user's run; its life (pid and host,
    complete or failed, interrupted) is run_lifecycle's, as for gapscope's own runs.

    No signal handlers are set here: the process is the user's. Ctrl-C reaches the loop as
    KeyboardInterrupt and is recorded as interrupted; a SIGTERM that kills the process leaves
    the manifest `running` with a pid that is gone, which effective_status reads as interrupted."""

    def __init__(self, name: str, framework: str, out: str | Path, settings: dict,
                 warmup_steps: int):
        workload = _UNSAFE.sub("-", str(name)).strip("-.")
        if not workload:
            raise ValueError(f"run name {name!r} has no letters or digits to name a directory with")
        run = RunLifecycle.create(out, (workload, framework, USER_VARIANT), {
            "workload": workload, "framework": framework, "variant": USER_VARIANT,
            "settings": settings, "warmup_steps": warmup_steps, "device": None, "versions": None,
        })
        super().__init__(run.run_dir, run.manifest)

    def complete(self, rows: list[dict], facts: dict) -> None:
        """TensorBoard's summaries and trace viewer are views of the run: failing to write them
        must not turn a finished training loop into an exception, so the problem is recorded and
        warned of."""
        problem = super().complete(rows, facts)
        if problem:
            warnings.warn(f"gapscope: TensorBoard views of {self.run_dir} incomplete: {problem}",
                          stacklevel=3)
