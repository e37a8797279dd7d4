"""Step timers and a profiler window driven by a trainer's hooks: each hook closes the phase that
ran and opens the next, and the capture API's run directory records the steps."""
from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from gapscope.model_layers import COMPILED_NOTE, ModelLayers, own_layers
from gapscope.ondemand.job_window import OnDemandWindows
from gapscope.user_run import (UserRun, compile_record, default_warmup, rank_place, stop_on_sigterm,
                               trace_window)
from gapscope.profilers.environment import torch_device_name
from gapscope.profilers.marks import PhaseMarks
from gapscope.profilers.phases import MARKED_PHASES
from gapscope.profilers.run_dir import mark_rows
from gapscope.profilers.step_sessions import TorchStepSession
from gapscope.profilers.timers import CudaEventClock, HostClock, StepTimer


class HookSteps:
    """One trainer fit as one run directory (`run_dir`), or one rank of a job directory where a
    torch.distributed process group of several ranks is up (as the capture API does).

    Hooks are points in time, not ranges: `enter(phase)` ends the phase that is open and opens
    `phase`; `leave()` ends it and opens none (time that then passes is `other`). The step begins
    at its first `enter` and ends at `end_step`."""

    def __init__(self, name: str, api: str, trace_steps: tuple[int, int] | None, out: str | Path,
                 warmup_steps: int | None, settings: dict | None = None, layer_depth: int | None = 1):
        self.name, self.api, self.out = name, api, out
        self.window = trace_window(trace_steps)
        self.warmup_steps = default_warmup(self.window, warmup_steps)
        self.settings = settings or {}
        self.layer_depth = layer_depth
        self._layers: ModelLayers | None = None
        self._layer_facts: dict = {}
        self.run_dir: Path | None = None
        self.job_dir: Path | None = None
        self.steps = 0
        self._run: UserRun | None = None
        self._open = None  # the phase range entered and not yet left
        self._in_step = False
        self._step_first_mark = 0

    @property
    def started(self) -> bool:
        return self._run is not None

    def start(self, device, model=None, compiled: bool = False) -> None:
        """Creates the run directory and starts the profiler's schedule; `device` is where the
        model trains (a CUDA device times steps with CUDA events). `model`: the trained module,
        whose layers get ranges and FLOPs as the capture API's `model=` (none where `compiled`)."""
        import torch
        self._device = torch.device(device)
        cuda = self._device.type == "cuda"
        self._timer = StepTimer(CudaEventClock() if cuda else HostClock())
        self._marks = PhaseMarks(self._timer, uses_torch=True)
        self._ranges = {phase: self._marks.phase(phase) for phase in MARKED_PHASES}
        self._run = UserRun(self.name, "torch", self.out, {
            "api": self.api, "trace_steps": None if self.window is None
            else [self.window.first, self.window.first + self.window.steps],
            "warmup_steps": self.warmup_steps, "device": str(self._device), **self.settings},
            self.warmup_steps, rank_place())
        self.run_dir, self.job_dir = self._run.run_dir, self._run.job_dir
        # SIGTERM as an exception the trainer passes on, recorded as the fit's end (where the
        # trainer has no handler of its own: Lightning's is kept).
        self._signals = ExitStack()
        self._signals.enter_context(stop_on_sigterm())
        self._compiles = None
        try:
            # A compiled model (Lightning's torch.compile'd module, HF's torch_compile=True):
            # its compiles, graph breaks and recompiles into compile.json.
            self._compiles = compile_record("torch", self.run_dir)
            self._session = TorchStepSession(self.run_dir, self.window, cuda)
            self._session.start()
        except BaseException as exc:  # the directory exists: say why it holds no run
            if self._compiles is not None:
                self._compiles.__exit__(None, None, None)
            self._run.fail([], {}, exc)
            self._signals.close()
            raise
        if compiled and model is not None and self.layer_depth is not None:
            self._layer_facts = {"layers": [], "layer_notes": [COMPILED_NOTE]}
        else:
            self._layers = own_layers(model, self.layer_depth, self.window)
        # `gapscope capture --pid` windows, as for the capture API's loops.
        self._windows = OnDemandWindows(self._run, cuda, lambda: torch_device_name(self._device),
                                        self._session, self._timer, self.warmup_steps).open()

    # -- the hooks ----------------------------------------------------------------------
    def enter(self, phase: str) -> None:
        current = self._open
        if current is not None:
            if current is self._ranges[phase]:
                return  # a second fetch of the same step: one data_load range
            current.__exit__(None, None, None)
        elif not self._in_step:
            self._begin_step()
        if self._layers is not None and self._layers.counting:
            self._layers.phase(phase)
        self._open = self._ranges[phase]
        self._open.__enter__()

    def leave(self) -> None:
        if self._open is not None:
            self._open.__exit__(None, None, None)
            self._open = None
            if self._layers is not None and self._layers.counting:
                self._layers.phase(None)

    def end_step(self, loss=None) -> None:
        if not self._in_step:  # hooks that saw no phase: the step began where the last ended
            self._begin_step()
        self.leave()
        self._timer.end_step(loss)
        if self._layers is not None:
            self._layers.end_step(self.steps)
        self._session.end_step(self.steps)
        self._compiles.end_step(self.steps)
        self.steps += 1
        self._in_step = False
        if self._windows.wanted:  # all an untriggered fit pays for on-demand capture
            self._windows.after_step(self.steps, self._timer.rows)

    def _begin_step(self) -> None:
        self._timer.begin_step()
        self._step_first_mark = len(self._timer.phase_marks)
        self._in_step = True
        self._session.begin_step(self.steps)
        if self._layers is not None:
            self._layers.begin_step(self.steps)

    # -- the end ------------------------------------------------------------------------
    def finish(self, exc: BaseException | None = None, facts: dict | None = None) -> None:
        """Records the run's end once: complete, or interrupted (failed before any step) with
        `exc`. A step the fit left unfinished (training stopped mid-accumulation, or failed) is
        dropped. A SIGTERM that stopped it is sent again once the end is recorded."""
        if self._run is None or self._run.finished:
            return
        try:
            self._finish(exc, facts)
        finally:
            self._signals.close()

    def _finish(self, exc: BaseException | None, facts: dict | None) -> None:
        self.leave()
        if self._layers is not None:
            self._layers.close()
        del self._timer.phase_marks[self._step_first_mark if self._in_step else len(self._timer.phase_marks):]
        stop_error = None
        try:
            self._session.stop(*((type(exc), exc, exc.__traceback__) if exc else (None, None, None)))
        except Exception as error:  # noqa: BLE001 - recorded below; the fit's own error comes first
            stop_error = error
        try:
            self._windows.close(self._timer.rows)
        except Exception as error:  # noqa: BLE001 - a window's failure must not lose the fit's run
            stop_error = stop_error or error
        try:
            self._compiles.__exit__(None, None, None)
        except Exception as error:  # noqa: BLE001 - the steps matter more than the compile record
            stop_error = stop_error or error
        traced = set(self._session.traced_steps(self.steps) or ()) | self._windows.traced
        rows = mark_rows(self._timer.rows(), self.warmup_steps, traced)
        facts = {"device": torch_device_name(self._device), "steps": self.steps,
                 "trace_window": self._session.recorded_window(self.steps), **(facts or {}),
                 **(self._layers.manifest_fields() if self._layers is not None else self._layer_facts)}
        if exc is None and stop_error is None:
            self._run.complete(rows, facts)
        else:
            self._run.fail(rows, facts, exc or stop_error)
