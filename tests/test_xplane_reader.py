"""XPlane reading: a hand-built XSpace with round timestamps, and a real Keras profile."""
import pytest

from gapscope.analysis.results.breakdown import breakdown_from_trace
from gapscope.analysis.readers.xplane import read_xplane
from gapscope.analysis.events.trace import HOST_OP, KERNEL, MEMCPY, MEMSET, STEP
from gapscope.profilers.errors import TraceFormatError
from xspace_builder import PlaneBuilder, new_space
from conftest import tf_profile



def _hand_made_space():
    """Host plane: a python line with two `train` steps (step_num, _r=1), one compute thread
    with TF ops, and a tf.data thread whose prefetch work must not count."""
    space = new_space()
    host = PlaneBuilder(space, 1, "/host:CPU")
    python = host.line(10, "python", timestamp_ns=1_000)
    for step, start in ((4, 0), (5, 100)):
        host.event(python, "train", start, 100, step_num=step, _r=1)
    compute = host.line(11, "tf_Compute/11", timestamp_ns=1_000)
    for name, start, dur in (("IteratorGetNextOp::DoCompute", 0, 10),
                             ("StatefulPartitionedCall/gapscope_forward/dense/MatMul:MatMul", 10, 40),
                             ("StatefulPartitionedCall/gradient_tape/gapscope_forward/dense/MatMul/MatMul:MatMul", 50, 30),
                             ("StatefulPartitionedCall/gapscope_optimizer/rm_sprop/Mul:Mul", 80, 10),
                             ("ExecutorState::Process", 0, 95),
                             ("StatefulPartitionedCall/gapscope_forward/dense/MatMul:MatMul", 110, 20)):
        host.event(compute, name, start, dur)
    data = host.line(12, "tf_data_iterator_resource/12", timestamp_ns=1_000)
    host.event(data, "GatherV2:GatherV2", 0, 200)
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
    xplane = tf_profile(keras_run)
    result = breakdown_from_trace(read_xplane(xplane))
    result.self_check()
    assert len(result.steps) == 8  # SMALL_RUN trace_steps
    means = result.phase_means()
    assert means["forward"] > 0 and means["backward"] > 0 and means["optimizer"] > 0
    assert result.phase_sources["backward"] == "gapscope marks"


def test_device_events_are_copies_by_their_line_and_details_not_their_name(tmp_path):
    """A JAX trace's device copies sit on `Stream #n(MemcpyOther)` lines named CopyDeviceToDevice;
    a copy with memcpy_details is one whatever its line; a kernel line's events are kernels."""
    space = new_space()
    host = PlaneBuilder(space, 1, "/host:CPU")
    host.event(host.line(1, "python"), "train", 0, 100, step_num=1, _r=1)
    gpu = PlaneBuilder(space, 2, "/device:GPU:0")
    kernels, other = gpu.line(1, "Stream #7(Kernel)"), gpu.line(2, "Stream #9(MemcpyOther)")
    plain = gpu.line(3, "Stream #11")
    gpu.event(kernels, "fusion_memcpy_like", 0, 10)            # a kernel, though its name says memcpy
    gpu.event(other, "CopyDeviceToDevice", 10, 4)
    gpu.event(other, "CopyDeviceToDevice", 20, 6)
    gpu.event(plain, "copy_start", 30, 2, memcpy_details="size:4096 dest:1 async:1")
    gpu.event(plain, "Memset", 40, 1)                           # nothing but the name says
    gpu.event(plain, "loop_fusion", 50, 3)
    path = tmp_path / "jax.xplane.pb"
    path.write_bytes(space.SerializeToString())
    device = [(e.name, e.kind) for e in read_xplane(path).events if e.track.startswith("device")]
    assert device == [("fusion_memcpy_like", KERNEL), ("CopyDeviceToDevice", MEMCPY),
                      ("CopyDeviceToDevice", MEMCPY), ("copy_start", MEMCPY), ("Memset", MEMSET),
                      ("loop_fusion", KERNEL)]
