"""Builds tiny XSpace profiles by hand for reader tests, with TF's own protobuf schema."""
from __future__ import annotations

from gapscope.analysis.readers import xplane_proto

US = 1_000_000  # picoseconds per microsecond


class PlaneBuilder(xplane_proto.PlaneBuilder):
    """A new plane of `space`, with lines and events at round microseconds."""

    def __init__(self, space, plane_id: int, name: str):
        super().__init__(space.planes.add(id=plane_id, name=name))

    @classmethod
    def around(cls, plane) -> "PlaneBuilder":
        """A builder over a plane that already holds metadata: it keeps the existing ids."""
        builder = cls.__new__(cls)
        xplane_proto.PlaneBuilder.__init__(builder, plane)
        return builder

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
    return xplane_proto.xplane_pb2().XSpace()
