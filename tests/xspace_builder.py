"""Builds tiny XSpace profiles by hand for reader tests, with TF's own protobuf schema."""
from __future__ import annotations

from analysis.readers.xplane import _xplane_pb2

US = 1_000_000  # picoseconds per microsecond


class PlaneBuilder:
    """One plane whose event and stat metadata are created on first use of a name."""

    def __init__(self, space, plane_id: int, name: str):
        self.plane = space.planes.add(id=plane_id, name=name)
        self._events: dict[str, int] = {}
        self._stats: dict[str, int] = {}

    @classmethod
    def around(cls, plane) -> "PlaneBuilder":
        """A builder over a plane that already holds metadata: it keeps the existing ids."""
        builder = cls.__new__(cls)
        builder.plane = plane
        builder._events = {m.name: k for k, m in plane.event_metadata.items()}
        builder._stats = {m.name: k for k, m in plane.stat_metadata.items()}
        return builder

    def stat(self, name: str) -> int:
        if name not in self._stats:
            key = self._stats[name] = max(self._stats.values(), default=0) + 1
            self.plane.stat_metadata[key].id = key
            self.plane.stat_metadata[key].name = name
        return self._stats[name]

    def event_meta(self, name: str) -> int:
        if name not in self._events:
            key = self._events[name] = max(self._events.values(), default=0) + 1
            self.plane.event_metadata[key].id = key
            self.plane.event_metadata[key].name = name
        return self._events[name]

    def line(self, line_id: int, name: str, timestamp_ns: int = 0):
        return self.plane.lines.add(id=line_id, name=name, timestamp_ns=timestamp_ns)

    def event(self, line, name: str, start_us: float, dur_us: float, **stats):
        """An event on `line` at round microseconds; int stats as int64, others as strings."""
        event = line.events.add(metadata_id=self.event_meta(name), offset_ps=int(start_us * US),
                                duration_ps=int(dur_us * US))
        for stat, value in stats.items():
            if isinstance(value, int):
                event.stats.add(metadata_id=self.stat(stat), int64_value=value)
            else:
                event.stats.add(metadata_id=self.stat(stat), str_value=value)
        return event


def new_space():
    return _xplane_pb2().XSpace()
