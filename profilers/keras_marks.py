"""Phase marks for Keras 3 on TensorFlow: a train_step with a name scope per phase, and a
callback that times steps and records the TF profile over the trace window."""
from __future__ import annotations

import types
from pathlib import Path

from profilers.tf_marks import tf_phase_scope
from profilers.timers import StepTimer
from profilers.trace_window import TraceWindow

BATCH_LOSS = "batch_loss"


def _marked_train_step(self, data):
    """Keras' own TF train_step, with each phase in its own name scope.

    The scopes become op-name prefixes inside tf.function and HLO metadata under XLA, so
    `model.fit`, `jit_compile` and `steps_per_execution` work unchanged. Gradient ops come
    out named `gradient_tape/gapscope_forward/...`; the analyzers count them as backward."""
    import keras
    import tensorflow as tf

    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
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
    for metric in self.metrics:
        if metric.name == "loss":
            metric.update_state(loss)
        else:
            metric.update_state(y, y_pred, sample_weight=sample_weight)
    logs = {m.name: m.result() for m in self.metrics}
    # The epoch's running mean is what "loss" reports; the per-step loss is kept apart.
    logs[BATCH_LOSS] = loss
    return logs


def mark_keras_phases(model):
    """Give an existing Keras model (before compile/fit) the phase-marking train_step."""
    model.train_step = types.MethodType(_marked_train_step, model)
    return model


def step_callback(timer: StepTimer, run_dir: Path | None, window: TraceWindow | None):
    """A Keras callback that times every `train_function` call and records the TF profile
    (with one `train` step event per step, as XProf's step view expects) over `window`."""
    import keras
    import tensorflow as tf

    class GapscopeStepCallback(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._step_trace = None

        def on_train_batch_begin(self, batch, logs=None):
            if window and run_dir and batch == window.first:
                tf.profiler.experimental.start(logdir=str(run_dir))
            if window and batch in window:
                self._step_trace = tf.profiler.experimental.Trace("train", step_num=batch, _r=1)
                self._step_trace.__enter__()
            timer.begin_step()

        def on_train_batch_end(self, batch, logs=None):
            timer.end_step((logs or {}).get(BATCH_LOSS))
            if self._step_trace is not None:
                self._step_trace.__exit__(None, None, None)
                self._step_trace = None
            if window and run_dir and batch == window.last:
                tf.profiler.experimental.stop()

    return GapscopeStepCallback()
