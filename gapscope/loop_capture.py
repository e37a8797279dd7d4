"""`gapscope.capture`: phase marks, step timers and a profiler window for a user's own PyTorch
or TensorFlow training loop, recorded as a normal run directory."""
from __future__ import annotations

from pathlib import Path

from gapscope.profilers.step_sessions import TfStepSession, TorchStepSession
from contextlib import ExitStack

from gapscope.model_layers import own_layers
from gapscope.ondemand.job_window import OnDemandWindows
from gapscope.ondemand.live_steps import LiveStepsOnly
from gapscope.user_run import (UserRun, compile_record, default_warmup, rank_place, stop_on_sigterm,
                               trace_window)
from gapscope.profilers.environment import tf_device_name, torch_device_name
from gapscope.profilers.run_dir import mark_rows
from gapscope.profilers.marks import PhaseMarks
from gapscope.profilers.phases import MARKED_PHASES
from gapscope.profilers.timers import CudaEventClock, HostClock, StepTimer

FRAMEWORKS = ("torch", "tf")  # the design's framework paths this loop API serves
_END = object()


class LoopCapture:
    """Use as `with gapscope.capture("my-run") as cap:`; inside the loop, `cap.data(loader)`,
    `cap.phase("forward")` and `cap.step(loss)`.

    A step starts when `cap.data` begins fetching its batch, or at the first `cap.phase` after
    the previous `cap.step`, and ends at `cap.step`: what the loop does between steps
    (logging, checkpoints) stays out of the step times, as in gapscope's own runners."""

    def __init__(self, name: str, trace_steps: tuple[int, int] | None = (10, 15),
                 out: str | Path = "traces", *, device=None, warmup_steps: int | None = None,
                 framework: str = "torch", model=None, layer_depth: int = 1):
        if framework not in FRAMEWORKS:
            raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}, got {framework!r}")
        if device is not None and framework != "torch":
            raise ValueError("device= moves torch batches; TensorFlow places them by itself")
        self.name, self.out, self.device, self.framework = name, out, device, framework
        self.window = trace_window(trace_steps)
        self.warmup_steps = default_warmup(self.window, warmup_steps)
        if model is not None and framework != "torch":
            raise ValueError("model= gives a torch model's layers; framework is " + repr(framework))
        self._layers = own_layers(model, layer_depth, self.window)
        self.run_dir: Path | None = None
        self.job_dir: Path | None = None  # a distributed job's directory, run_dir its rank's
        self.steps = 0
        self._run: UserRun | None = None
        self._tentative = True
        self._step_first_mark = 0

    # -- the context -------------------------------------------------------------------
    def __enter__(self) -> "LoopCapture":
        cuda = self._uses_cuda()
        self.marks = PhaseMarks(StepTimer(CudaEventClock() if cuda else HostClock()),
                                uses_torch=self.framework == "torch")
        self._timer = self.marks.timer
        self._phase_of = self.marks.phase
        self._inside_function = _tf_inside_function() if self.framework == "tf" else None
        # One rank of several (torchrun, torch.distributed): `rank<r>/` of one job directory.
        self._run = UserRun(self.name, self.framework, self.out, {
            "api": "gapscope.capture", "trace_steps": _window_range(self.window),
            "warmup_steps": self.warmup_steps,
            "device": None if self.device is None else str(self.device)}, self.warmup_steps,
            rank_place())
        self.run_dir, self.job_dir = self._run.run_dir, self._run.job_dir
        self._signals = ExitStack()
        self._signals.enter_context(stop_on_sigterm())
        session_type = TorchStepSession if self.framework == "torch" else TfStepSession
        self._compiles = None
        try:
            # What the loop's torch.compile (or tf.function) compiled, broke and recompiled, step
            # by step, into compile.json, as `gapscope run --variant compile` records it.
            self._compiles = compile_record(self.framework, self.run_dir)
            self._session = session_type(self.run_dir, self.window, cuda)
            self._session.start()
        except BaseException as exc:  # the directory exists: say why it holds no run
            if self._compiles is not None:
                self._compiles.__exit__(None, None, None)
            self._run.fail([], {}, exc)
            self._signals.close()
            raise
        # On-demand windows (`gapscope capture --pid`): torch.profiler, so torch loops only;
        # either way steps.csv is appended as the loop goes (LiveSteps).
        self._windows = (OnDemandWindows(self._run, cuda, self._device_name, self._session,
                                         self._timer, self.warmup_steps).open()
                         if self.framework == "torch" else
                         LiveStepsOnly(self.run_dir, self._timer, self.warmup_steps, self._session).open())
        self._tentative_begin()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._run is None or self._run.finished:
            return False
        try:
            return self._end(exc_type, exc, tb)
        finally:
            self._signals.close()

    def _end(self, exc_type, exc, tb) -> bool:
        # Drop the step that was running when the loop ended: it never reached cap.step().
        del self._timer.phase_marks[self._step_first_mark:]
        if self._layers is not None:
            self._layers.close()
        stop_error = None
        try:
            self._session.stop(exc_type, exc, tb)
        except Exception as error:  # noqa: BLE001 - recorded below; the loop's own error comes first
            stop_error = error
        window_error = None
        try:
            self._windows.close(self._rows)
        except Exception as error:  # noqa: BLE001 - a window's failure must not lose the job's run
            window_error = error
        try:
            self._compiles.__exit__(exc_type, exc, tb)
        except Exception as error:  # noqa: BLE001 - the steps matter more than the compile record
            stop_error = stop_error or error
        traced = set(self._session.traced_steps(self.steps) or ()) | self._windows.traced
        rows = mark_rows(self._rows(), self.warmup_steps, traced)
        facts = {"device": self._device_name(), "steps": self.steps,
                 "trace_window": self._session.recorded_window(self.steps),
                 **(self._layers.manifest_fields() if self._layers is not None else {})}
        stop_error = stop_error or window_error
        if exc is None and stop_error is None:
            self._run.complete(rows, facts)
        else:
            self._run.fail(rows, facts, exc or stop_error)
        if exc is None and stop_error is not None:
            raise stop_error
        return False

    # -- inside the loop ----------------------------------------------------------------
    def data(self, loader):
        """Iterates `loader`, each fetch (and the copy to `device`, if given) marked as
        data_load of the step it starts."""
        fetch = self._phase_of("data_load")
        iterator = iter(loader)
        # Where the length is known the loop never asks an exhausted iterator: that last,
        # empty fetch would otherwise start a step that never happens.
        remaining = _known_length(loader)
        while True:
            if remaining == 0:
                batch = next(iterator, _END)  # outside any step: only checks the length held
                if batch is _END:
                    return
                remaining = None  # the length was wrong; this batch's fetch went untimed
                self._begin()
            else:
                self._begin()
                tf_tracing = self._inside_function is not None and self._session.tracing
                with _Nested(fetch, self._session.phase_event("data_load")) if tf_tracing else fetch:
                    batch = next(iterator, _END)
                    if batch is not _END and self.device is not None:
                        batch = _to_device(batch, self.device)
                if batch is _END:
                    self._abandon_step()
                    return
                if remaining is not None:
                    remaining -= 1
            yield batch

    def phase(self, name: str):
        """A context manager marking one phase: data_load, forward, backward or optimizer.

        Inside a `tf.function` it is a name scope, which marks the traced ops (Python runs
        only while tracing); elsewhere a timer, NVTX and, while tracing, record_function range."""
        if self._inside_function is not None:
            if self._inside_function():
                from gapscope.profilers.tf_marks import tf_phase_scope
                self._compiles.seen_tracing()  # this Python runs only while TF traces
                return tf_phase_scope(name)
            if self._tentative:
                self._begin()
            if self._session.tracing:
                return _Nested(self._phase_of(name), self._session.phase_event(name))
            return self._phase_of(name)
        if self._tentative:
            self._begin()
        if self._layers is not None and self._layers.counting:
            self._layers.phase(name)
        return self._phase_of(name)

    def step(self, loss=None) -> None:
        """Ends the step; `loss` (a tensor or number) goes into steps.csv."""
        if self._tentative:  # a step with no marks at all: it began where the last one ended
            self._session.begin_step(self.steps)
            if self._layers is not None:
                self._layers.begin_step(self.steps)
        self._timer.end_step(loss)
        if self._layers is not None:
            self._layers.end_step(self.steps)
        self._session.end_step(self.steps)
        self._compiles.end_step(self.steps)
        self.steps += 1
        if self._windows.wanted:  # all an untriggered job pays for on-demand capture
            self._windows.after_step(self.steps, self._rows)
        self._tentative_begin()

    def _rows(self) -> list[dict]:
        """The finished steps' rows, unmarked. Phases that only ever ran inside a tf.function
        have no host time: left empty, not zero, so the timer breakdown says they need the trace."""
        timed = {phase for phase, _, _ in self._timer.phase_marks}
        return self._timer.rows(timed_phases=[p for p in MARKED_PHASES if p in timed])

    def _phase_of(self, name: str):  # replaced on entering by the marks' own lookup
        raise RuntimeError("cap.data, cap.phase and cap.step work inside "
                           "`with gapscope.capture(...) as cap:`")

    # -- step bookkeeping ----------------------------------------------------------------
    def _tentative_begin(self) -> None:
        """The next step is assumed to start now, until a fetch or a phase says when it does."""
        self._timer.begin_step()
        self._step_first_mark = len(self._timer.phase_marks)
        self._tentative = True

    def _begin(self) -> None:
        self._timer.begin_step()
        self._step_first_mark = len(self._timer.phase_marks)
        self._tentative = False
        self._session.begin_step(self.steps)
        if self._layers is not None:
            self._layers.begin_step(self.steps)

    def _abandon_step(self) -> None:
        """The fetch found the loader exhausted: no step happened."""
        del self._timer.phase_marks[self._step_first_mark:]
        self._session.abandon_step(self.steps)
        self._tentative_begin()

    # -- facts --------------------------------------------------------------------------
    def _uses_cuda(self) -> bool:
        if self.device is None or self.framework != "torch":
            return False
        import torch
        return torch.device(self.device).type == "cuda"

    def _device_name(self) -> str:
        if self.framework == "tf":
            return tf_device_name()
        return torch_device_name(self.device or "cpu")


