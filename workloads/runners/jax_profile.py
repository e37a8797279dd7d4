"""jax.profiler over a keras-jax run's trace window: an XSpace with each jitted program's HloProto."""
from __future__ import annotations

from pathlib import Path

from gapscope.profilers.written_traces import checked_writes


class JaxProfile:
    """What the Keras step callback starts at the window's first step and stops after its last;
    `step(n)` is the StepTraceAnnotation around one step, the reader's step event."""

    def __init__(self, logdir: Path):
        self.logdir = Path(logdir)

    def start(self) -> None:
        """Without JAX's Python tracer: it times every Python call of Keras' loop (71,000 events
        in two steps of a 2-layer model), which no view reads and every step pays for."""
        import jax
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0
        jax.profiler.start_trace(str(self.logdir), profiler_options=options)

    @staticmethod
    def step(number: int):
        import jax
        return jax.profiler.StepTraceAnnotation("train", step_num=number)

    def stop(self) -> None:
        """`jax.profiler.stop_trace()`, which writes the XSpace, then the check that it is whole."""
        import jax
        checked_writes(jax.profiler.stop_trace, self.logdir, "*.xplane.pb", _whole_xspace)


def _whole_xspace(path: Path) -> bool:
    """written_traces.whole_xspace without TensorFlow (a keras-jax run has none loaded)."""
    from gapscope.analysis.readers.xplane_proto import xplane_pb2
    space = xplane_pb2().XSpace()
    try:
        space.ParseFromString(path.read_bytes())
    except Exception:  # protobuf's DecodeError type differs per backend
        return False
    return len(space.planes) > 0
