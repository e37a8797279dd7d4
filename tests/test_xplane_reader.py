"""XPlane reading: a hand-built XSpace with round timestamps, and a real Keras profile."""
import pytest

from analysis.breakdown import breakdown_from_trace
from analysis.readers.xplane import _xplane_pb2, read_xplane
from analysis.trace import HOST_OP, STEP
from profilers.errors import TraceFormatError

US = 1_000_000  # picoseconds per microsecond


def _hand_made_space():
    """Host plane: a python line with two `train` steps (step_num, _r=1), one compute thread
    with TF ops, and a tf.data thread whose prefetch work must not count."""
    pb = _xplane_pb2()
    space = pb.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    names = {}

    def event_meta(name):
        if name not in names:
            names[name] = len(names) + 1
            plane.event_metadata[names[name]].id = names[name]
            plane.event_metadata[names[name]].name = name
        return names[name]

    for stat_id, stat_name in ((1, "step_num"), (2, "_r")):
        plane.stat_metadata[stat_id].id = stat_id
        plane.stat_metadata[stat_id].name = stat_name
    python = plane.lines.add(id=10, name="python", timestamp_ns=1_000)
    for step, start in ((4, 0), (5, 100)):
        event = python.events.add(metadata_id=event_meta("train"), offset_ps=start * US, duration_ps=100 * US)
        event.stats.add(metadata_id=1, int64_value=step)
        event.stats.add(metadata_id=2, int64_value=1)
    compute = plane.lines.add(id=11, name="tf_Compute/11", timestamp_ns=1_000)
    for name, start, dur in (("IteratorGetNextOp::DoCompute", 0, 10),
                             ("StatefulPartitionedCall/gapscope_forward/dense/MatMul:MatMul", 10, 40),
                             ("StatefulPartitionedCall/gradient_tape/gapscope_forward/dense/MatMul/MatMul:MatMul", 50, 30),
                             ("StatefulPartitionedCall/gapscope_optimizer/rm_sprop/Mul:Mul", 80, 10),
                             ("ExecutorState::Process", 0, 95),
                             ("StatefulPartitionedCall/gapscope_forward/dense/MatMul:MatMul", 110, 20)):
        compute.events.add(metadata_id=event_meta(name), offset_ps=start * US, duration_ps=dur * US)
    data = plane.lines.add(id=12, name="tf_data_iterator_resource/12", timestamp_ns=1_000)
    data.events.add(metadata_id=event_meta("GatherV2:GatherV2"), offset_ps=0, duration_ps=200 * US)
    return space


@pytest.fixture
def hand_made_xplane(tmp_path):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(_hand_made_space().SerializeToString())
    return path


def test_hand_made_xplane_events_and_breakdown(hand_made_xplane):
    trace = read_xplane(hand_made_xplane)
    steps = [e for e in trace.events if e.kind == STEP]
    assert [(s.step_num, s.start_us, s.dur_us) for s in steps] == [(4, 0.0, 100.0), (5, 100.0, 100.0)]
    ops = [e.name for e in trace.events if e.kind == HOST_OP]
    assert "GatherV2:GatherV2" not in ops  # tf.data prefetch thread: overlapped, not step time
    assert len(ops) == 5
    result = breakdown_from_trace(trace)
    result.self_check()
    assert result.steps[0].phase_ms == pytest.approx(
        {"data_load": 0.010, "forward": 0.040, "backward": 0.030, "optimizer": 0.010, "other": 0.010})
    assert result.steps[1].phase_ms == pytest.approx(
        {"data_load": 0.0, "forward": 0.020, "backward": 0.0, "optimizer": 0.0, "other": 0.080})


def test_corrupt_xplane_is_a_format_error(tmp_path):
    path = tmp_path / "broken.xplane.pb"
    path.write_bytes(b"\xff\xff\xff not a protobuf")
    with pytest.raises(TraceFormatError, match="not an XSpace profile|holds no events"):
        read_xplane(path)


def test_real_keras_profile_has_steps_and_marked_phases(keras_run):
    (xplane,) = keras_run.glob("plugins/profile/*/*.xplane.pb")
    result = breakdown_from_trace(read_xplane(xplane))
    result.self_check()
    assert len(result.steps) == 8  # SMALL_RUN trace_steps
    means = result.phase_means()
    assert means["forward"] > 0 and means["backward"] > 0 and means["optimizer"] > 0
    assert result.phase_sources["backward"] == "gapscope marks"
