"""Plain torch / Keras training loops, written without gapscope, that time gapscope's configurations."""
from __future__ import annotations

# Nothing from gapscope's runners, marks, timers or profilers is imported here: these loops
# are the "truth" that benchmarks/gap_truth.py holds gapscope's A/B measurement against. Only
# the synthetic data generators are shared (workloads.data / workloads.digits, pure NumPy), so
# both sides train on the same bytes. Every other setting is written out again below, by hand,
# from workloads/registry.py, workloads/models/*.py and the runners; gap_truth.py checks the
# parameter counts against `gapscope list` so a drifted copy is caught. (`--cached`, an
# experiment of process_spread's, reads the data through gapscope's own data path instead.)
#
# Usage: python -m benchmarks.plain_loops WORKLOAD FRAMEWORK [VARIANT] --steps N
#   WORKLOAD cnn | mlp, FRAMEWORK torch | keras | keras-jax, VARIANT default | compile (torch) |
#   jit (keras; keras-jax always jits its step, as Keras does on JAX)
# Prints one JSON object on stdout: per-step times (ms), the steady-state mean after warm-up.

import argparse
import json
import os
import resource
import statistics
import sys
import time

# What gapscope's registry says for the two workloads (workloads/registry.py, spec defaults).
BATCH_SIZE = 256
LEARNING_RATE = 1e-4          # RMSprop, each framework's own defaults for rho/alpha and eps
SEED = 0
WORKLOADS = {
    # name: (input shape as the data holds it (channels-last), classes, hidden, samples per epoch)
    "mlp": ((100,), 10, (128,), 10_000),
    "cnn": ((28, 28, 1), 10, (128,), 60_000),
}
CONFIGS = {("cnn", "torch", "default"), ("cnn", "keras", "default"),
           ("mlp", "torch", "default"), ("mlp", "torch", "compile"),
           ("mlp", "keras", "default"), ("mlp", "keras", "jit"),
           ("cnn", "keras-jax", "default"), ("mlp", "keras-jax", "default")}
# torchvision's MNIST Normalize values, the ones workloads/data.py standardises with.
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def training_data(workload: str, steps: int, full_epoch: bool = False, cached: bool = False):
    """x (channels-last float32) and int64 labels for exactly `steps` batches, made as gapscope's
    workloads.datasets.dataset_for makes them: one epoch generated with the workload's seed,
    repeated if the steps need more, then cut to batch_size * steps samples (or, with
    `full_epoch`, kept whole when the steps need less, as gapscope's runs keep it). `cached`:
    read through gapscope's own data path (workloads.data.load_dataset: the `.npz` cache of
    the epoch, normalised once), whose allocations before the loop are gapscope's, not these."""
    import numpy as np

    shape, classes, _, epoch = WORKLOADS[workload]
    if cached:
        from gapscope.workloads.data import load_dataset
        from gapscope.workloads.registry import get_workload
        x, y = load_dataset(get_workload(workload))
    elif workload == "cnn":
        from gapscope.workloads.digits import synthetic_digits
        pixels, y = synthetic_digits(epoch, SEED)
        # The same operations in the same order as workloads.data.normalize_images (same bits).
        x = pixels.astype(np.float32)
        x *= 1.0 / 255.0
        x -= MNIST_MEAN
        x *= 1.0 / MNIST_STD
    else:
        from gapscope.workloads.data import synthetic_classification
        x, y = synthetic_classification(epoch, shape, classes, SEED)
    samples = max(BATCH_SIZE * steps, len(x) if full_epoch else 0)
    if samples > len(x):
        repeats = -(-samples // len(x))
        x, y = np.concatenate([x] * repeats), np.concatenate([y] * repeats)
    return x[:samples], y[:samples]


def torch_model(workload: str):
    from torch import nn
    if workload == "mlp":
        return nn.Sequential(nn.Linear(100, 128), nn.ReLU(), nn.Linear(128, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(),
        nn.Flatten(), nn.Linear(8 * 8 * 64, 128), nn.ReLU(), nn.Linear(128, 10))


def keras_model(workload: str):
    import keras
    from keras import layers
    if workload == "mlp":
        return keras.Sequential([keras.Input((100,)), layers.Dense(128, activation="relu"),
                                 layers.Dense(10)])
    conv = dict(activation="relu", data_format="channels_last")
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Conv2D(32, 3, **conv), layers.Conv2D(32, 3, **conv),
        layers.MaxPooling2D(2, data_format="channels_last"),
        layers.Conv2D(32, 3, **conv), layers.Conv2D(64, 3, **conv),
        layers.Flatten(), layers.Dense(128, activation="relu"), layers.Dense(10)])


