"""Keras 3 on TensorFlow: `model.fit` with the phase-marking train_step, timed and traced by a callback."""
from __future__ import annotations

import os
from pathlib import Path

from profilers.keras_marks import mark_keras_phases, step_callback
from profilers.timers import StepTimer
from profilers.trace_window import TraceWindow
from workloads.data import synthetic_classification
from workloads.devices import tf_device
from workloads.settings import RunSettings
from workloads.spec import WorkloadSpec


def run_keras(spec: WorkloadSpec, settings: RunSettings, run_dir: Path) -> tuple[list[dict], dict]:
    # Keras fixes its backend at first import; each run has its own process, so this holds.
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import keras
    import tensorflow as tf

    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(f"keras was already imported with backend {keras.backend.backend()}")
    keras.utils.set_random_seed(spec.seed)
    device = tf_device(settings.device)
    x, y = synthetic_classification(spec.batch_size * settings.steps, spec.input_shape,
                                    spec.num_classes, spec.seed)
    window = TraceWindow.after_warmup(settings.warmup_steps, settings.trace_steps, settings.steps)
    timer = StepTimer()  # host clock: fit returns each step's logs, so the step is done
    with tf.device(device):
        model = mark_keras_phases(spec.builders().build_keras(spec))
        model.compile(
            optimizer=keras.optimizers.RMSprop(learning_rate=spec.learning_rate),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=settings.jit_compile,
            steps_per_execution=settings.steps_per_execution,
        )
        callback = step_callback(timer, run_dir if settings.trace else None,
                                 window if settings.trace and window.steps else None)
        model.fit(x, y, batch_size=spec.batch_size, epochs=1, shuffle=True, verbose=0,
                  callbacks=[callback])

    # Phases run inside the compiled train function: host timers see only whole steps.
    rows = timer.rows(timed_phases=())
    for row in rows:
        row["warmup"] = row["step"] < settings.warmup_steps
        row["traced"] = settings.trace and row["step"] in window
    return rows, {"device": _device_name(device), "parameters": model.count_params(),
                  "trace_window": [window.first, window.last] if settings.trace else None}


def _device_name(device: str) -> str:
    import tensorflow as tf
    from profilers.environment import cpu_name
    if device.startswith("/GPU"):
        details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
        return details.get("device_name", "GPU")
    return cpu_name()
