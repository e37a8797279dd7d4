"""One event of a trace, independent of the framework that wrote it: its kind and its times."""
from __future__ import annotations

import enum

import msgspec


class EventKind(enum.StrEnum):
    """What an event is, independent of the framework that wrote the trace."""

    STEP = "step"              # one training step (ProfilerStep#N, gapscope/step#N, TF "train" trace)
    ANNOTATION = "annotation"  # a user or framework range (record_function, NVTX, TF TraceMe)
    HOST_OP = "host_op"        # an operator executed on the host (aten op, TF op, XLA thunk)
    KERNEL = "kernel"          # device kernel
    MEMCPY = "memcpy"
    MEMSET = "memset"
    RUNTIME = "runtime"        # CUDA runtime / driver call on the host
    OTHER = "other"


# Short names for the readers and analyzers that match on kinds.
STEP, ANNOTATION, HOST_OP, KERNEL, MEMCPY, MEMSET, RUNTIME, OTHER = EventKind


class Event(msgspec.Struct, gc=False):
    """One complete duration event; times in microseconds on the trace's own clock."""

    name: str
    kind: str
    start_us: float
    dur_us: float
    track: str  # "host/<pid>/<tid>" or "device/<id>/<stream>": events on a track are serial
    step_num: int | None = None
    correlation: int | None = None
    # Optional facts some readers keep; None where the format has no such field.
    nbytes: int | None = None       # bytes moved by a memcpy/memset
    hlo_op: str | None = None       # XLA: the HLO instruction an executed thunk runs
    hlo_module: str | None = None   # XLA: the HLO module (compiled program) it belongs to
    # Other reader-kept stats by name, e.g. tf.function's tf_function_call / tracing_count.
    stats: dict | None = None

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us
