"""Each Keras step's loss as gapscope records it, recovered from the logs' running mean, against
the loss of each batch computed directly (real Keras fit, weights held still by a zero rate)."""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

BATCH, BATCHES, EPOCHS = 32, 8, 2


def _fit(steps_per_execution: int) -> tuple[list[dict], list[float]]:
    """The timer's rows of a 2-epoch fit, and the loss of each batch of one epoch."""
    import keras

    from gapscope.profilers.keras_marks import mark_keras_phases, step_callback
    from gapscope.profilers.marks import PhaseMarks
    from gapscope.profilers.timers import StepTimer

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH * BATCHES, 20)).astype("float32")
    y = rng.integers(0, 10, BATCH * BATCHES)
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(10)])
    timer = StepTimer()
    mark_keras_phases(model, PhaseMarks(timer, uses_torch=False))
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # A zero learning rate keeps the weights where they started: every batch's loss in fit is
    # the loss the model gives that batch now, in either epoch.
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0), loss=loss_fn,
                  steps_per_execution=steps_per_execution)
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
              callbacks=[step_callback(timer, None, steps_per_call=steps_per_execution)])
    batch_losses = [float(loss_fn(y[i:i + BATCH], model(x[i:i + BATCH])))
                    for i in range(0, len(x), BATCH)]
    return timer.rows(timed_phases=()), batch_losses


def test_every_steps_loss_is_its_batchs_loss_in_every_epoch():
    rows, batch_losses = _fit(steps_per_execution=1)
    assert len(rows) == EPOCHS * BATCHES
    assert len(set(round(v, 4) for v in batch_losses)) == BATCHES  # the batches do differ
    assert [r["loss"] for r in rows] == pytest.approx(batch_losses * EPOCHS, rel=1e-5)


def test_a_call_of_several_steps_records_the_mean_loss_of_its_steps():
    rows, batch_losses = _fit(steps_per_execution=4)
    assert len(rows) == EPOCHS * BATCHES // 4  # the timer sees calls; the runner splits them
    per_call = [float(np.mean(batch_losses[i:i + 4])) for i in range(0, BATCHES, 4)]
    assert [r["loss"] for r in rows] == pytest.approx(per_call * EPOCHS, rel=1e-5)
