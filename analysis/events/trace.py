"""The neutral event model that every reader produces and every analyzer consumes."""
from __future__ import annotations

# The event types are the model's too: readers and analyzers import them from here.
from gapscope.analysis.events.columns import EventColumns
from gapscope.analysis.events.event import (ANNOTATION, HOST_OP, KERNEL, MEMCPY, MEMSET, OTHER,  # noqa: F401
                                   RUNTIME, STEP, Event, EventKind)


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
            self._columns = EventColumns.of_events(self._events)
        return self._columns
