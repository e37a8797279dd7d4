"""The run directory of a user's own training loop, from creation to how it ended."""
from __future__ import annotations

import re
import traceback
import warnings
from pathlib import Path

from profilers import environment
from profilers.run_dir import Manifest, create_run_dir, new_run_id, write_steps_csv
from profilers.trace_window import TraceWindow

USER_VARIANT = "user"
INTERRUPTED = "interrupted"
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


class UserRun:
    """Creates the run directory at once (status running) and records the end exactly once:
    complete with its steps, or failed with the error, also when the loop raised or was
    interrupted, so a half-written run is never mistaken for a finished one."""

    def __init__(self, name: str, framework: str, out: str | Path, settings: dict,
                 warmup_steps: int):
        workload = _UNSAFE.sub("-", str(name)).strip("-.")
        if not workload:
            raise ValueError(f"run name {name!r} has no letters or digits to name a directory with")
        self.run_dir = create_run_dir(out, new_run_id(workload, framework, USER_VARIANT))
        self.manifest = Manifest.start(self.run_dir, {
            "run_id": self.run_dir.name, "workload": workload, "framework": framework,
            "variant": USER_VARIANT, "settings": settings, "warmup_steps": warmup_steps,
            "host": environment.host(), "device": None, "versions": None,
        })
        self.finished = False

    def complete(self, rows: list[dict], facts: dict) -> None:
        self._record(rows, facts)
        self.manifest.finish()
        self.finished = True
        self._write_summaries()

    def fail(self, rows: list[dict], facts: dict, exc: BaseException) -> None:
        """The steps done before the failure are kept: they show how far the loop got."""
        self._record(rows, facts)
        if isinstance(exc, KeyboardInterrupt):
            self.manifest.finish(error=INTERRUPTED)
        else:
            self.manifest.update(traceback="".join(traceback.format_exception(exc)))
            self.manifest.finish(error=f"{type(exc).__name__}: {exc}")
        self.finished = True

    def _record(self, rows: list[dict], facts: dict) -> None:
        write_steps_csv(self.run_dir, rows)
        self.manifest.update(**facts, versions=environment.versions(),
                             final_loss=rows[-1]["loss"] if rows else None)

    def _write_summaries(self) -> None:
        """TensorBoard summaries are a view of the run: failing to write them must not turn a
        finished training loop into an exception, so the problem is recorded and warned of."""
        from analysis.summaries import write_after_run
        problem = write_after_run(self.run_dir)
        if problem:
            warnings.warn(f"gapscope: no TensorBoard summaries for {self.run_dir}: {problem}",
                          stacklevel=3)
