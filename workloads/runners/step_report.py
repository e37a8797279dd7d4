"""Tells the parent process, from the run's child process, how many steps are done: one line on
stdout every half second from a thread, so the timed steps never wait on it."""
from __future__ import annotations

import sys
import threading

from gapscope.profilers.timers import StepTimer

PREFIX = "gapscope-steps-done "
INTERVAL_S = 0.5


def parse(line: str) -> int | None:
    """The step count a progress line carries, or None for any other output line."""
    if not line.startswith(PREFIX):
        return None
    try:
        return int(line[len(PREFIX):])
    except ValueError:
        return None


class StepReporter:
    """Counts the steps of the process's latest StepTimer; `per_count` updates per timed step
    (Keras times whole calls of steps_per_execution updates)."""

    def __init__(self, per_count: int = 1):
        self._per_count = per_count
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gapscope-step-report", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._say()

    def _loop(self):
        while not self._stop.wait(INTERVAL_S):
            self._say()

    def _say(self):
        timer = StepTimer.latest
        if timer is not None:
            print(f"{PREFIX}{len(timer) * self._per_count}", file=sys.stdout, flush=True)
