"""tf.distribute MultiWorkerMirroredStrategy for the keras and tf runners: the strategy over the
TF_CONFIG cluster (workloads.runners.tf_cluster), CPU-safe collectives with a timeout, each rank's
disjoint shard of the data, and which rank traces (the chief only, see traces_rank)."""
from __future__ import annotations

import os
from contextlib import contextmanager

from gapscope.profilers.errors import GapscopeInputError
from gapscope.workloads.shards import shard
from gapscope.workloads.runners.tf_cluster import cluster_place, port_in_use_message

BACKEND = "tf-collective"
LAUNCHER = "tf.distribute"
# A collective that waits longer than this on a peer (dead, or stuck) fails the rank instead of
# hanging the job. Long enough for a peer that is still tracing its first step on a loaded machine.
COLLECTIVE_TIMEOUT_S = 60.0
TIMEOUT_ENV = "GAPSCOPE_COLLECTIVE_TIMEOUT_S"


def world_size(settings) -> int:
    """The run's process count: its settings' (nproc; nnodes > 1 is torch's only), else
    WORLD_SIZE from the environment the launcher set, else 1."""
    nproc = getattr(settings, "nproc", None)
    if nproc is None:
        nproc = int(os.environ.get("WORLD_SIZE", "1") or 1)
    return int(nproc)


def check_cluster(world: int) -> int:
    """This worker's rank, after checking TF_CONFIG describes `world` workers."""
    place = cluster_place()
    if place is None:
        raise GapscopeInputError(f"--nproc {world} needs a TF_CONFIG naming {world} workers: "
                                 "start keras/tf runs with `gapscope run ... --nproc N`")
    rank, size = place
    if size != world:
        raise GapscopeInputError(f"--nproc {world}, but TF_CONFIG names {size} workers")
    return rank


def collective_timeout() -> float:
    value = os.environ.get(TIMEOUT_ENV)
    return float(value) if value else COLLECTIVE_TIMEOUT_S


def make_strategy():
    """MultiWorkerMirroredStrategy over TF_CONFIG with RING collectives (gRPC; NCCL needs GPUs)
    and a timeout on every collective, so a dead peer becomes an error instead of a hang.
    A port already in use is refused in one line."""
    import tensorflow as tf
    share_cores(tf)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING,
        timeout_seconds=collective_timeout())
    try:
        with python_sigterm_kept():
            return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    except (tf.errors.UnknownError, tf.errors.UnavailableError, RuntimeError) as exc:
        text = str(exc)
        # TF says only "Could not start gRPC server" (its log has "Failed to add port").
        if any(words in text.lower() for words in ("could not start grpc server", "address already in use")):
            raise GapscopeInputError(port_in_use_message()) from None
        raise


@contextmanager
def python_sigterm_kept():
    """Puts Python's SIGTERM handler back after the block. The strategy's coordination service
    starts TensorFlow's preemption notifier, which takes SIGTERM over at C level (it only sets a
    flag): a worker then ignored the launcher's SIGTERM, recorded nothing and was SIGKILLed 30 s
    later, its run left `running` and blamed for its peer's failure."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if handler is not None:  # None: set outside Python; nothing of ours to put back
            signal.signal(signal.SIGTERM, handler)


def intra_op_threads(world: int) -> int | None:
    """Each local worker's share of the host's cores for TF's intra-op pool (as torchrun sets
    OMP_NUM_THREADS=1 for several ranks): N workers each using every core would measure their
    contention for cores, not the distributed run. None where the user set TF's own variable."""
    if os.environ.get("TF_NUM_INTRAOP_THREADS"):
        return None
    return max(1, (os.cpu_count() or 1) // max(1, world))


def share_cores(tf) -> None:
    place = cluster_place()
    threads = intra_op_threads(place[1]) if place else None
    if threads is not None:
        tf.config.threading.set_intra_op_parallelism_threads(threads)


def rank_data(spec, settings, rank: int, world: int):
    """(x, y, updates per epoch) of this rank: its disjoint shard `rank::world` of the data a
    one-process run with the global batch (batch * world) would take, cut to full global batches
    so that every rank runs as many steps."""
    from gapscope.workloads.datasets import dataset_for
    x, y = dataset_for(spec.sized(spec.batch_size * world), settings)
    updates_per_epoch = len(x) // (spec.batch_size * world)
    if updates_per_epoch < 1:
        raise GapscopeInputError(f"{len(x)} samples make no full step of {spec.batch_size} per rank "
                                 f"on {world} ranks: use a smaller --batch-size")
    x, y = shard(x, y, rank, world, updates_per_epoch * spec.batch_size)
    return x, y, updates_per_epoch


def sharded_dataset(x, y, batch_size: int, world: int, seed: int, shuffle: bool = True):
    """An endless tf.data pipeline of this rank's shard, batched at the GLOBAL batch (batch * world):
    MWMS splits each global batch into per-replica batches of `batch_size`, and with
    auto-sharding OFF each worker takes consecutive per-replica batches of its own shard,
    i.e. `batch_size` of its own samples per step. (AUTO would shard the already-disjoint
    shard again, by DATA, leaving each rank a 1/world of it.)"""
    import tensorflow as tf
    data = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:
        data = data.shuffle(len(x), seed=seed)
    # Repeated before batching: every global batch is whole, and an epoch's end falls between
    # two per-replica batches (the shard is a whole number of them).
    data = data.repeat().batch(batch_size * world).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return data.with_options(options)


class PeerLost(RuntimeError):
    """A collective of this worker failed because a peer crashed, hung or closed its socket."""


@contextmanager
def peer_failures():
    """Turns TensorFlow's page-long error of an aborted collective into one line that names
    the cause (a peer's heartbeat stopped, its connection reset, the collective timed out)."""
    import tensorflow as tf
    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError,
            tf.errors.CancelledError, tf.errors.AbortedError) as exc:
        text = exc.message or str(exc)
        cause = text.partition("Collective ops is aborted by:")[2].strip() or text.strip()
        cause = " ".join(line.strip() for line in cause.splitlines()[:3]
                         if line.strip() and not line.startswith("The error could be"))
        # "remote worker": the job takes this for a secondary error (profilers.job_dir).
        raise PeerLost(f"a remote worker was lost: a collective failed ({type(exc).__name__}): "
                       f"{cause[:400]}") from None


