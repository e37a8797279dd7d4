"""HLO ops to phases: a hand-written XLA text dump, the same module as an HloProto inside a
hand-built XSpace, and what the breakdown and the kernel view make of its thunks.

The module `tiny_step.1`: MatMul.1 (forward dot), select_fusion (forward's relu mask fused
into backward's ReluGrad: mixed), copy.1 (no metadata: unattributed), subtract_fusion
(optimizer). Two `train` steps of 100 µs run the four thunks at 10-40, 40-50, 50-55, 60-70."""
import pytest

from analysis.breakdown import breakdown_from_trace
from analysis.explain import explain_run
from analysis.hlo_metadata import MIXED, UNATTRIBUTED
from analysis.kernels import XLA_THUNKS, find_work, kernel_stats
from analysis.readers.hlo_proto import read_hlo_protos
from analysis.readers.hlo_text import read_hlo_dump_dir
from analysis.readers.xplane import _xplane_pb2, read_xplane
from analysis.timeline import phase_timeline

US = 1_000_000  # picoseconds per microsecond
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


def tiny_xla_space(with_hlo_proto: bool = True):
    pb = _xplane_pb2()
    space = pb.XSpace()
    plane = space.planes.add(id=1, name="/host:CPU")
    stat_ids = {}
    for name in ("step_num", "_r", "hlo_op", "hlo_module"):
        stat_ids[name] = len(stat_ids) + 1
        plane.stat_metadata[stat_ids[name]].id = stat_ids[name]
        plane.stat_metadata[stat_ids[name]].name = name
    names = {}

    def meta(name):
        if name not in names:
            names[name] = len(names) + 1
            plane.event_metadata[names[name]].id = names[name]
            plane.event_metadata[names[name]].name = name
        return names[name]

    python = plane.lines.add(id=10, name="python", timestamp_ns=0)
    eigen = plane.lines.add(id=11, name="tf_numa_-1_Eigen/11", timestamp_ns=0)
    for step, base in ((4, 0), (5, 100)):
        event = python.events.add(metadata_id=meta("train"), offset_ps=base * US, duration_ps=100 * US)
        event.stats.add(metadata_id=stat_ids["step_num"], int64_value=step)
        event.stats.add(metadata_id=stat_ids["_r"], int64_value=1)
        for op, start, dur in THUNKS:
            thunk = eigen.events.add(metadata_id=meta(op), offset_ps=(base + start) * US, duration_ps=dur * US)
            thunk.stats.add(metadata_id=stat_ids["hlo_op"], str_value=op)
            thunk.stats.add(metadata_id=stat_ids["hlo_module"], str_value=MODULE)
            eigen.events.add(metadata_id=meta(f"end: {op}"), offset_ps=(base + start + dur) * US, duration_ps=0)
    if with_hlo_proto:
        metadata = space.planes.add(id=2, name="/host:metadata")
        metadata.stat_metadata[1].id = 1
        metadata.stat_metadata[1].name = "Hlo Proto"
        metadata.event_metadata[7].id = 7
        metadata.event_metadata[7].name = f"{MODULE}(7)"
        metadata.event_metadata[7].stats.add(metadata_id=1, bytes_value=tiny_hlo_proto())
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
    host = space.planes[0]
    cupti = host.lines.add(id=12, name="CUPTI/12", timestamp_ns=0)
    host.stat_metadata[9].id, host.stat_metadata[9].name = 9, "correlation_id"
    host.event_metadata[99].id, host.event_metadata[99].name = 99, "cuLaunchKernel"
    launch = cupti.events.add(metadata_id=99, offset_ps=5 * US, duration_ps=2 * US)
    launch.stats.add(metadata_id=9, int64_value=5)
    gpu = space.planes.add(id=3, name="/device:GPU:0")
    for sid, name in ((1, "correlation_id"), (2, "hlo_op"), (3, "hlo_module")):
        gpu.stat_metadata[sid].id, gpu.stat_metadata[sid].name = sid, name
    stream = gpu.lines.add(id=7, name="Stream #7(Compute)", timestamp_ns=0)
    for mid, (op, start, dur) in enumerate((("MatMul.1", 20, 10), ("select_fusion", 30, 4)), start=1):
        gpu.event_metadata[mid].id, gpu.event_metadata[mid].name = mid, f"kernel_{op}"
        kernel = stream.events.add(metadata_id=mid, offset_ps=start * US, duration_ps=dur * US)
        kernel.stats.add(metadata_id=1, int64_value=5)
        kernel.stats.add(metadata_id=2, str_value=op)
        kernel.stats.add(metadata_id=3, str_value=MODULE)
    path = tmp_path / "gpu.xplane.pb"
    path.write_bytes(space.SerializeToString())
    trace = read_xplane(path)
    work = find_work(trace, phase_timeline(trace), read_hlo_protos(trace.metadata["hlo_protos"]))
    assert sorted((w.name, w.phase, w.fused) for w in work.kernels()) == [
        ("kernel_MatMul.1", "forward", False), ("kernel_select_fusion", MIXED, True)]
    assert [w.launch.name for w in work.kernels()] == ["cuLaunchKernel"] * 2


def test_broken_hlo_inputs_say_what_is_wrong(tmp_path):
    from profilers.errors import TraceFormatError
    from analysis.readers.hlo_text import read_hlo_text
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
