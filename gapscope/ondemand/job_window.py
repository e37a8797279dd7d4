"""The job's side of on-demand capture: SIGUSR2 raises a flag, checked once per step; the flag
starts torch.profiler for the requested steps, written as a run directory of their own beside
the job's, which holds the job's steps so far and the window marked as traced."""
from __future__ import annotations

import os
import signal
import threading
import warnings
from pathlib import Path

from gapscope.ondemand.live_steps import LiveSteps
from gapscope.ondemand.registry import (MAX_WINDOW_STEPS, TRIGGER, Registration, read_request, register,
                                        request_path)
from gapscope.profilers.run_dir import mark_rows
from gapscope.profilers.run_lifecycle import RunLifecycle
from gapscope.profilers.torch_session import torch_profiler
from gapscope.profilers.trace_window import TraceWindow

# Fields of the job's manifest its windows repeat, so that compare pairs them with the job.
_COPIED = ("workload", "framework", "variant", "settings", "warmup_steps")


class OnDemandWindows:
    """`wanted` is the one thing a step looks at: True while a request or a window is under way,
    or the live steps.csv is due for its once-a-second flush (LiveSteps). A request that comes
    while the job's own trace window is pending waits for it to end: two torch profilers cannot
    record at once."""

    wanted = False

    def __init__(self, run, cuda: bool, device_name, session, timer, warmup_steps: int):
        """`session`: the job's own TorchStepSession (its window and whether it is done);
        `timer`: the job's StepTimer."""
        self._run, self._cuda = run, cuda
        self._device_name, self._session = device_name, session
        self._asked = False
        self._live = LiveSteps(run.run_dir, timer, warmup_steps, self._want)
        self._registration: Registration | None = None
        self._request: int | None = None  # the inode of the request the window answers
        self._withdrawn = False
        self._previous = None
        self._profiler = None
        self._first: int | None = None   # the profiler's warm-up step; the window follows it
        self._steps = 0
        self._window_dir: Path | None = None
        self._window_run: RunLifecycle | None = None
        self._recorded: set[int] = set()  # the windows' steps, each with its warm-up step
        self._teardowns: list[int] = []   # the step after each window, which paid its teardown

    def open(self) -> "OnDemandWindows":
        """Registers the job and handles SIGUSR2; only in the main thread of a process whose
        handler for it is the default. Elsewhere the entry says why it cannot be asked, so
        that `gapscope capture --pid` says so (and sends nothing)."""
        why_not = None
        if threading.current_thread() is not threading.main_thread():
            why_not = ("its capture loop runs outside the main thread, where Python cannot "
                       f"handle {TRIGGER.name}")
        elif signal.getsignal(TRIGGER) is not signal.SIG_DFL:
            why_not = f"it has a {TRIGGER.name} handler of its own, which gapscope keeps"
        registered = register(self._run.run_dir, unavailable=why_not)
        if isinstance(registered, str):
            warnings.warn(f"gapscope: on-demand capture is off for this job: {registered}", stacklevel=3)
        else:
            self._registration = registered
            if why_not is None:
                self._previous = signal.signal(TRIGGER, self._on_signal)
        self._live.start()
        return self

    @property
    def traced(self) -> set[int]:
        """The job's steps a window ran in or slowed, for mark_rows, which adds the step after
        the last of them itself."""
        return self._recorded | set(self._teardowns[:-1])

    def _on_signal(self, signum, frame):
        self._asked = True
        self.wanted = True

    def _want(self):
        self.wanted = True

    def after_step(self, done: int, rows) -> None:
        """Called at a step's end while `wanted`; `done`: steps finished; `rows()`: the job's
        step rows so far. A window that fails (a full disk) is recorded as failed and warned of:
        the job's training goes on."""
        try:
            if self._live.due:
                self._live.flush(self._known_traced(done))
            if self._asked:
                self._advance(done, rows)
        except Exception as exc:  # noqa: BLE001 - the user's job must not die of a window
            self._abandon(exc)
        # A tick between the flush and here is taken at the next one.
        self.wanted = self._asked or self._live.due

    def _known_traced(self, done: int) -> set[int]:
        known = set(self._session.traced_steps(done) or ()) | self.traced
        if self._first is not None:
            known.update(range(self._first, done))
        return known

    def _advance(self, done: int, rows) -> None:
        if self._first is None:
            if self._session.done:
                self._start(done)
        elif self._profiler is not None:
            self._profiler.step()
            if not self._asker_waits():  # timed out or interrupted: the window ends here
                self._steps, self._withdrawn = done - 1 - self._first, True
            if done - self._first >= self._steps + 1:  # its warm-up step and the window ended
                profiler, self._profiler = self._profiler, None
                profiler.__exit__(None, None, None)
        else:  # the step after the window paid the profiler's teardown: it ends the window
            self._write(rows(), done)

    def _asker_waits(self) -> bool:
        """Whether the request this window answers is still there (a stat a traced step)."""
        try:
            return os.stat(request_path(os.getpid())).st_ino == self._request
        except OSError:
            return False

    def _drop_request(self) -> None:
        """Removes the request this window answered, not one that came after it."""
        if self._asker_waits():
            request_path(os.getpid()).unlink(missing_ok=True)
        self._request = None

    def _abandon(self, exc: Exception) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            try:
                profiler.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - already failing; the first error is the one told
                pass
        if self._first is not None and self._window_run is not None:
            self._window_run.fail(None, {}, exc)
        warnings.warn(f"gapscope: on-demand window of {self._run.run_dir} failed: {exc}", stacklevel=3)
        self._drop_request()
        self._first, self._window_dir, self._window_run, self._asked = None, None, None, False

    def close(self, rows=None) -> None:
        """The job ends: a window under way is saved with the steps it got."""
        self._live.stop()
        if self._profiler is not None:
            profiler, self._profiler = self._profiler, None
            profiler.__exit__(None, None, None)
        if self._first is not None and rows is not None:
            self._write(rows(), None)
        if self._previous is not None:
            signal.signal(TRIGGER, self._previous)
            self._previous = None
        if self._registration is not None:
            self._registration.close()  # the entry and a request left for it
            self._registration = None

    # -- a window ------------------------------------------------------------------------
    def _start(self, done: int) -> None:
        pid = os.getpid()
        request = read_request(pid, self._registration.token) if self._registration else None
        try:
            steps, self._window_dir = int(request["steps"]), Path(request["window_dir"])
            self._request = os.stat(request_path(pid)).st_ino
        except (TypeError, KeyError, ValueError, OSError):
            # A signal with no request of ours (someone else's SIGUSR2), or one withdrawn already.
            self._asked = False
            return
        # Capped here too: a profiler holds every event of its window in memory until it ends.
        self._steps = max(1, min(steps, MAX_WINDOW_STEPS))
        if self._window_dir.parent != self._run.run_dir.resolve().parent or self._window_dir.exists():
            self._asked = False  # only a new folder beside the job's run is written
            return
        self._window_dir.mkdir()
        self._first = done
        fields = {key: self._run.manifest.data.get(key) for key in _COPIED}
        self._window_run = RunLifecycle.start(self._window_dir, {
            **fields, "device": self._device_name(), "versions": None,
            "on_demand": {"job_run": str(self._run.run_dir), "steps": self._steps}})
        self._withdrawn = False
        self._profiler = torch_profiler(self._window_dir, TraceWindow(1, self._steps), self._cuda)
        self._profiler.__enter__()

    def _write(self, rows: list[dict], done: int | None) -> None:
        """The window's run: the job's steps so far, every step a profiler ran in (the job's own
        window, earlier windows, this one with its warm-up step) marked traced, so that its
        unprofiled steps are the job's."""
        first, last = self._first + 1, self._first + self._steps
        self._recorded.update(range(self._first, last + 1))
        self._teardowns.append(last + 1)
        traced = set(self._session.traced_steps(len(rows)) or ()) | self.traced
        warmup = self._run.manifest.data.get("warmup_steps") or 0
        rows = mark_rows(rows, warmup, traced)
        if self._withdrawn and self._steps < 1:
            self._window_run.fail(rows, {"steps": len(rows)}, RuntimeError(
                "withdrawn by gapscope capture before a step was traced"))
        elif len(rows) - 1 < first:  # the job ended on the window's warm-up step
            self._window_run.fail(rows, {"steps": len(rows)}, RuntimeError(
                "the job ended before the window traced a step"))
        else:
            facts = {"steps": len(rows), "trace_window": [first, min(last, len(rows) - 1)]}
            self._window_run.complete(rows, {**facts, **({"withdrawn": True} if self._withdrawn else {})})
        self._drop_request()
        self._first, self._window_dir, self._window_run = None, None, None
        # A request that came while this window ran signalled during it: it is taken next.
        self._asked = request_path(os.getpid()).exists()


class NoWindows:
    """A job that cannot be captured on demand (TensorFlow's): never wanted, nothing traced."""

    wanted = False
    traced: frozenset = frozenset()

    def close(self, rows=None) -> None:
        pass

