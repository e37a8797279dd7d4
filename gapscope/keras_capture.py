"""`gapscope.capture_keras`: one call that makes a compiled Keras 3 model's `fit` a gapscope run,
on the TensorFlow backend (TF profiler), the torch backend (torch.profiler) or JAX (jax.profiler)."""
from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from gapscope.ondemand.live_steps import LiveStepsOnly
from gapscope.user_run import UserRun, compile_record, default_warmup, stop_on_sigterm, trace_window
from gapscope.profilers.environment import jax_device_name, tf_device_name, torch_device_name
from gapscope.profilers.run_dir import mark_rows
from gapscope.workloads.models.params import keras_parameters
from gapscope.profilers.marks import PhaseMarks
from gapscope.profilers.phases import MARKED_PHASES
from gapscope.profilers.timers import CudaEventClock, HostClock, StepTimer
from gapscope.workloads.runners.jax_profile import JaxProfile


def capture_keras(model, name: str, trace_steps: tuple[int, int] | None = (10, 15),
                  out: str | Path = "traces", *, warmup_steps: int | None = None,
                  batch_size: int | None = None):
    """Give `model` the phase-marking train_step and return the callback that records its
    next `fit` into `out/<name>-<keras|keras-torch|keras-jax>-user-<time>/`.

        cap = gapscope.capture_keras(model, "my-run", trace_steps=(10, 15))
        model.fit(x, y, epochs=2, callbacks=[cap])

    `steps_per_execution` and `jit_compile` stay as compiled. Compiled under a
    tf.distribute.MultiWorkerMirroredStrategy of several workers (TF_CONFIG), each worker's fit
    is one rank, `rank<r>/`, of one job directory `out/<name>-keras-user-x<W>-<time>/`, and
    only the chief (rank 0) traces; the other ranks time their steps (TensorFlow 2.21's
    profiler crashes them, see workloads.runners.tf_distribute.traces_rank).
    trace_steps are optimizer updates as in `range(first, stop)`, counted over all epochs;
    None records timers only.
    Used as a context manager (`with ... as cap: model.fit(..., callbacks=[cap])`), a fit that
    raises or is interrupted (Ctrl-C, SIGTERM) is recorded as failed or interrupted with the
    steps it did; Keras tells callbacks only of success. Either way steps.csv is appended about
    once a second as the fit goes, so a process killed outright leaves the steps it did.
    The model's top-level layers are the run's layers (`breakdown --layers`), by their names;
    `batch_size` gives their FLOPs per step where the first batch's shape does not say it
    (TensorFlow traces the step for any batch size where the samples do not fill whole batches)."""
    import keras

    from gapscope.profilers.keras_marks import mark_keras_phases

    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool)
                                   or batch_size < 1):
        raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
    backend = keras.backend.backend()
    on_torch = backend == "torch"
    if backend not in ("torch", "tensorflow", "jax"):
        raise ValueError(f"gapscope captures Keras on tensorflow, torch or jax, not {backend}")
    mark_keras_phases(model, PhaseMarks(uses_torch=on_torch))  # on JAX: Keras' own step, unchanged
    # A model that was fit before caches its train function, built from the old train_step.
    model.train_function = None
    if backend == "tensorflow":
        from gapscope.profilers.tf_marks import multi_worker
        from gapscope.workloads.runners.tf_distribute import build_from_local_batch
        if multi_worker(model.distribute_strategy):
            build_from_local_batch(model)  # else Keras 3's fit fails under MWMS (see there)
    model._gapscope_batch = batch_size
    callback = _callback_class()(model, name, trace_window(trace_steps), out, warmup_steps, backend)
    if backend == "tensorflow":
        # train_step's Python body runs only when Keras' tf.function traces it: each trace, with
        # its input signature and the update it came at, goes to compile.json (retraces too).
        from gapscope.workloads.runners.tf_traces import TraceLog
        callback.trace_log = TraceLog(step_of=lambda: callback.updates)
        model.train_step = callback.trace_log.wrap(model.train_step, name="train_step")
    return callback


