"""Phase marks for Keras 3: a train_step that marks each phase (TF name scopes on the
tensorflow backend, PhaseMarks on the torch backend; on JAX Keras' own jitted step, whose HLO
metadata names each op's transformation), and a callback that times steps and records the
profile over the trace window."""
from __future__ import annotations

import types
from pathlib import Path

from gapscope.profilers.marks import PhaseMarks
from gapscope.profilers.tf_marks import multi_worker, tf_phase_scope
from gapscope.profilers.timers import StepTimer
from gapscope.profilers.trace_window import TraceWindow
from gapscope.profilers.written_traces import stop_tf_profiler

LOSS_LOG = "loss"


def _marked_train_step_tf(self, data):
    """Keras' own TF train_step, with each phase in its own name scope.

    The scopes become op-name prefixes inside tf.function and HLO metadata under XLA, so
    `model.fit`, `jit_compile` and `steps_per_execution` work unchanged. Gradient ops come
    out named `gradient_tape/gapscope_forward/...`; the analyzers count them as backward."""
    import keras
    import tensorflow as tf

    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    _note_batch(self, x)
    with tf.GradientTape() as tape:
        with tf_phase_scope("forward"):
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                     training=True)
            scaled_loss = self.optimizer.scale_loss(loss)
    with tf_phase_scope("backward"):
        gradients = tape.gradient(scaled_loss, self.trainable_weights)
    with tf_phase_scope("optimizer"):
        self.optimizer.apply_gradients(zip(gradients, self.trainable_weights))
    # Under a strategy of N replicas the loss came out divided by N (so that summed gradients
    # are the mean); the logs report it whole, as Keras' own train_step does.
    from keras.src.losses.loss import unscale_loss_for_distribution
    logs = _logs(self, x, y, y_pred, sample_weight, unscale_loss_for_distribution(loss))
    if multi_worker():
        # Keras reduces a multi-worker step's logs with strategy.reduce(MEAN, v, axis=0), which
        # fails on scalars (keras-team/keras#20585): give each log the axis it reduces over.
        logs = keras.tree.map_structure(lambda v: tf.reshape(v, [-1]), logs)
    return logs


def _marked_train_step_torch(self, data):
    """Keras' own torch-backend train_step (eager autograd), each phase marked by PhaseMarks."""
    import keras
    import torch

    marks = self._gapscope_marks
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    _note_batch(self, x)
    with marks.phase("optimizer"):
        self.zero_grad()  # torch.nn.Module.zero_grad, as Keras' torch trainer does
    with marks.phase("forward"):
        y_pred = self(x, training=True)
        loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight,
                                 training=True)
        scaled_loss = self.optimizer.scale_loss(loss)
    with marks.phase("backward"):
        scaled_loss.backward()
    with marks.phase("optimizer"):
        weights = self.trainable_weights[:]
        with torch.no_grad():
            self.optimizer.apply([w.value.grad for w in weights], weights)
    return _logs(self, x, y, y_pred, sample_weight, loss)


def _note_batch(model, x) -> None:
    """For a model capture_keras prepared (`_gapscope_batch` None until known): the first batch's
    size where its shape says it (torch: every step is eager; TF: only where the step was traced
    for one batch size, as the rest run in the graph), for the layers' FLOPs per step. Free after
    the first: one attribute read. The seed runs' models (no such attribute) are left alone."""
    if getattr(model, "_gapscope_batch", 0) is None:
        import keras
        size = keras.tree.flatten(x)[0].shape[0]
        model._gapscope_batch = size if isinstance(size, int) else None


def _logs(model, x, y, y_pred, sample_weight, loss):
    for metric in model.metrics:
        if metric.name == LOSS_LOG:
            # Unweighted, one update a step: the step callback recovers each step's loss from
            # this running mean (_loss_of_call), so no second output is needed. A per-step loss
            # returned beside it cost 2-3 % of a 1.4 ms Keras step (keras_marks_overhead).
            metric.update_state(loss)
        else:
            metric.update_state(y, y_pred, sample_weight=sample_weight)
    return {m.name: m.result() for m in model.metrics}


def mark_keras_phases(model, marks: PhaseMarks | None = None):
    """Give an existing Keras model (before fit) the phase-marking train_step of its backend.

    On the torch backend the phases are host ranges: `marks` (whose timer the step callback
    shares) records them."""
    import keras
    if keras.backend.backend() == "jax":
        # Keras' own step: one jitted program whose ops JAX names forward (jvp), backward
        # (transpose) and by the optimizer's scope; a scope of ours would change nothing there.
        # Its Python runs only while JAX traces it, where the batch's shape is static: the
        # batch size is noted there (capture_keras' layer FLOPs), at no cost to the steps.
        original = model.train_step

        def train_step(state, data):
            _note_batch(model, keras.utils.unpack_x_y_sample_weight(data)[0])
            return original(state, data)
        model.train_step = train_step
        return model
    if keras.backend.backend() == "torch":
        model._gapscope_marks = marks or PhaseMarks()
        model.train_step = types.MethodType(_marked_train_step_torch, model)
    else:
        model.train_step = types.MethodType(_marked_train_step_tf, model)
    return model


def mark_keras_inference(model, marks: PhaseMarks | None = None):
    """Mark Keras' own predict_step as the forward phase (inference runs nothing else)."""
    import keras
    if keras.backend.backend() == "jax":
        return model  # a jitted predict step holds forward ops only (no jvp, no transpose)
    original = model.predict_step
    on_torch = keras.backend.backend() == "torch"
    marks = marks or PhaseMarks()

    def predict_step(data):
        with (marks.phase("forward") if on_torch else tf_phase_scope("forward")):
            return original(data)
    model.predict_step = predict_step
    return model


