"""The job's side of on-demand capture: SIGUSR2 raises a flag, checked once per step; the flag
starts torch.profiler for the requested steps, written as a run directory of their own beside
the job's, which holds the job's steps so far and the window marked as traced."""
from __future__ import annotations

import signal
import threading
import warnings
from pathlib import Path

from gapscope.ondemand.live_steps import LiveSteps
from gapscope.ondemand.registry import REQUEST, TRIGGER, register, unregister
from gapscope.profilers import state_json
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
        self._entry: Path | None = None
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
        handler for it is the default (a job's own handler is kept, and it is then not
        registered: `gapscope capture` says so)."""
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(TRIGGER) is signal.SIG_DFL):
            self._previous = signal.signal(TRIGGER, self._on_signal)
            self._entry = register(self._run.run_dir)
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
            if done - self._first == self._steps + 1:  # its warm-up step and the window ended
                profiler, self._profiler = self._profiler, None
                profiler.__exit__(None, None, None)
        else:  # the step after the window paid the profiler's teardown: it ends the window
            self._write(rows(), done)

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
        (self._run.run_dir / REQUEST).unlink(missing_ok=True)
        self._first, self._window_dir, self._window_run, self._asked = None, None, None, False

    def close(self, rows=None) -> None:
        """The job ends: a window under way is saved with the steps it got."""
        self._live.stop()
        if self._profiler is not None:
            profiler, self._profiler = self._profiler, None
            profiler.__exit__(None, None, None)
        if self._first is not None and rows is not None:
            self._write(rows(), None)
        if self._entry is not None:
            unregister(self._entry)
            signal.signal(TRIGGER, self._previous)
            self._entry = None
        (self._run.run_dir / REQUEST).unlink(missing_ok=True)

    # -- a window ------------------------------------------------------------------------
    def _start(self, done: int) -> None:
        request = _read_request(self._run.run_dir / REQUEST)
        if request is None:  # a signal with no request: someone else's SIGUSR2
            self._asked = False
            return
        self._steps, self._window_dir = request
        if self._window_dir.parent != self._run.run_dir.resolve().parent or self._window_dir.exists():
            self._asked = False  # only a new folder beside the job's run is written
            return
        self._window_dir.mkdir()
        self._first = done
        fields = {key: self._run.manifest.data.get(key) for key in _COPIED}
        self._window_run = RunLifecycle.start(self._window_dir, {
            **fields, "device": self._device_name(), "versions": None,
            "on_demand": {"job_run": str(self._run.run_dir), "steps": self._steps}})
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
        self._window_run.complete(mark_rows(rows, warmup, traced),
                                  {"steps": len(rows), "trace_window": [first, min(last, len(rows) - 1)]})
        (self._run.run_dir / REQUEST).unlink(missing_ok=True)
        self._first, self._window_dir, self._window_run, self._asked = None, None, None, False


class NoWindows:
    """A job that cannot be captured on demand (TensorFlow's): never wanted, nothing traced."""

    wanted = False
    traced: frozenset = frozenset()

    def close(self, rows=None) -> None:
        pass


def _read_request(path: Path) -> tuple[int, Path] | None:
    try:
        request = state_json.load(path)
        return int(request["steps"]), Path(request["window_dir"])
    except (OSError, ValueError, KeyError, TypeError):  # StateFileError is a ValueError
        return None