def run_torch(workload: str, variant: str, steps: int, device_name: str,
              full_epoch: bool = False, bookkeeping: bool = False, cached: bool = False,
              faults: bool = False) -> dict:
    """The textbook loop: DataLoader over a TensorDataset of prepared NCHW tensors (shuffle,
    batch 256, no workers: torch_pipelines' default "tensor-dataset"), zero_grad, forward,
    loss, backward, step; torch.compile wraps the model only, mode="default"."""
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(SEED)
    device = torch.device("cuda" if device_name == "auto" and torch.cuda.is_available()
                          else "cpu" if device_name == "auto" else device_name)
    x, y = training_data(workload, steps, full_epoch, cached)
    if x.ndim == 4:
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))  # NHWC -> NCHW, once, before the loop
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                        batch_size=BATCH_SIZE, shuffle=True, num_workers=0,
                        generator=torch.Generator().manual_seed(SEED),
                        pin_memory=device.type == "cuda")
    model = torch_model(workload).to(device)
    forward = torch.compile(model, mode="default") if variant == "compile" else model
    loss_fn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.RMSprop(model.parameters(), lr=LEARNING_RATE)
    cuda = device.type == "cuda"

    clock, times_ns, losses = time.perf_counter_ns, [], []
    # --bookkeeping: one (phase, start, end) tuple a phase, in one list that grows all run,
    # as gapscope's StepTimer keeps them.
    marks, mark = [], (lambda name, begun: marks.append((name, begun, clock()))) if bookkeeping \
        else (lambda name, begun: None)
    # --faults: each step's minor page faults, read as gapscope's step timer reads them.
    step_faults = []
    minor_faults = (lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt) if faults \
        else (lambda: 0)
    batches = iter(loader)
    for _ in range(steps):
        faults_before = minor_faults()
        start = clock()
        inputs, targets = next(batches)
        inputs = inputs.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        mark("data_load", start)
        begun = clock()
        optimizer.zero_grad(set_to_none=True)
        mark("optimizer", begun)
        begun = clock()
        loss = loss_fn(forward(inputs), targets)
        mark("forward", begun)
        begun = clock()
        loss.backward()
        mark("backward", begun)
        begun = clock()
        optimizer.step()
        mark("optimizer", begun)
        if cuda:
            torch.cuda.synchronize()  # a host clock only sees the GPU's work after a sync
        times_ns.append(clock() - start)
        step_faults.append(minor_faults() - faults_before)
        # Read after the clock, as a loop that logs its loss would; on a CPU it is ready.
        losses.append(loss.item())
    parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"times_ms": [t / 1e6 for t in times_ns], "losses": losses, "parameters": parameters,
            "device": str(device), "threads": torch.get_num_threads(),
            **({"minor_faults": step_faults} if faults else {})}


def run_keras(workload: str, variant: str, steps: int, device_name: str,
              gapscope_step: bool = False, backend: str = "tensorflow") -> dict:
    """model.fit on NumPy arrays (fit shuffles: keras_runner's default "numpy" pipeline),
    jit_compile set explicitly as gapscope does, steps timed by a callback as a user would.
    `gapscope_step`: gapscope's instrumentation instead, in this otherwise plain process: the
    train_step marked by phase and gapscope's step callback with its StepTimer, as
    workloads/runners/keras_runner.py runs them (no trace window). `backend` "jax": Keras on
    JAX, whose fit jits the step (jit_compile True, as 'auto' resolves there)."""
    os.environ["KERAS_BACKEND"] = backend  # before Keras is imported: fixed at import
    on_jax = backend == "jax"
    if on_jax and device_name == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    import math

    import keras

    if device_name == "cpu" and not on_jax:
        import tensorflow as tf
        tf.config.set_visible_devices([], "GPU")
    keras.utils.set_random_seed(SEED)
    x, y = training_data(workload, steps)
    model = keras_model(workload)
    if gapscope_step:
        from gapscope.profilers.keras_marks import mark_keras_phases, step_callback
        from gapscope.profilers.marks import PhaseMarks
        from gapscope.profilers.timers import HostClock, StepTimer
        step_timer = StepTimer(HostClock())
        mark_keras_phases(model, PhaseMarks(step_timer, uses_torch=False))
    model.compile(optimizer=keras.optimizers.RMSprop(learning_rate=LEARNING_RATE),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  # Explicit, not Keras' "auto": "auto" turns XLA on where a GPU is seen.
                  jit_compile=on_jax or variant == "jit", steps_per_execution=1)

    timer = step_callback(step_timer, None) if gapscope_step else step_times_callback()
    model.fit(x, y, batch_size=BATCH_SIZE, epochs=1, shuffle=True, verbose=0, callbacks=[timer])
    if gapscope_step:
        rows = step_timer.rows(timed_phases=())
        times_ms, losses = [r["step_ms"] for r in rows], [r["loss"] for r in rows]
    else:
        times_ms, losses = [t / 1e6 for t in timer.times_ns], timer.losses
    parameters = sum(math.prod(w.shape) for w in model.trainable_weights)
    if on_jax:
        import jax
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
    else:
        import tensorflow as tf
        gpus = tf.config.list_logical_devices("GPU")
    return {"times_ms": times_ms, "losses": losses,
            "parameters": parameters, "device": "gpu" if gpus else "cpu",
            "jit_compile": bool(getattr(model, "jit_compile", variant == "jit"))}


