"""steps.csv while a job runs: about once a second, at a step's end, the steps since the last
flush are appended, so that `gapscope watch` can follow the run. The run's end rewrites the file
whole, with the final warmup and traced flags."""
from __future__ import annotations

import threading
from pathlib import Path

from gapscope.profilers.phases import MARKED_PHASES
from gapscope.profilers.run_dir import STEPS_CSV, mark_rows, steps_csv_text

FLUSH_S = 1.0


class LiveSteps:
    """Appends new rows to `run_dir/steps.csv`; `due` turns True every FLUSH_S seconds (a
    ticker thread that only sets the flag, so the step pays nothing for it)."""

    def __init__(self, run_dir: Path, timer, warmup_steps: int, on_due):
        self._path = Path(run_dir) / STEPS_CSV
        self._timer, self._warmup = timer, warmup_steps
        self._on_due = on_due
        self._written = 0
        self._marks_written = 0
        self.due = False
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="gapscope-live-steps", daemon=True)

    def start(self) -> "LiveSteps":
        self._ticker.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _tick(self) -> None:
        while not self._stop.wait(FLUSH_S):
            self.due = True
            self._on_due()

    def flush(self, traced) -> None:
        """Appends the steps done since the last flush (none while a GPU has not reached the
        last one: reading its events then would wait). `traced`: the steps known so far to have
        run under a profiler."""
        self.due = False
        timer = self._timer
        if len(timer) == self._written or not timer.all_ready():
            return
        marks = timer.phase_marks
        timed = {phase for phase, _, _ in marks[self._marks_written:]}
        rows = timer.rows(timed_phases=[p for p in MARKED_PHASES if p in timed],
                          first_step=self._written, resolve=False)
        mark_rows(rows, self._warmup, traced)
        with open(self._path, "a") as handle:
            handle.write(steps_csv_text(rows, header=self._written == 0))
        self._written += len(rows)
        self._marks_written = len(marks)



class LiveStepsOnly:
    """A job that cannot be captured on demand (TensorFlow's) still appends its steps.csv about
    once a second, as OnDemandWindows does for torch jobs: a process killed outright leaves the
    steps it did. Nothing it steps is traced by it."""

    wanted = False
    traced: frozenset = frozenset()

    def __init__(self, run_dir: Path, timer, warmup_steps: int, session):
        """`session`: the job's own step session, whose window says which steps it traced."""
        self._live = LiveSteps(run_dir, timer, warmup_steps, self._want)
        self._session = session

    def open(self) -> "LiveStepsOnly":
        self._live.start()
        return self

    def _want(self) -> None:
        self.wanted = True

    def after_step(self, done: int, rows) -> None:
        self._live.flush(set(self._session.traced_steps(done) or ()))
        self.wanted = self._live.due  # a tick between the flush and here is taken next step

    def close(self, rows=None) -> None:
        self._live.stop()
