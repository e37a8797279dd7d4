"""TF's XSpace protobuf schema, loaded without importing TensorFlow, and a builder of its planes."""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from gapscope.profilers.errors import GapscopeInputError


@functools.lru_cache(maxsize=1)
def xplane_pb2():
    """Load TF's generated xplane_pb2 module by file path: importing the tensorflow package
    would cost seconds and gigabytes just to read or write a file. Without TensorFlow (a GPU
    machine with torch only) the same schema is built from gapscope's copy of it."""
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or spec.origin is None:
        return _own_schema()
    module_path = Path(spec.origin).parent / "tsl" / "profiler" / "protobuf" / "xplane_pb2.py"
    module_spec = importlib.util.spec_from_file_location("gapscope_xplane_pb2", module_path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _own_schema():
    """The XSpace message classes from analysis.readers.xplane_schema, in a descriptor pool of their own
    (never clashing with TensorFlow's, should it be imported later)."""
    import types

    try:
        from google.protobuf import descriptor_pool
        from google.protobuf.internal import builder
    except ImportError:
        raise GapscopeInputError(".xplane.pb files need the protobuf package (or tensorflow)") from None
    from gapscope.analysis.readers.xplane_schema import SERIALIZED
    module = types.ModuleType("gapscope_xplane_pb2")
    descriptor = descriptor_pool.DescriptorPool().AddSerializedFile(SERIALIZED)
    builder.BuildMessageAndEnumDescriptors(descriptor, module.__dict__)
    builder.BuildTopDescriptorsAndMessages(descriptor, "gapscope_xplane_pb2", module.__dict__)
    return module


class PlaneBuilder:
    """An XPlane whose event and stat metadata get an id on first use of a name. Ids start at 1
    (and continue after those the plane holds): the profiler's tools read id 0 as none."""

    def __init__(self, plane):
        self.plane = plane
        self._events = {m.name: k for k, m in plane.event_metadata.items()}
        self._stats = {m.name: k for k, m in plane.stat_metadata.items()}
        self._next_event = max(self._events.values(), default=0) + 1
        self._next_stat = max(self._stats.values(), default=0) + 1

    def event_meta(self, name: str) -> int:
        key = self._events.get(name)
        if key is None:
            key = self._events[name] = self._next_event
            self._next_event += 1
            self.plane.event_metadata[key].id = key
            self.plane.event_metadata[key].name = name
        return key

    def stat(self, name: str) -> int:
        key = self._stats.get(name)
        if key is None:
            key = self._stats[name] = self._next_stat
            self._next_stat += 1
            self.plane.stat_metadata[key].id = key
            self.plane.stat_metadata[key].name = name
        return key
