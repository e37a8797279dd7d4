"""A raw TensorFlow custom loop (seed 003): GradientTape executed eagerly, inside tf.function,
or inside tf.function(jit_compile=True), with the Keras-built model of the workload."""
from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

from gapscope.profilers.environment import tf_device_name
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.marks import PhaseMarks
from gapscope.profilers.run_dir import mark_rows
from gapscope.profilers.timers import StepTimer, resident_mb
from gapscope.profilers.trace_window import TraceWindow
from gapscope.workloads.runners.tf_traces import TraceLog
from gapscope.workloads.datasets import dataset_for
from gapscope.profilers.phases import LOSS_SCOPE
from gapscope.workloads.runners.keras_runner import dump_xla_hlo, keras_loss, keras_optimizer
from gapscope.workloads.models.params import keras_parameters
from gapscope.workloads.settings import RunSettings
from gapscope.workloads.spec import WorkloadSpec
from gapscope.workloads.runners.tf_distribute import (check_cluster, distributed_facts, make_strategy, peer_failures,
                                     rank_data, sharded_dataset, traces_rank, world_size)


def run_tf(spec: WorkloadSpec, settings: RunSettings, run_dir: Path) -> tuple[list[dict], dict]:
    os.environ["KERAS_BACKEND"] = "tensorflow"
    world = world_size(settings)
    if world > 1 and settings.tf_mode == "xla":
        raise GapscopeInputError(f"--nproc {world} with tf mode xla is not supported: distributed raw TF "
                                 "loops run eager or tf.function (XLA compiles only NCCL collectives, not CPU's RING)")
    if settings.tf_mode == "xla":
        dump_xla_hlo(run_dir)
    import keras
    import tensorflow as tf

    after_import = resident_mb()  # the framework's footprint, before the model and data
    from gapscope.profilers.step_sessions import TfStepSession
    from gapscope.profilers.tf_marks import TfPhases
    from gapscope.workloads.devices import tf_device

    # MultiWorkerMirroredStrategy must exist before TensorFlow's runtime starts: first thing.
    strategy, rank = (make_strategy(), check_cluster(world)) if world > 1 else (None, 0)
    keras.utils.set_random_seed(spec.seed)
    device = tf_device(settings.device)
    if strategy is None:
        x, y = dataset_for(spec, settings)
        batches = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(20000, seed=spec.seed)
                   .batch(spec.batch_size).prefetch(tf.data.AUTOTUNE))
        updates_per_epoch = -(-len(x) // spec.batch_size)
    else:
        # This rank's shard (rank::world), endless: epochs are counted from the step number.
        x, y, updates_per_epoch = rank_data(spec, settings, rank, world)
        batches = strategy.experimental_distribute_dataset(
            sharded_dataset(x, y, spec.batch_size, world, seed=spec.seed + rank))
    steps = settings.epochs * updates_per_epoch if settings.epochs else settings.steps
    timer = StepTimer()
    phases = TfPhases(PhaseMarks(timer, uses_torch=False))
    window = TraceWindow.after_warmup(settings.warmup_steps, settings.trace_steps, steps)
    # Of a multi-worker run only the chief traces: TF's profiler crashes the others (traces_rank).
    traced = settings.trace and (strategy is None or traces_rank(rank))
    session = TfStepSession(run_dir, window if traced else None,
                            settle_steps=1 if strategy is not None else 0)

    with tf.device(device) if strategy is None else strategy.scope():
        model = spec.builders().build_keras(spec)
        optimizer = keras_optimizer(keras, spec)
        loss_fn = keras_loss(keras, spec)

        def train_step(inputs, targets):
            with tf.GradientTape() as tape:
                with phases.phase("forward"):
                    # Under a strategy of N replicas a Keras loss comes out divided by N, so
                    # that the gradients the optimizer all-reduces (sums) are the mean.
                    predictions = model(inputs, training=True)
                    with tf.name_scope(LOSS_SCOPE):  # the `loss` layer, as Keras' compile_loss
                        loss = loss_fn(targets, predictions)
            with phases.phase("backward"):
                gradients = tape.gradient(loss, model.trainable_variables)
            with phases.phase("optimizer"):
                optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            return loss

        if strategy is not None:
            replica_step = train_step

            def train_step(inputs, targets):
                per_replica = strategy.run(replica_step, args=(inputs, targets))
                # This rank's own batch loss, whole again; no collective for the figure.
                return strategy.experimental_local_results(per_replica)[0] * world

        # Each trace of the step function (its input signature, the step), for compile.json.
        trace_log = TraceLog() if settings.tf_mode != "eager" else None
        if trace_log is not None:
            train_step = trace_log.watch(tf.function(trace_log.wrap(train_step),
                                                     jit_compile=settings.tf_mode == "xla"))
        epoch, iterator, epochs_of_steps = 0, iter(batches), []
        try:
            for step in range(steps):
                session.begin_step(step)
                timer.begin_step()
                with phases.phase("data_load"):
                    batch = next(iterator, None)
                    if batch is None:
                        epoch, iterator = epoch + 1, iter(batches)
                        batch = next(iterator)
                if trace_log is not None:
                    trace_log.step = step
                with peer_failures() if strategy is not None else nullcontext():
                    loss = train_step(*batch)
                timer.end_step(loss)
                session.end_step(step)
                epochs_of_steps.append(epoch if strategy is None else step // updates_per_epoch)
            session.finish()
        finally:
            session.stop()
            if trace_log is not None:
                trace_log.write(run_dir, jit_compile=settings.tf_mode == "xla")

    # A compiled step is one call: its phases are in the trace, not in host timers.
    timed = ("data_load", "forward", "backward", "optimizer") if settings.tf_mode == "eager" else ("data_load",)
    rows = timer.rows(timed_phases=timed)
    for row, epoch in zip(rows, epochs_of_steps):
        row["epoch"] = epoch
    mark_rows(rows, settings.warmup_steps, session.traced_steps(steps))
    facts = {"device": tf_device_name(gpu=device != "/CPU:0"),
             "parameters": keras_parameters(model), "steps_per_epoch": updates_per_epoch,
             "steps_run": steps, "trace_window": session.recorded_window(steps),
             "rss_after_import_mb": after_import}
    if strategy is not None:
        facts.update(distributed_facts(model.weights, spec.batch_size, world, rank, settings.trace))
    return rows, facts
