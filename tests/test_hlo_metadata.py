"""HLO ops to phases: a hand-written XLA text dump, the same module as an HloProto inside a
hand-built XSpace, and what the breakdown and the kernel view make of its thunks.

The module `tiny_step.1`: MatMul.1 (forward dot), select_fusion (forward's relu mask fused
into backward's ReluGrad: mixed), copy.1 (no metadata: unattributed), subtract_fusion
(optimizer). Two `train` steps of 100 µs run the four thunks at 10-40, 40-50, 50-55, 60-70."""
import pytest

from gapscope.analysis.results.breakdown import breakdown_from_trace
from gapscope.analysis.results.explain import explain_run
from gapscope.analysis.events.hlo_metadata import MIXED, UNATTRIBUTED
from gapscope.analysis.measures.kernels import XLA_THUNKS, find_work, kernel_stats
from gapscope.analysis.readers.hlo_proto import read_hlo_protos
from gapscope.analysis.readers.hlo_text import read_hlo_dump_dir
from gapscope.analysis.readers.xplane import read_xplane
from gapscope.analysis.model.run import load_run
from gapscope.analysis.events.timeline import phase_timeline
from xspace_builder import PlaneBuilder, new_space

MODULE = "tiny_step.1"
EXPECTED = {"MatMul.1": ("dot", "forward"), "select_fusion": ("fusion", MIXED),
            "copy.1": ("copy", UNATTRIBUTED), "subtract_fusion": ("fusion", "optimizer")}
THUNKS = (("MatMul.1", 10, 30), ("select_fusion", 40, 10), ("copy.1", 50, 5), ("subtract_fusion", 60, 10))


# --- a minimal protobuf writer: just enough to build the HloProto XLA stores in a profile ---
def _varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number, value):
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _instruction(name, opcode, op_name="", op_type="", called=()):
    meta = (_field(1, op_type) if op_type else b"") + (_field(2, op_name) if op_name else b"")
    packed = b"".join(_varint(i) for i in called)
    return (_field(1, name) + _field(2, opcode) + (_field(7, meta) if meta else b"")
            + (_field(38, packed) if called else b""))


def _computation(name, cid, instructions):
    return _field(1, name) + b"".join(_field(2, i) for i in instructions) + _field(5, cid)


def tiny_hlo_proto() -> bytes:
    relu, relu_grad = "gapscope_forward/dense/Relu", "gradient_tape/gapscope_forward/dense/ReluGrad"
    sub = "gapscope_optimizer/sgd/AssignSubVariableOp"
    fused = _computation("fused_computation", 1, [
        _instruction("param_0", "parameter"),
        _instruction("mask", "compare", relu, "Relu"),
        _instruction("grad", "select", relu_grad, "ReluGrad")])
    fused_1 = _computation("fused_computation.1", 2, [
        _instruction("param_0.1", "parameter"), _instruction("sub", "subtract", sub, "AssignSubVariableOp")])
    entry = _computation(MODULE, 3, [
        _instruction("arg0.1", "parameter", "XLA_Args"),
        _instruction("MatMul.1", "dot", "gapscope_forward/dense/MatMul", "MatMul"),
        _instruction("select_fusion", "fusion", relu_grad, "ReluGrad", called=[1]),
        _instruction("copy.1", "copy"),
        _instruction("subtract_fusion", "fusion", sub, "AssignSubVariableOp", called=[2])])
    module = _field(1, MODULE) + b"".join(_field(3, c) for c in (fused, fused_1, entry)) + _field(6, 3)
    return _field(1, module)


def tiny_xla_space(with_hlo_proto: bool = True, proto: bytes | None = None):
    space = new_space()
    host = PlaneBuilder(space, 1, "/host:CPU")
    python = host.line(10, "python")
    eigen = host.line(11, "tf_numa_-1_Eigen/11")
    for step, base in ((4, 0), (5, 100)):
        host.event(python, "train", base, 100, step_num=step, _r=1)
        for op, start, dur in THUNKS:
            host.event(eigen, op, base + start, dur, hlo_op=op, hlo_module=MODULE)
            host.event(eigen, f"end: {op}", base + start + dur, 0)
    if with_hlo_proto:
        metadata = space.planes.add(id=2, name="/host:metadata")
        metadata.stat_metadata[1].id = 1
        metadata.stat_metadata[1].name = "Hlo Proto"
        metadata.event_metadata[7].id = 7
        metadata.event_metadata[7].name = f"{MODULE}(7)"
        metadata.event_metadata[7].stats.add(metadata_id=1, bytes_value=proto or tiny_hlo_proto())
    return space


