"""Keras 3 `model.fit` on the TensorFlow backend (framework `keras`), the torch backend
(`keras-torch`) or JAX (`keras-jax`), with the phase-marking train_step and a callback that
times and traces."""
from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

from gapscope.profilers.environment import jax_device_name, tf_device_name, torch_device_name
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.marks import PhaseMarks
from gapscope.profilers.run_dir import mark_rows
from gapscope.profilers.timers import CudaEventClock, HostClock, StepTimer, resident_mb
from gapscope.profilers.trace_window import TraceWindow
from gapscope.workloads.runners.tf_traces import TraceLog
from gapscope.workloads.datasets import dataset_for
from gapscope.workloads.models.params import keras_parameters
from gapscope.workloads.runners.execution_rows import expand_executions
from gapscope.workloads.runners.jax_profile import JaxProfile
from gapscope.workloads.settings import RunSettings
from gapscope.workloads.registry import missing_extra
from gapscope.workloads.spec import WorkloadSpec
from gapscope.workloads.runners.tf_distribute import (build_from_local_batch, check_cluster, distributed_facts, make_strategy,
                                     peer_failures, rank_data, sharded_dataset, traces_rank, world_size)

XLA_DUMP_DIR = "xla_dump"
# Keras' backend per framework path: fixed when Keras is imported, so each run is a process.
BACKENDS = {"keras": "tensorflow", "keras-torch": "torch", "keras-jax": "jax"}


