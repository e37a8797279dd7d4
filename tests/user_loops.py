"""Test helper: small training loops written the way users write them, each run through
gapscope's public API into a run directory under `out`."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

BATCHES, BATCH = 24, 64
TRACE = (6, 10)
WARMUP = 3


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCHES * BATCH, 100), dtype=np.float32)
    y = (x @ rng.standard_normal((100, 10))).argmax(axis=1).astype(np.int64)
    return x, y


def torch_loop(out: Path, fail_at: int | None = None, interrupt_at: int | None = None):
    """The PyTorch tutorial's loop: DataLoader, forward, loss, backward, step, zero_grad."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import gapscope

    torch.manual_seed(0)
    x, y = data()
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                        batch_size=BATCH, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(100, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    with gapscope.capture("user-mlp", trace_steps=TRACE, out=out, device="cpu",
                          warmup_steps=WARMUP) as cap:
        for step, (inputs, targets) in enumerate(cap.data(loader)):
            if step == fail_at:
                raise ValueError("the user's loop broke")
            if step == interrupt_at:
                raise KeyboardInterrupt
            with cap.phase("forward"):
                loss = loss_fn(model(inputs), targets)
            with cap.phase("backward"):
                loss.backward()
            with cap.phase("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            cap.step(loss)
    return cap


def torch_profiler_tutorial(out: Path) -> Path:
    """A profile no gapscope code wrote: the torch.profiler tutorial's loop (schedule, trace
    handler, prof.step()) writing a foreign trace into `out`."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(2048, 100), torch.randint(0, 10, (2048,))),
                        batch_size=256, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(100, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with torch.profiler.profile(
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=4, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out))) as prof:
        for inputs, targets in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
            prof.step()
    return out


def torch_profile_without_steps(out: Path, iterations: int = 6) -> Path:
    """The DataLoader tutorials' shape: one profiler context around a whole loop, no schedule and
    no prof.step(), so the trace holds no ProfilerStep; writes `out`/worker0.pt.trace.json."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(256 * iterations, 100), torch.randint(0, 10, (256 * iterations,))),
                        batch_size=256)
    model = torch.nn.Sequential(torch.nn.Linear(100, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with torch.profiler.profile() as prof:
        for inputs, targets in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(inputs), targets).backward()
            optimizer.step()
    out.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / "worker0.pt.trace.json"))
    return out