def step_callback(timer: StepTimer, window: TraceWindow | None, *, tf_logdir=None,
                  jax_profile=None, torch_profiler=None, data_between_steps: bool = False, steps_per_call: int = 1,
                  window_hooks=None, samples_before=None):
    """A Keras callback that times every `train_function` call and records a profile over
    `window`: the TF profiler into `tf_logdir` (one `train` step event per call, as XProf's
    step view expects), a JAX profile (`jax_profile`: start, stop, a StepTraceAnnotation per
    call, the same step event), or a started torch.profiler that it steps once per call.

    With steps_per_execution > 1 Keras reports batches in jumps, so the window takes every
    call whose updates overlap it (`steps_per_call` each), even a first call that also holds
    the warm-up: a run of one long call is still traced rather than not at all.
    `data_between_steps`: the batch is fetched before `on_train_batch_begin` (Keras on
    torch), so the time since the previous call ended is this step's data_load.
    `window_hooks`: attached (`attach()`) at the window's first call and detached after its
    last (layer ranges on Keras-on-torch layers): the other steps run without them.
    `samples_before(n)`: the samples an epoch's first n batches hold, where Keras' loss mean
    weighs each update by its batch's size (its own train_step on JAX): the step losses then
    come out exact for a short last batch too. None: every update weighs one (gapscope's step)."""
    import keras

    class GapscopeStepCallback(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._step_trace = None
            self._tracing = False
            self._window_done = False
            self._previous_end = None
            # Keras numbers batches from 0 in every epoch; the window counts updates of the run.
            self._updates = 0
            self._in_call = False
            self._call_first = 0
            self._call_begin_batch = 0
            self._epoch_loss_total = 0.0
            self.traced_calls: list[int] = []

        @property
        def updates(self) -> int:
            """Updates (batches) the run has finished so far."""
            return self._updates

        @property
        def step_in_progress(self) -> int | None:
            """The first update of the call running now; None between calls (fit's set-up, its
            end), where what happens is in no step's time."""
            return self._call_first if self._in_call else None

        def on_train_batch_begin(self, batch, logs=None):
            self._call_first, self._call_begin_batch = self._updates, batch
            self._in_call = True
            call_last = self._call_first + steps_per_call - 1
            in_window = (window is not None and not self._window_done
                         and self._call_first <= window.last and call_last >= window.first)
            if in_window:
                self.traced_calls.append(self._call_first)
                if window_hooks is not None:
                    window_hooks.attach()  # once: a second attach adds nothing
                if tf_logdir and not self._tracing:
                    import tensorflow as tf
                    tf.profiler.experimental.start(logdir=str(tf_logdir))
                    self._tracing = True
                if jax_profile is not None and not self._tracing:
                    jax_profile.start()
                    self._tracing = True
            if self._tracing and jax_profile is not None:
                self._step_trace = jax_profile.step(self._call_first)
                self._step_trace.__enter__()
            elif self._tracing:
                import tensorflow as tf
                self._step_trace = tf.profiler.experimental.Trace(
                    "train", step_num=self._call_first, _r=1)
                self._step_trace.__enter__()
            if data_between_steps and self._previous_end is not None:
                timer.begin_step_at(self._previous_end)
                timer.add_phase(("data_load", self._previous_end, timer.now()))
            else:
                timer.begin_step()

        def on_train_batch_end(self, batch, logs=None):
            timer.end_step(self._loss_of_call(batch, (logs or {}).get(LOSS_LOG)))
            self._updates += batch - self._call_begin_batch + 1
            self._in_call = False
            if self._step_trace is not None:
                self._step_trace.__exit__(None, None, None)
                self._step_trace = None
            if torch_profiler is not None:
                torch_profiler.step()
            if window is not None and self._updates - 1 >= window.last:
                self._window_done = True
                self.finish_trace()
                if window_hooks is not None:
                    window_hooks.detach()
            self._previous_end = timer.now()

        def _loss_of_call(self, last_batch: int, running_mean):
            """The mean loss of the updates this call ran. The logs carry the epoch's running
            mean, an unweighted mean over the epoch's updates (_logs), so updates x mean is the
            epoch's loss total, and a call's loss is the difference of two totals over its
            updates (weighted by their samples where `samples_before` says them). The mean is
            float32: the result is off by about updates x loss x 1e-7 (2e-5 at the 100th update
            of a loss of 2)."""
            if running_mean is None:  # predict, or a model compiled without a loss
                return None
            before, after = self._call_begin_batch, last_batch + 1
            weight = samples_before or (lambda batches: batches)
            total = weight(after) * float(running_mean)
            previous = self._epoch_loss_total if before else 0.0  # batch 0: a new epoch
            self._epoch_loss_total = total
            return (total - previous) / (weight(after) - weight(before))

        def finish_trace(self):
            """Stops the TF or JAX profiler if this callback started it and it still runs."""
            if not self._tracing:
                return
            self._tracing = False
            if jax_profile is not None:
                jax_profile.stop()
                return
            import tensorflow as tf
            stop_tf_profiler(tf.profiler.experimental, Path(tf_logdir))

        # model.predict (inference runs) calls the same hooks under other names.
        on_predict_batch_begin = on_train_batch_begin
        on_predict_batch_end = on_train_batch_end

    return GapscopeStepCallback()
