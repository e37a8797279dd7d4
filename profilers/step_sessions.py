"""Profiler windows driven by a user's loop, step by step: torch.profiler, or the TF profiler."""
from __future__ import annotations

from pathlib import Path

from gapscope.profilers.phases import tf_eager_event_name
from gapscope.profilers.torch_session import torch_profiler
from gapscope.profilers.trace_window import TraceWindow
from gapscope.profilers.written_traces import stop_tf_profiler


class TorchStepSession:
    """torch.profiler over the window, written as `<host>.<n>.pt.trace.json.gz`; its steps are
    torch's own ProfilerStep ranges, cut where the loop calls `cap.step()`."""

    def __init__(self, run_dir: Path, window: TraceWindow | None, cuda: bool):
        self._profiler = torch_profiler(run_dir, window, cuda) if window else None
        self._window = window

    tracing = False  # record_function ranges come with PhaseMarks, no extra event needed

    @property
    def done(self) -> bool:
        """No profiler will run any more: the window is saved, or there is none."""
        return self._profiler is None

    def start(self) -> None:
        if self._profiler is not None:
            self._profiler.__enter__()

    def begin_step(self, step: int) -> None:
        pass

    def end_step(self, step: int) -> None:
        if self._profiler is None:
            return
        self._profiler.step()
        if step >= self._window.last:
            # The window is saved; stopping now spares the rest of the loop profiler.step().
            profiler, self._profiler = self._profiler, None
            profiler.__exit__(None, None, None)

    def abandon_step(self, step: int) -> None:
        pass

    def stop(self, *exc_info) -> None:
        """Saves a window that the loop ended inside of."""
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            profiler.__exit__(*exc_info)

    def traced_steps(self, steps_done: int) -> range | None:
        """Steps that ran under the profiler, its warm-up step included."""
        if self._window is None:
            return None
        return range(self._window.first - 1, min(self._window.last + 1, steps_done))

    def recorded_window(self, steps_done: int) -> list[int] | None:
        return _recorded(self._window, steps_done)


class TfStepSession:
    """The TF profiler over the window, written to `plugins/profile/<session>/<host>.xplane.pb`,
    with one `train` step event per step as XProf's step view and gapscope's reader expect.

    `settle_steps`: steps run under the profiler after the window, without step events. A
    multi-worker step returns before the collective's own event ends on its thread; stopped
    right after the window's last step, the trace lost that step's gradient all-reduce."""

    def __init__(self, run_dir: Path, window: TraceWindow | None, cuda: bool = False,
                 settle_steps: int = 0):
        import tensorflow as tf
        self._profiler = tf.profiler.experimental
        self._run_dir, self._window, self._settle = run_dir, window, settle_steps
        self._running = False
        self._step_trace = None

    @property
    def tracing(self) -> bool:
        return self._running

    def start(self) -> None:
        pass

    def phase_event(self, phase: str):
        """A host event for an eager phase, which the trace would otherwise not show."""
        return self._profiler.Trace(tf_eager_event_name(phase))

    def begin_step(self, step: int) -> None:
        window = self._window
        if window is None or step not in window:
            return
        if not self._running and step == window.first:
            self._profiler.start(logdir=str(self._run_dir))
            self._running = True
        if self._running:
            self._step_trace = self._profiler.Trace("train", step_num=step, _r=1)
            self._step_trace.__enter__()

    def end_step(self, step: int) -> None:
        self._close_step()
        if self._running and step >= self._window.last + self._settle:
            self.finish()

    def finish(self) -> None:
        """Stops and writes the profile if it still runs (a loop that ended before the settle
        steps came)."""
        if self._running:
            self._running = False
            stop_tf_profiler(self._profiler, self._run_dir)

    def abandon_step(self, step: int) -> None:
        """An exhausted loader of unknown length inside the window leaves one short step event."""
        self._close_step()

    def stop(self, *exc_info) -> None:
        self._close_step()
        if self._running:
            self._running = False
            self._profiler.stop()

    def traced_steps(self, steps_done: int) -> range | None:
        if self._window is None:
            return None
        return range(self._window.first, min(self._window.last + 1 + self._settle, steps_done))

    def recorded_window(self, steps_done: int) -> list[int] | None:
        return _recorded(self._window, steps_done)

    def _close_step(self) -> None:
        if self._step_trace is not None:
            self._step_trace.__exit__(None, None, None)
            self._step_trace = None


def _recorded(window: TraceWindow | None, steps_done: int) -> list[int] | None:
    """[first, last] step the trace holds, or None when the loop ended before the window."""
    if window is None or steps_done <= window.first:
        return None
    return [window.first, min(window.last, steps_done - 1)]