def keras_fit(out: Path, steps_per_execution: int = 1, short_last_batch: int | None = None,
              trace_steps=TRACE, stop_at: int | None = None, signum: int | None = None):
    """`model.fit` on a compiled Sequential model, as the Keras guides write it.
    `short_last_batch`: the data cut so that the last batch holds that many samples.
    `stop_at`: the process sends itself `signum` as that batch begins (before a SIGKILL it waits
    two batches earlier for the live steps.csv flush to come due, as stopped_torch_loop)."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    import gapscope

    keras.utils.set_random_seed(0)
    x, y = data()
    if short_last_batch is not None:
        x, y = x[:short_last_batch - BATCH], y[:short_last_batch - BATCH]
    model = keras.Sequential([keras.Input((100,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=steps_per_execution)
    callbacks = []
    if stop_at is not None:
        import signal
        import time

        class Stop(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                if batch == stop_at:
                    os.kill(os.getpid(), signum)

            def on_train_batch_end(self, batch, logs=None):
                if signum == signal.SIGKILL and batch == stop_at - 2:
                    time.sleep(1.5)  # the flush is taken at the next batch's end

        callbacks.append(Stop())
    with gapscope.capture_keras(model, "user-mlp", trace_steps=trace_steps, out=out,
                                warmup_steps=WARMUP) as cap:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[cap, *callbacks])
    return cap, model


def gradient_tape_loop(out: Path, compiled: bool = True, kill_at: int | None = None):
    """A TensorFlow custom loop: tf.data, GradientTape and apply_gradients, the step a
    tf.function (`compiled`) or eager. `kill_at`: the process SIGKILLs itself as that step
    begins, after waiting (between steps) for the live steps.csv flush to come due."""
    import signal
    import time

    import keras
    import tensorflow as tf

    import gapscope

    x, y = data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    tf.random.set_seed(0)
    w1 = tf.Variable(tf.random.normal((100, 64), stddev=0.1))
    w2 = tf.Variable(tf.random.normal((64, 10), stddev=0.1))
    optimizer = keras.optimizers.SGD(0.1)
    with gapscope.capture("user-tape", trace_steps=TRACE, out=out, framework="tf",
                          warmup_steps=WARMUP) as cap:
        def train_step(inputs, targets):
            with tf.GradientTape() as tape:
                with cap.phase("forward"):
                    logits = tf.nn.relu(inputs @ w1) @ w2
                    loss = tf.reduce_mean(
                        tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits))
            with cap.phase("backward"):
                gradients = tape.gradient(loss, [w1, w2])
            with cap.phase("optimizer"):
                optimizer.apply_gradients(zip(gradients, [w1, w2]))
            return loss

        if compiled:
            train_step = tf.function(train_step)
        for step, (inputs, targets) in enumerate(cap.data(dataset)):
            if step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            cap.step(train_step(inputs, targets))
            if kill_at is not None and step == kill_at - 2:
                time.sleep(1.5)
    return cap


COMPILED_STEPS, COMPILED_BATCH, COMPILED_NEW_SHAPE_AT, COMPILED_TRACE = 14, 8, 8, (10, 12)


def compiled_torch_loop(out: Path, compiled: bool = True):
    """A loop whose model the user compiled (torch.compile, the cheap aot_eager backend: no C++
    compile), with a data-dependent branch (a graph break) and, at one step after the warm-up,
    a batch of another size (a recompile). `compiled=False`: the same loop, eager."""
    import torch

    import gapscope

    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(16, 16)
            self.head = torch.nn.Linear(16, 4)

        def forward(self, x):
            if x.mean() > 0:  # the inputs are positive: always taken, but Dynamo cannot know
                x = torch.relu(self.linear(x))
            return self.head(x)

    torch.manual_seed(0)
    model = Branchy()
    forward = torch.compile(model, backend="aot_eager") if compiled else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [COMPILED_BATCH // 2 if step == COMPILED_NEW_SHAPE_AT else COMPILED_BATCH
               for step in range(COMPILED_STEPS)]
    with gapscope.capture("user-compiled", trace_steps=COMPILED_TRACE, out=out,
                          warmup_steps=WARMUP) as cap:
        for batch in batches:
            with cap.phase("data_load"):
                inputs, targets = torch.rand(batch, 16), torch.randint(0, 4, (batch,))
            with cap.phase("forward"):
                loss = torch.nn.functional.cross_entropy(forward(inputs), targets)
            with cap.phase("backward"):
                loss.backward()
            with cap.phase("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            cap.step(loss)
    return cap


RETRACE_AT, RETRACE_STEPS = 13, 18


def tf_retrace_loop(out: Path):
    """A tf.function custom loop whose batch size changes at step RETRACE_AT, after the warm-up:
    TensorFlow traces the step function again there."""
    import keras
    import tensorflow as tf

    import gapscope

    x, y = data()
    first = tf.data.Dataset.from_tensor_slices((x[:RETRACE_AT * BATCH], y[:RETRACE_AT * BATCH])).batch(BATCH)
    rest = RETRACE_STEPS - RETRACE_AT
    second = tf.data.Dataset.from_tensor_slices(
        (x[-rest * BATCH // 2:], y[-rest * BATCH // 2:])).batch(BATCH // 2)
    tf.random.set_seed(0)
    w = tf.Variable(tf.random.normal((100, 10), stddev=0.1))
    optimizer = keras.optimizers.SGD(0.1)
    with gapscope.capture("user-retrace", trace_steps=None, out=out, framework="tf",
                          warmup_steps=WARMUP) as cap:
        @tf.function
        def train_step(inputs, targets):
            with tf.GradientTape() as tape:
                with cap.phase("forward"):
                    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(targets, inputs @ w))
            with cap.phase("backward"):
                gradients = tape.gradient(loss, [w])
            with cap.phase("optimizer"):
                optimizer.apply_gradients(zip(gradients, [w]))
            return loss

        for inputs, targets in cap.data(first.concatenate(second)):
            cap.step(train_step(inputs, targets))
    return cap


# A user's own model and loop (benchmarks.own_model, which gpu_check runs on CUDA too).
from benchmarks.own_model import (OWN_BATCH, OWN_SEQ, OWN_STEPS, OWN_TRACE, OWN_VOCAB,  # noqa: E402,F401
                                  OWN_WIDTH, own_batches, own_loss, own_model, own_model_loop)


def stopped_torch_loop(out: Path, stop_at: int, signum: int):
    """torch_loop's model and data, the process sending itself `signum` as step `stop_at` begins,
    inside the trace window (stop_at - 2, stop_at + 4). Before a SIGKILL it waits, between two
    steps, for the live steps.csv flush (once a second) to come due, so the steps before the
    kill are on disk as a job's would be."""
    import signal
    import time

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import gapscope

    torch.manual_seed(0)
    x, y = data()
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=BATCH)
    model = torch.nn.Sequential(torch.nn.Linear(100, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with gapscope.capture("user-stopped", trace_steps=(stop_at - 2, stop_at + 4), out=out,
                          warmup_steps=WARMUP) as cap:
        for step, (inputs, targets) in enumerate(cap.data(loader)):
            if step == stop_at:
                os.kill(os.getpid(), signum)
            with cap.phase("forward"):
                loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            with cap.phase("backward"):
                loss.backward()
            with cap.phase("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            cap.step(loss)
            if signum == signal.SIGKILL and step == stop_at - 2:
                time.sleep(1.5)  # outside any step; the flush is taken at the next step's end