def build_from_local_batch(model) -> None:
    """Keras 3 (3.15 too) builds a model under a multi-worker strategy by all-reducing the
    first distributed batch with `strategy.reduce(MEAN, (x, y))`, which fails on the tuple
    ("Attempt to convert a value (PerReplica ...) to a Tensor", keras-team/keras#20585). The
    build only needs shapes: this model builds from this worker's own first batch instead."""
    import types

    import tensorflow as tf
    from keras import tree

    def local_build(self, iterator=None, data_batch=None):
        strategy = self.distribute_strategy
        if iterator is not None:
            for _, _, batches in iterator:
                data_batch = next(batches)
                break

        def local(value):
            if isinstance(value, tf.distribute.DistributedValues):
                return strategy.experimental_local_results(value)[0]
            return value
        with strategy.scope():
            self._symbolic_build(data_batch=tree.map_structure(local, data_batch))

    model._maybe_symbolic_build = types.MethodType(local_build, model)


def distributed_facts(weights, batch_size: int, world: int, rank: int, trace: bool) -> dict:
    """What the rank's manifest records of the distributed run, with a digest of its final
    weights (mirrored training leaves every rank with the same bytes) and the ranks that
    traced (`traced_ranks`: the chief's only, see traces_rank; none with --no-trace)."""
    import hashlib
    digest = hashlib.sha256()
    for weight in weights:
        digest.update(weight.numpy().tobytes())
    return {"global_batch_size": batch_size * world, "shard": f"{rank}::{world}",
            "collective": "RING", "collective_timeout_s": collective_timeout(),
            "intra_op_threads": intra_op_threads(world),
            "traced_ranks": [r for r in range(world) if trace and traces_rank(r)],
            "weights_sha256": digest.hexdigest()}


# The one rank of a multi-worker run that records a TF profile: the chief.
TRACED_RANK = 0


def traces_rank(rank: int) -> bool:
    """Whether this rank of a multi-worker run records a TF profile: the chief (rank 0) only;
    the others time their steps. TensorFlow 2.21 under MultiWorkerMirroredStrategy crashes a
    non-chief worker while its profiler collects the host trace (TraceMeRecorder::Consume frees
    a pointer that is not one while merging split events: SIGABRT "free(): invalid pointer" or
    SIGSEGV), however the collection is started; counted on this 2-core VM, two-worker mlp runs:
    profiler stopped after fit 3 of 10, inside fit 1 of 10, and through TensorFlow's profiler
    server with a client capture (TensorBoard's way, which collects inside the worker all the
    same) 6 of 13, each time rank 1; the chief tracing alone, 0 of 25, and 0 of 25 gapscope jobs
    (benchmarks/README.md, `python -m benchmarks.tf_profiler_crash`)."""
    return rank == TRACED_RANK


def tf_share(strategy, size: int = 512):
    """`share(value)`: rank 0's string on every worker, by one all-reduce (SUM) of its UTF-8
    bytes over `strategy` (the other ranks add zeros). Every worker must call it, in the same
    order, as any collective; for agreeing on a job directory's name (gapscope.user_run)."""
    def share(value: str | None) -> str:
        import numpy as np
        import tensorflow as tf
        data = np.zeros(size, np.int32)
        if value is not None:
            raw = value.encode()
            if len(raw) > size:
                raise ValueError(f"{len(raw)} bytes to share, at most {size}")
            data[:len(raw)] = np.frombuffer(raw, np.uint8)
        local = tf.constant(data)
        summed = strategy.reduce(tf.distribute.ReduceOp.SUM,
                                 strategy.run(lambda: tf.identity(local)), axis=None)
        return bytes(np.asarray(summed.numpy(), np.uint8)).rstrip(b"\0").decode()
    return share