def run_keras(spec: WorkloadSpec, settings: RunSettings, run_dir: Path) -> tuple[list[dict], dict]:
    on_torch = settings.framework == "keras-torch"
    on_jax = settings.framework == "keras-jax"
    world = world_size(settings)
    if world > 1:
        refuse_distributed(settings, on_torch, world)
    _prepare_environment(settings, run_dir)
    import keras

    after_import = resident_mb()  # the framework's footprint, before the model and data
    if keras.backend.backend() != BACKENDS[settings.framework]:
        raise RuntimeError(f"keras was already imported with backend {keras.backend.backend()}")
    # MultiWorkerMirroredStrategy must exist before TensorFlow's runtime starts: first thing.
    strategy, rank = (make_strategy(), check_cluster(world)) if world > 1 else (None, 0)
    _set_random_seed(keras, spec.seed, on_jax)
    if settings.mixed_precision:
        keras.config.set_dtype_policy(settings.mixed_precision)
    device = _device(settings)
    if strategy is None:
        x, y = dataset_for(spec, settings, raw=settings.pipeline == "transforms")
        inputs = _inputs(settings, spec, x, y, on_torch, device)
        updates_per_epoch = -(-len(x) // spec.batch_size)
    else:
        inputs, updates_per_epoch = _rank_inputs(spec, settings, rank, world)
    steps = (settings.epochs or 1) * updates_per_epoch
    window = TraceWindow.after_warmup(settings.warmup_steps, settings.trace_steps, steps)
    # Of a multi-worker run only the chief traces: TF's profiler crashes the others (traces_rank).
    traced = settings.trace and (strategy is None or traces_rank(rank))
    cuda = device == "cuda"
    timer = StepTimer(CudaEventClock() if on_torch and cuda else HostClock())
    profiler = None
    if settings.trace and window.steps and on_torch:
        from gapscope.profilers.torch_session import torch_profiler
        profiler = torch_profiler(run_dir, _executions_window(window, settings), cuda)

    with strategy.scope() if strategy is not None else nullcontext():
        # Under the strategy, variables are mirrored on every worker (initial values from rank 0).
        model = spec.builders().build_keras(spec)
        from gapscope.profilers.keras_marks import mark_keras_inference, mark_keras_phases, step_callback
        marks = PhaseMarks(timer, uses_torch=on_torch)
        if settings.inference:
            mark_keras_inference(model, marks)
        else:
            mark_keras_phases(model, marks)
        # Keras on JAX jits its step always ('auto' is True there); False would run it op by op.
        model.compile(optimizer=keras_optimizer(keras, spec), loss=keras_loss(keras, spec),
                      jit_compile=True if on_jax else settings.jit_compile,
                      steps_per_execution=settings.steps_per_execution)
    callback = step_callback(timer, window if traced else None,
                             tf_logdir=run_dir if traced and settings.framework == "keras" else None,
                             jax_profile=JaxProfile(run_dir) if traced and on_jax else None,
                             torch_profiler=profiler, data_between_steps=on_torch,
                             steps_per_call=settings.steps_per_execution,
                             window_hooks=_torch_layer_ranges(spec, model, settings, profiler),
                             samples_before=_samples_before(x, spec) if on_jax and strategy is None else None)
    # On TF, the train_step's Python body runs only when Keras' tf.function traces it: each
    # trace, with its input signature and the update it came at, goes to compile.json.
    trace_log = jax_log = None
    if on_jax:
        from gapscope.workloads.runners.jax_compiles import JaxCompileLog
        jax_log = JaxCompileLog(step_of=lambda: callback.step_in_progress)
        jax_log.start()
    elif not on_torch and not settings.inference:
        trace_log = TraceLog(step_of=lambda: callback.updates)
        model.train_step = trace_log.wrap(model.train_step, name="train_step")
    if profiler is not None:
        profiler.start()
    try:
        if strategy is None:
            _fit_or_predict(model, inputs, spec, settings, callback)
        else:
            build_from_local_batch(model)
            with peer_failures():
                model.fit(inputs, epochs=settings.epochs or 1, steps_per_epoch=updates_per_epoch,
                          shuffle=False, verbose=0, callbacks=[callback])  # the pipeline shuffles
    finally:
        if profiler is not None:
            profiler.stop()
        if trace_log is not None:
            trace_log.write(run_dir, jit_compile=bool(getattr(model, "jit_compile", False)))
        if jax_log is not None:
            jax_log.stop()
            jax_log.write(run_dir)
    if callback.updates < steps:
        # Keras ends fit quietly on an OutOfRangeError from anywhere in a step, taking it for
        # the end of the data: a short run is a failure, not a result.
        raise RuntimeError(f"Keras stopped after {callback.updates} of {steps} steps "
                           "(its input ran out, or a step raised OutOfRangeError)")

    timed = ("data_load", "forward", "backward", "optimizer") if on_torch else ()
    rows = expand_executions(timer.rows(timed_phases=timed), settings.steps_per_execution,
                             updates_per_epoch, steps)
    mark_rows(rows, settings.warmup_steps, set(callback.traced_calls), "execution_first_step")
    facts = {"device": _device_name(settings.framework, device), "parameters": keras_parameters(model),
             "steps_per_epoch": updates_per_epoch, "steps_run": steps, "rss_after_import_mb": after_import,
             "jit_compile_resolved": getattr(model, "jit_compile", None),
             "trace_window": [window.first, window.last] if traced else None}
    if strategy is not None:
        facts.update(distributed_facts(model.weights, spec.batch_size, world, rank, settings.trace))
    return rows, facts


def _set_random_seed(keras, seed: int, on_jax: bool) -> None:
    """keras.utils.set_random_seed; on JAX without importing TensorFlow to seed it (Keras does
    wherever TF is installed): a keras-jax run uses no TF op, and TF's import cost 4.4 s and
    420 MB of resident memory here, which the run's memory figures would count as JAX's.
    Python's import system refuses a module whose sys.modules entry is None."""
    import sys
    blocked = on_jax and "tensorflow" not in sys.modules
    if blocked:
        sys.modules["tensorflow"] = None
    try:
        keras.utils.set_random_seed(seed)
    finally:
        if blocked:
            del sys.modules["tensorflow"]


def _samples_before(x, spec: WorkloadSpec):
    """Keras' own JAX train_step weighs each update's loss by its batch size: the samples an
    epoch's first n batches hold (NumPy arrays into fit: full batches, then the rest)."""
    return lambda batches: min(batches * spec.batch_size, len(x))


def _rank_inputs(spec: WorkloadSpec, settings: RunSettings, rank: int, world: int):
    """This rank's tf.data pipeline (its disjoint rank_data, `rank::world`) and its updates per epoch.

    A step run takes batch * world * steps samples, as a one-process run with the global batch
    would; an epoch is the whole set, cut to full global batches so every rank runs as many steps."""
    x, y, updates_per_epoch = rank_data(spec, settings, rank, world)
    # Repeated (with the step count given to fit): Keras counts a distributed dataset's steps
    # as its global batches, 1/world of the per-rank steps, and would stop there.
    return sharded_dataset(x, y, spec.batch_size, world, seed=spec.seed + rank), updates_per_epoch


def refuse_distributed(settings: RunSettings, on_torch: bool, world: int) -> None:
    """What MultiWorkerMirroredStrategy runs here; anything else is refused in one line."""
    what = None
    if getattr(settings, "nnodes", 1) > 1:
        what = "--nnodes > 1 (TF workers run on one host here)"
    elif settings.framework != "keras":
        what = f"{settings.framework} (Keras on {BACKENDS[settings.framework]} has no tf.distribute)"
    elif settings.inference:
        what = "inference"
    elif settings.steps_per_execution > 1:
        what = ("steps_per_execution > 1 (Keras 3.15's multi-step loop fails under "
                "MultiWorkerMirroredStrategy: 'You must feed a value for placeholder tensor')")
    elif settings.jit_compile:
        what = ("jit_compile (XLA compiles only NCCL collectives, MWMS on CPU uses RING: "
                "'Only compiling NCCL/auto collective is supported, got: ring')")
    elif (settings.pipeline or "numpy") not in ("numpy", "tfdata"):
        what = f"pipeline {settings.pipeline!r}"
    if what:
        raise GapscopeInputError(
            f"--nproc {world} with {what} is not supported: distributed Keras runs are "
            "keras (TensorFlow backend) training with the numpy or tfdata pipeline, without "
            "jit_compile, one step per execution")


def _torch_layer_ranges(spec: WorkloadSpec, model, settings: RunSettings, profiler):
    """On the torch backend a Keras layer is a torch module: the torch runner's layer ranges
    around each named layer in the traced window (its loss is Keras' compute_loss, no module:
    outside layers). None on TF (its op scopes name the layers), without a profiler, or under
    jit_compile, whose torch.compile would trace the hooks into its graph."""
    layers = spec.layers()
    if profiler is None or layers is None or settings.jit_compile:
        return None
    from gapscope.workloads.runners.layer_ranges import LayerRanges
    return LayerRanges({layer.name: model.get_layer(layer.name) for layer in layers
                        if layer.kind != "loss"})


def _fit_or_predict(model, inputs, spec: WorkloadSpec, settings: RunSettings, callback) -> None:
    if settings.inference:
        # predict makes one pass; more epochs of inference are more passes.
        for _ in range(settings.epochs or 1):
            model.predict(inputs[0] if isinstance(inputs, tuple) else inputs,
                          batch_size=spec.batch_size, verbose=0, callbacks=[callback])
        return
    fit_args = dict(epochs=settings.epochs or 1, verbose=0, callbacks=[callback])
    if isinstance(inputs, tuple):
        model.fit(*inputs, batch_size=spec.batch_size, shuffle=True, **fit_args)
    else:
        model.fit(inputs, **fit_args)


def _prepare_environment(settings: RunSettings, run_dir: Path) -> None:
    """Before Keras is imported: the backend is fixed at import, and XLA reads its flags once.
    On JAX the profile holds each program's HloProto: no dump is needed."""
    os.environ["KERAS_BACKEND"] = BACKENDS[settings.framework]
    if settings.framework == "keras-jax":
        missing = missing_extra(settings.framework)  # launch checked; a child may be started by hand
        if missing:
            raise GapscopeInputError(missing)
        if settings.device == "cpu":
            os.environ["JAX_PLATFORMS"] = "cpu"  # read once, when JAX starts its backends
    elif settings.framework == "keras" and settings.jit_compile:
        dump_xla_hlo(run_dir)


def dump_xla_hlo(run_dir: Path) -> None:
    """Have XLA write each program's optimized HLO into the run: its metadata op_name
    (gapscope_<phase>/...) is the only link from fused kernels back to the phases. XLA reads
    its flags once, so this must run before TensorFlow is imported."""
    flags = f"--xla_dump_to={run_dir / XLA_DUMP_DIR} --xla_dump_hlo_as_text"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()


def _executions_window(window: TraceWindow, settings: RunSettings) -> TraceWindow:
    """torch.profiler counts calls of the train function, not updates."""
    spe = settings.steps_per_execution
    first = max(1, window.first // spe)
    return TraceWindow(first, max(1, -(-window.steps // spe)))


def _device_name(framework: str, device: str) -> str:
    if framework == "keras-torch":
        return torch_device_name(device)
    if framework == "keras-jax":
        return jax_device_name()
    return tf_device_name(gpu=device == "cuda")


def _device(settings: RunSettings) -> str:
    if settings.framework == "keras-jax":
        from gapscope.workloads.devices import jax_device
        return jax_device(settings.device)
    if settings.framework == "keras-torch":
        from gapscope.workloads.devices import torch_device
        return torch_device(settings.device).type
    from gapscope.workloads.devices import tf_device
    return "cuda" if tf_device(settings.device).startswith("/GPU") else "cpu"


def _inputs(settings: RunSettings, spec: WorkloadSpec, x, y, on_torch: bool, device: str):
    pipeline = settings.pipeline or "numpy"
    if pipeline == "numpy":
        return (x, y)
    if pipeline == "tfdata":
        import tensorflow as tf
        autotune = tf.data.AUTOTUNE
        return (tf.data.Dataset.from_tensor_slices((x, y))
                .shuffle(20000, seed=spec.seed)
                .batch(spec.batch_size, num_parallel_calls=autotune)
                .prefetch(autotune))
    import torch
    from gapscope.workloads.runners.torch_pipelines import make_batches
    # Keras on torch takes a DataLoader as it is; the layout stays Keras' (channels last).
    return make_batches(pipeline, x, y, batch_size=spec.batch_size, num_workers=settings.num_workers,
                        drop_last=settings.drop_last, device=torch.device(device), seed=spec.seed,
                        channels_first=False)


def keras_optimizer(keras, spec: WorkloadSpec):
    optimizers = {"rmsprop": keras.optimizers.RMSprop, "sgd": keras.optimizers.SGD}
    return optimizers[spec.optimizer](learning_rate=spec.learning_rate)


def keras_loss(keras, spec: WorkloadSpec):
    if spec.loss == "mse":
        return keras.losses.MeanSquaredError()
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