def step_times_callback():
    """A Keras callback that times each step as a user would: the clock at the batch's begin and
    end, and the loss the logs carry, kept in `times_ns` and `losses`."""
    import keras

    class StepTimes(keras.callbacks.Callback):
        # Overriding on_train_batch_end also keeps fit from dispatching callbacks on a
        # thread pool: each step's logs are read before the next step starts.
        def __init__(self):
            super().__init__()
            self.times_ns, self.losses, self._start = [], [], None

        def on_train_batch_begin(self, batch, logs=None):
            self._start = time.perf_counter_ns()

        def on_train_batch_end(self, batch, logs=None):
            self.times_ns.append(time.perf_counter_ns() - self._start)
            self.losses.append((logs or {}).get("loss"))
    return StepTimes()


def summarise(result: dict, warmup: int) -> dict:
    """Steady state: the mean of the steps after the first `warmup` (compile, tracing and
    first-touch allocations live there), as gapscope's warm-up exclusion does."""
    steady = result["times_ms"][warmup:]
    return {**result,
            "warmup_steps": warmup,
            "steady_steps": len(steady),
            "step_ms": statistics.fmean(steady) if steady else None,
            "median_ms": statistics.median(steady) if steady else None,
            "warmup_ms": sum(result["times_ms"][:warmup])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("workload", choices=sorted(WORKLOADS))
    parser.add_argument("framework", choices=("torch", "keras", "keras-jax"))
    parser.add_argument("variant", nargs="?", default="default",
                        choices=("default", "compile", "jit"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--full-epoch", action="store_true",
                        help="torch: hold the whole generated epoch, as gapscope's runs do, not "
                             "only the samples the steps use")
    parser.add_argument("--bookkeeping", action="store_true",
                        help="torch: keep a (phase, start, end) tuple a phase in one growing "
                             "list, as a phase timer does")
    parser.add_argument("--cached", action="store_true",
                        help="torch: read the data through gapscope's data path (its .npz cache)")
    parser.add_argument("--faults", action="store_true",
                        help="torch: count each step's minor page faults (one getrusage a step)")
    parser.add_argument("--gapscope-step", action="store_true",
                        help="keras: gapscope's marked train_step and step callback in this process")
    args = parser.parse_args(argv)
    if (args.workload, args.framework, args.variant) not in CONFIGS:
        parser.error(f"no plain loop for {args.workload} {args.framework} {args.variant}")
    # A flag the loop would ignore must not pass for a measured difference.
    ignored = [f"--{name.replace('_', '-')}" for name in
               (("full_epoch", "bookkeeping", "cached", "faults") if args.framework != "torch"
                else ("gapscope_step",)) if getattr(args, name)]
    if ignored:
        parser.error(f"{', '.join(ignored)} does not apply to the {args.framework} loop")
    if args.steps <= args.warmup:
        parser.error(f"--steps must exceed --warmup ({args.warmup}): no steady steps otherwise")
    started = time.perf_counter()
    if args.framework == "torch":
        result = run_torch(args.workload, args.variant, args.steps, args.device, args.full_epoch,
                           args.bookkeeping, args.cached, args.faults)
    else:
        result = run_keras(args.workload, args.variant, args.steps, args.device, args.gapscope_step,
                           "jax" if args.framework == "keras-jax" else "tensorflow")
    result = summarise(result, args.warmup)
    result.update(workload=args.workload, framework=args.framework, variant=args.variant,
                  steps=args.steps, wall_s=round(time.perf_counter() - started, 3))
    # One line, last on stdout: the caller parses it (TF may print its own lines before).
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