def test_text_dump_maps_ops_to_phases(fixtures_dir):
    modules = read_hlo_dump_dir(fixtures_dir / "xla_dump")
    ops = modules.modules[MODULE]
    assert {name: (op.opcode, op.phase) for name, op in ops.items()} == EXPECTED
    assert ops["select_fusion"].phases == ("backward", "forward")
    assert ops["select_fusion"].framework_op == "gradient_tape/gapscope_forward/dense/ReluGrad:ReluGrad"
    assert ops["copy.1"].framework_op is None


def test_profile_proto_and_text_dump_agree(fixtures_dir):
    from_proto = read_hlo_protos({MODULE: tiny_hlo_proto()}).modules[MODULE]
    from_text = read_hlo_dump_dir(fixtures_dir / "xla_dump").modules[MODULE]
    assert {n: (o.opcode, o.phase, o.framework_op) for n, o in from_proto.items()} == \
           {n: (o.opcode, o.phase, o.framework_op) for n, o in from_text.items()}


def test_xla_thunks_get_phases_in_breakdown_and_kernel_view(tmp_path):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(tiny_xla_space().SerializeToString())
    trace = read_xplane(path)
    assert {e.hlo_op for e in trace.events if e.hlo_op} == set(EXPECTED)
    breakdown = breakdown_from_trace(trace)
    breakdown.self_check()
    # The breakdown names a fusion after its root op, as XProf does: select_fusion's root is
    # ReluGrad, so backward; copy.1 has no metadata: other (100 - 30 - 10 - 10).
    assert breakdown.steps[0].phase_ms == pytest.approx(
        {"data_load": 0.0, "forward": 0.030, "backward": 0.010, "optimizer": 0.010, "other": 0.050})

    hlo = read_hlo_protos(trace.metadata["hlo_protos"])
    work = find_work(trace, phase_timeline(trace), hlo)
    stats = kernel_stats(work)
    # The kernel view keeps the fusion that mixes phases apart, and says what it mixes.
    assert stats.source == XLA_THUNKS and stats.per_step == 4
    assert stats.per_phase == {"data_load": 0, "forward": 1, "backward": 0, "optimizer": 1, "other": 0,
                               MIXED: 1, UNATTRIBUTED: 1}
    assert stats.time_ms_per_phase[MIXED] == pytest.approx(0.010)
    assert stats.mixed_ops == [{"name": "select_fusion", "phases": ["backward", "forward"], "calls_per_step": 1.0}]
    assert stats.fused_share == 0.5 and stats.fused_time_share == pytest.approx(20 / 55)


def test_run_without_profile_hlo_falls_back_to_the_dump(tmp_path, fixtures_dir):
    import shutil
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "host.xplane.pb").write_bytes(tiny_xla_space(with_hlo_proto=False).SerializeToString())
    shutil.copytree(fixtures_dir / "xla_dump", tmp_path / "xla_dump")
    result = explain_run(tmp_path)
    assert result.kernels.per_phase["forward"] == 1 and result.kernels.per_phase[MIXED] == 1
    assert result.attribution.device_ms["optimizer"] == pytest.approx(0.010)


def test_xla_on_gpu_kernels_take_the_phase_of_their_hlo_op(tmp_path):
    """A GPU profile: one launch (cuLaunchKernel, correlation 5) inside the step, and device
    kernels that carry hlo_op: under XLA the HLO op, not the launch, says the phase."""
    space = tiny_xla_space()
    host = PlaneBuilder.around(space.planes[0])
    host.event(host.line(12, "CUPTI/12"), "cuLaunchKernel", 5, 2, correlation_id=5)
    gpu = PlaneBuilder(space, 3, "/device:GPU:0")
    stream = gpu.line(7, "Stream #7(Compute)")
    for op, start, dur in (("MatMul.1", 20, 10), ("select_fusion", 30, 4)):
        gpu.event(stream, f"kernel_{op}", start, dur, correlation_id=5, hlo_op=op, hlo_module=MODULE)
    path = tmp_path / "gpu.xplane.pb"
    path.write_bytes(space.SerializeToString())
    trace = read_xplane(path)
    work = find_work(trace, phase_timeline(trace), read_hlo_protos(trace.metadata["hlo_protos"]))
    assert sorted((w.name, w.phase, w.fused) for w in work.kernels()) == [
        ("kernel_MatMul.1", "forward", False), ("kernel_select_fusion", MIXED, True)]
    assert [w.launch.name for w in work.kernels()] == ["cuLaunchKernel"] * 2


