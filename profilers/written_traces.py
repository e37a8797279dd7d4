"""Checks that a profiler wrote its trace whole: both profilers write from C++ and ignore a failed write."""
from __future__ import annotations

import errno
import gzip
from pathlib import Path
from typing import Callable

_TRUNCATED = "the profiler wrote a truncated trace (is the disk full?)"


def checked_writes(write: Callable[[], None], folder: Path, pattern: str,
                   whole: Callable[[Path], bool]) -> None:
    """Calls `write`, then refuses, as a failed write (EIO), any new `pattern` file under `folder`
    that is not `whole`: a full disk leaves a cut trace behind a run that would say `complete`."""
    before = set(folder.rglob(pattern))
    write()
    for path in sorted(set(folder.rglob(pattern)) - before):
        if not whole(path):
            raise OSError(errno.EIO, _TRUNCATED, str(path))


def whole_json(path: Path, chunk: int = 1 << 20) -> bool:
    """Whether a (gzipped) torch trace ends as a JSON object does: its last non-blank byte is `}`."""
    last = b""
    try:
        with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as handle:
            while block := handle.read(chunk):
                last = (last + block)[-64:]
    except (OSError, EOFError):  # a gzip stream cut short
        return False
    return last.rstrip().endswith(b"}")


def whole_xspace(path: Path) -> bool:
    """Whether a TF profile parses as an XSpace with planes (a cut one mostly fails to parse; one
    cut between planes parses short, and only then says nothing: the reader checks the steps)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # the run process has TF loaded
    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(path.read_bytes())
    except Exception:  # protobuf's DecodeError type differs per backend
        return False
    return len(space.planes) > 0


# Present in a run directory while its TF profiler stops: a process that dies meanwhile leaves it.
TF_PROFILER_STOPPING = ".tf-profiler-stopping"
TF_PROFILER_ABORT = ("TensorFlow crashed the process while its profiler stopped (a memory fault "
                     "in its host tracer, as TF 2.21 does to non-chief MultiWorkerMirroredStrategy "
                     "workers, which gapscope therefore does not trace); run again, or "
                     "--no-trace for step timers only")


def died_stopping_tf_profiler(run_dir: Path) -> bool:
    """Whether the run's process died inside stop_tf_profiler (a C++ abort no Python sees)."""
    return (Path(run_dir) / TF_PROFILER_STOPPING).exists()


def stop_tf_profiler(profiler, logdir: Path) -> None:
    """`tf.profiler.experimental.stop()`, which writes the XSpace, then the check that it is whole."""
    import tensorflow as tf

    def stop() -> None:
        try:
            profiler.stop()
        except tf.errors.OpError as exc:
            # A full file is TF's OutOfRangeError, which Keras's fit takes for the end of the
            # data: it stopped training quietly and the run said `complete` over a cut trace.
            raise OSError(errno.EIO, f"{_TRUNCATED}: {exc.message}") from None
    marker = Path(logdir) / TF_PROFILER_STOPPING
    marker.touch()
    try:
        checked_writes(stop, Path(logdir), "*.xplane.pb", whole_xspace)
    finally:  # an error or a signal is recorded by the run itself; only a crash leaves the marker
        marker.unlink()
