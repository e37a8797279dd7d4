"""The neutral event model that every reader produces and every analyzer consumes."""
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


class Trace:
    """All events of one trace file plus what the file says about where it came from.

    A reader gives the events as objects or, for a large torch trace, as columns (a few bytes
    per event, see analysis.events.columns); each form is built from the other on first use, so the
    breakdown of a 1 GB trace never makes millions of objects."""

    def __init__(self, source_format: str, path: str, events: list[Event] | None = None,
                 metadata: dict | None = None, columns=None):
        if events is None and columns is None:
            raise ValueError("a Trace needs its events or their columns")
        self.source_format = source_format  # "torch" (Chrome-trace JSON of torch.profiler) or "xplane"
        self.path = path
        self.metadata = {} if metadata is None else metadata
        self._events = events
        self._columns = columns

    @property
    def events(self) -> list[Event]:
        if self._events is None:
            self._events = self._columns.events()
        return self._events

    @property
    def columns(self):
        if self._columns is None:
            from analysis.events.columns import EventColumns
            self._columns = EventColumns.of_events(self._events)
        return self._columns