def test_broken_hlo_inputs_say_what_is_wrong(tmp_path):
    from gapscope.profilers.errors import TraceFormatError
    from gapscope.analysis.readers.hlo_text import read_hlo_text
    bad = tmp_path / "module_0000.x.cpu_after_optimizations.txt"
    bad.write_text("not an HLO module\n")
    with pytest.raises(TraceFormatError, match="not an HLO text dump"):
        read_hlo_text(bad)
    with pytest.raises(TraceFormatError, match="corrupt"):
        read_hlo_protos({MODULE: b"\x0a\xff\xff"})
    # A profile whose HLO proto is broken still reads; its thunks just get no phase.
    space = tiny_xla_space()
    space.planes[1].event_metadata[7].stats[0].bytes_value = b"\x0a\xff\xff"
    path = tmp_path / "broken.xplane.pb"
    path.write_bytes(space.SerializeToString())
    trace = read_xplane(path)
    assert "corrupt" in trace.metadata["hlo_error"]
    assert breakdown_from_trace(trace).phase_sources["forward"] == "not identified"


def test_run_uses_the_hlo_modules_its_reader_parsed(tmp_path):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(tiny_xla_space().SerializeToString())
    run = load_run(path)
    assert run.hlo is run.trace.metadata["hlo_modules"]
    assert set(run.hlo.modules[MODULE]) == set(EXPECTED)


def test_xla_ops_find_their_keras_layer_through_the_hlo_metadata(tmp_path):
    """The same thunks, compiled from a Keras model's scopes: MatMul.1 from dense1's forward
    (30 µs a step), select_fusion from logits' backward alone (10 µs), subtract_fusion fuses a
    dense1 and a logits op (no one layer: outside layers, said), copy.1 has no metadata."""
    from gapscope.analysis.measures.layer_times import layer_times
    dense1_relu = "gapscope_forward/mlp_1/dense1/Relu"
    logits_grad = "gradient_tape/gapscope_forward/mlp_1/logits_1/MatMul/MatMul_1"
    grad_fused = _computation("fused_computation", 1, [
        _instruction("param_0", "parameter"),
        _instruction("grad", "select", logits_grad, "MatMul")])
    across = _computation("fused_computation.1", 2, [
        _instruction("param_0.1", "parameter"),
        _instruction("relu", "maximum", dense1_relu, "Relu"),
        _instruction("sub", "subtract", logits_grad, "MatMul")])
    entry = _computation(MODULE, 3, [
        _instruction("MatMul.1", "dot", "gapscope_forward/mlp_1/dense1/MatMul", "MatMul"),
        _instruction("select_fusion", "fusion", logits_grad, "MatMul", called=[1]),
        _instruction("copy.1", "copy"),
        _instruction("subtract_fusion", "fusion", logits_grad, "MatMul", called=[2])])
    module = _field(1, MODULE) + b"".join(_field(3, c) for c in (grad_fused, across, entry)) + _field(6, 3)
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(tiny_xla_space(proto=_field(1, module)).SerializeToString())
    trace = read_xplane(path)
    hlo = read_hlo_protos(trace.metadata["hlo_protos"])
    found = layer_times(trace, phase_timeline(trace), ["dense1", "logits", "loss"], hlo)
    assert found.layers["dense1"] == pytest.approx({"forward": 0.030, "backward": 0.0})
    assert found.layers["logits"] == pytest.approx({"forward": 0.0, "backward": 0.010})
    assert found.notes == ["1 XLA op(s) fuse ops of several layers (subtract_fusion): their "
                           "time is outside layers"]