def capture(name: str, trace_steps: tuple[int, int] | None = (10, 15), out: str | Path = "traces",
            *, device=None, warmup_steps: int | None = None, framework: str = "torch",
            model=None, layer_depth: int = 1) -> LoopCapture:
    """Profile your own training loop into `out/<name>-<framework>-user-<time>/`.

    trace_steps: `(first, stop)`, the steps the profiler records as in `range(first, stop)`
    (torch.profiler, or the TF profiler with framework="tf"); None records step timers only.
    device: where `cap.data` moves each batch (torch); on a CUDA device step timers use CUDA
    events. warmup_steps: first steps left out of the steady state (default: 5, or fewer when
    the trace starts earlier). model: the torch model the loop trains, for its layers
    (`breakdown --layers`): `gapscope_layer/<qualified name>` ranges on its modules in the traced
    window, FLOPs counted on the step before it; layer_depth: 1, the children that hold
    parameters (`embed`, `block.0`, `head`), each further level their children too.

    What the loop's torch.compile (or a tf.function it marks phases in) compiled goes to
    compile.json: graph breaks, recompiles, retraces. A loop stopped after some steps (an
    exception, Ctrl-C, SIGTERM) ends the run `interrupted`, its steps kept and analysable.

    Under torchrun (or with a torch.distributed process group of several ranks) each rank
    writes `rank<r>/` of one job directory `out/<name>-<framework>-user-x<N>-.../`, whose
    manifest rank 0 ends once every rank's run has: failed `rank R: <error>` if any failed.

        with gapscope.capture("my-run", trace_steps=(10, 15), device="cuda") as cap:
            for inputs, targets in cap.data(loader):
                with cap.phase("forward"):
                    loss = loss_fn(model(inputs), targets)
                with cap.phase("backward"):
                    loss.backward()
                with cap.phase("optimizer"):
                    optimizer.step()
                    optimizer.zero_grad()
                cap.step(loss)
    """
    return LoopCapture(name, trace_steps, out, device=device, warmup_steps=warmup_steps,
                       framework=framework, model=model, layer_depth=layer_depth)


def _window_range(window) -> list[int] | None:
    return None if window is None else [window.first, window.first + window.steps]


def _known_length(loader) -> int | None:
    try:
        length = len(loader)
    except TypeError:  # plain iterables, IterableDatasets, tf.data of unknown cardinality
        return None
    return length if length >= 0 else None


def _to_device(batch, device):
    """Tensors in tuples, lists and dicts, as DataLoader collates them, moved to `device`."""
    if hasattr(batch, "to"):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {key: _to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        moved = [_to_device(value, device) for value in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch


class _Nested:
    """Two ranges entered as one: the phase's timer outside, the profiler's event inside."""

    __slots__ = ("_outer", "_inner")

    def __init__(self, outer, inner):
        self._outer, self._inner = outer, inner

    def __enter__(self):
        self._outer.__enter__()
        self._inner.__enter__()
        return self

    def __exit__(self, *exc_info):
        self._inner.__exit__(*exc_info)
        self._outer.__exit__(*exc_info)
        return False


def _tf_inside_function():
    import tensorflow as tf
    return tf.inside_function