def _callback_class():
    """Defined on first use: subclassing keras.callbacks.Callback imports Keras."""
    import keras

    class GapscopeCapture(keras.callbacks.Callback):
        """Each `fit` it is passed to becomes one run directory (`run_dir`)."""

        def __init__(self, model, name, window, out, warmup_steps, backend):
            super().__init__()
            self._model_marked = model
            self._name, self._window, self._out = name, window, out
            self._on_torch, self._on_jax = backend == "torch", backend == "jax"
            self._backend = backend
            self._warmup = default_warmup(window, warmup_steps)
            self.run_dir: Path | None = None
            self._run: UserRun | None = None
            self.trace_log = None  # the TF backend's tf.function traces (capture_keras sets it)
            self._compiles = None  # the torch backend's: Dynamo's records (jit_compile=True)
            self._jax_compiles = None  # JAX's: its traces and compiles (workloads.runners.jax_compiles)
            self.updates = 0
            self._live = None
            self._signals = ExitStack()

        # -- the run ----------------------------------------------------------------
        def on_train_begin(self, logs=None):
            from gapscope.profilers.keras_marks import step_callback
            model = self._model_marked
            cuda = self._on_torch and _torch_cuda()
            self._timer = StepTimer(CudaEventClock() if cuda else HostClock())
            if self._on_torch:
                # The torch-backend train_step reads its marks at every call: point them at
                # this fit's timer.
                model._gapscope_marks = PhaseMarks(self._timer, uses_torch=True)
            framework = {"torch": "keras-torch", "jax": "keras-jax"}.get(self._backend, "keras")
            self._run = _user_run(model, self._name, framework, self._out, {
                "api": "gapscope.capture_keras", "backend": self._backend,
                "trace_steps": None if self._window is None
                else [self._window.first, self._window.first + self._window.steps],
                "warmup_steps": self._warmup, "steps_per_execution": model.steps_per_execution,
                "jit_compile": bool(model.jit_compile)}, self._warmup)
            self.run_dir = self._run.run_dir
            place = getattr(self._run, "place", None)
            self._traced_ranks = None
            if place is not None:
                from gapscope.workloads.runners.tf_distribute import traces_rank
                self._traced_ranks = [r for r in range(place.world_size)
                                      if self._window is not None and traces_rank(r)]
                if not traces_rank(place.rank):
                    self._window = None  # timers only: TF's profiler crashes non-chief workers
            self._profiler = None
            if self._on_torch and self._window is not None:
                from gapscope.profilers.torch_session import torch_profiler
                self._profiler = torch_profiler(self.run_dir, self._window, cuda)
                self._profiler.start()
            self._steps = step_callback(
                self._timer, self._window,
                tf_logdir=self.run_dir if self._window and self._backend == "tensorflow" else None,
                jax_profile=JaxProfile(self.run_dir) if self._window and self._on_jax else None,
                torch_profiler=self._profiler, data_between_steps=self._on_torch,
                steps_per_call=int(model.steps_per_execution or 1),
                window_hooks=self._layer_ranges(model))
            self.updates, self._call_begin = 0, 0
            if self._on_torch:  # jit_compile=True: Keras torch.compiles its train step
                self._compiles = compile_record("torch", self.run_dir)
            if self._on_jax:  # Keras jits the step: JAX's traces and compiles, step by step
                from gapscope.workloads.runners.jax_compiles import JaxCompileLog
                self._jax_compiles = JaxCompileLog(step_of=lambda: self._steps.step_in_progress)
                self._jax_compiles.start()
            if int(model.steps_per_execution or 1) == 1:  # else a row is a call, not a step
                self._live = LiveStepsOnly(self.run_dir, self._timer, self._warmup, self).open()

        def _layer_ranges(self, model):
            """On the torch backend a Keras layer is a torch module: the layer ranges the seed
            Keras-on-torch runs get (keras_runner), on the model's top-level layers, in the
            traced window only. None on TF (its op scopes name the layers), without a window,
            and under jit_compile (torch.compile would trace the hooks into its graph)."""
            if not self._on_torch or self._profiler is None or model.jit_compile:
                return None
            import keras
            from gapscope.workloads.runners.layer_ranges import LayerRanges
            return LayerRanges({layer.name: layer for layer in model.layers
                                if not isinstance(layer, keras.layers.InputLayer)})

        def on_train_batch_begin(self, batch, logs=None):
            self._call_begin = batch
            self._steps.on_train_batch_begin(batch, logs)

        def on_train_batch_end(self, batch, logs=None):
            self._steps.on_train_batch_end(batch, logs)
            self.updates += batch - self._call_begin + 1
            if self._compiles is not None:
                self._compiles.end_step(self.updates - 1)
            if self._live is not None and self._live.wanted:
                self._live.after_step(self.updates, None)

        def traced_steps(self, done: int) -> set[int]:
            """The steps known to have run under the profiler so far (the live steps.csv's
            `traced` flags; the end's rows say it from the whole window)."""
            calls = set(self._steps.traced_calls)
            if self._on_torch and calls:  # torch.profiler spends the call before its window warming up
                calls.add(min(calls) - 1)
            return {c for c in calls if c < done}

        def on_train_end(self, logs=None):
            self._finish(None)

        # -- failures, for `with` ------------------------------------------------------
        def __enter__(self):
            # SIGTERM (a scheduler's stop) raises in the fit, which ends the run `interrupted`.
            self._signals.enter_context(stop_on_sigterm())
            return self

        def __exit__(self, exc_type, exc, tb):
            try:
                self._finish(exc)  # nothing where on_train_end recorded the end already
            finally:
                self._signals.close()  # SIGTERM's own action again: it ends the process now
            return False

        def _finish(self, exc):
            if self._run is None or self._run.finished:
                return
            if self._live is not None:
                self._live.close()
            if self._profiler is not None:
                self._profiler.stop()
            if exc is not None and self._window is not None and self._backend == "tensorflow":
                _stop_tf_profiler_if_running()
            elif exc is None and not self._on_torch or self._on_jax:
                self._steps.finish_trace()  # a fit shorter than the window (or failed) left it running
            rows, facts = self._rows_and_facts()
            if self._compiles is not None:
                self._compiles.__exit__(None, None, None)  # compile.json where anything compiled
                self._compiles = None
            if self._jax_compiles is not None:
                self._jax_compiles.stop()
                self._jax_compiles.write(self.run_dir)
                self._jax_compiles = None
            if self.trace_log is not None and self.trace_log.traces:
                self.trace_log.write(self.run_dir, jit_compile=bool(self._model_marked.jit_compile))
                self.trace_log.traces = []  # this fit's; a later fit of the model writes its own
            if exc is None:
                self._run.complete(rows, facts)
            else:
                self._run.fail(rows, facts, exc)

        def _rows_and_facts(self):
            model = self._model_marked
            timed = MARKED_PHASES if self._on_torch else ()
            rows = self._timer.rows(timed_phases=timed)
            per_epoch = int(self.params.get("steps") or 0) or max(1, self.updates)
            spe = int(model.steps_per_execution or 1)
            if spe > 1:
                from gapscope.workloads.runners.execution_rows import expand_executions
                rows = expand_executions(rows, spe, per_epoch, self.updates)
            traced = None
            if self._window is not None:
                # With steps_per_execution a call is traced as a whole.
                calls = self.traced_steps(self.updates)
                traced = {r["step"] for r in rows if r.get("execution_first_step", r["step"]) in calls}
            mark_rows(rows, self._warmup, traced)
            facts = {"device": torch_device_name() if self._on_torch
                     else jax_device_name() if self._on_jax else tf_device_name(),
                     "parameters": keras_parameters(model),
                     "steps": self.updates, "steps_run": self.updates,
                     "steps_per_epoch": per_epoch, "jit_compile_resolved": bool(model.jit_compile),
                     "trace_window": None if self._window is None or self.updates <= self._window.first
                     else [self._window.first, min(self._window.last, self.updates - 1)]}
            if self._traced_ranks is not None:
                facts["traced_ranks"] = self._traced_ranks
            from gapscope.keras_layers import keras_layers
            facts["layers"] = keras_layers(model)
            batch = getattr(model, "_gapscope_batch", None)
            if isinstance(batch, int):
                facts["workload_spec"] = {"batch_size": batch}  # where the layers' FLOPs read it
            return rows, facts

    return GapscopeCapture


def _user_run(model, name: str, framework: str, out, settings: dict, warmup: int) -> UserRun:
    """A plain run, or under a multi-worker strategy this worker's rank of the job: the ranks
    agree on the job directory's name over the strategy itself (rank 0's, by a TF collective)."""
    if framework == "keras":
        from gapscope.profilers.tf_marks import multi_worker
        from gapscope.workloads.runners.tf_cluster import cluster_place
        from gapscope.workloads.runners.tf_distribute import BACKEND, tf_share
        place = cluster_place() if multi_worker(model.distribute_strategy) else None
        if place is not None:
            from gapscope.user_run import RankPlace
            rank, world = place
            return UserRun(name, framework, out, settings, warmup,
                           RankPlace(rank, world, local_rank=rank, node_rank=0, backend=BACKEND),
                           share=tf_share(model.distribute_strategy))
    return UserRun(name, framework, out, settings, warmup)


def _stop_tf_profiler_if_running() -> None:
    """A fit that died inside the trace window left the TF profiler running."""
    import tensorflow as tf
    try:
        tf.profiler.experimental.stop()
    except tf.errors.UnavailableError:  # not running: the window had closed or never opened
        pass


def _torch_cuda() -> bool:
    import torch
    return torch.cuda.is_available()

