"""CPU stand-ins for kernels on hand-made events: an op runs a kernel when most of its time is
its own; views and wrappers do not; an Inductor graph without kernel profiling is one opaque
fused kernel; host/device attribution on the CPU; compile and guard figures."""
import pytest

from gapscope.analysis.results.attribution import attribute
from gapscope.analysis.results.breakdown import breakdown_from_trace
from gapscope.analysis.results.compile_overhead import compile_stats
from gapscope.analysis.measures.kernels import HOST_OPS, find_work, kernel_stats
from gapscope.analysis.events.timeline import phase_timeline
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, OTHER, STEP, Event, Trace

GRAPH = "## Call CompiledFxGraph abcdefgh12345 ##"


def _op(name, start, end, kind=HOST_OP, track="host/1/1", **extra):
    return Event(name, kind, start, end - start, track, **extra)


def _eager_step(graph_children=(("aten::mm", 82, 86),)):
    """One 100 µs step. Own times: addmm 30 - expand 1 - copy_ 4 = 25 (kernel); copy_ 4;
    relu 8 - clamp_min 6 = 2 (a wrapper); clamp_min 6; mm 20 inside an autograd wrapper;
    the compiled graph 14 minus its children."""
    events = [
        Event("ProfilerStep#1", STEP, 0, 100, "host/1/1", step_num=1),
        _op("gapscope/forward", 0, 50, ANNOTATION),
        _op("aten::linear", 0, 40), _op("aten::t", 1, 3),
        _op("aten::addmm", 5, 35), _op("aten::expand", 6, 7), _op("aten::copy_", 10, 14),
        _op("aten::relu", 40, 48), _op("aten::clamp_min", 41, 47),
        _op("gapscope/backward", 50, 80, ANNOTATION),
        _op("autograd::engine::evaluate_function: AddmmBackward0", 50, 78), _op("aten::mm", 52, 72),
        _op("gapscope/optimizer", 80, 95, ANNOTATION),
        _op(GRAPH, 80, 94),
    ]
    events += [_op(name, s, e) for name, s, e in graph_children]
    return Trace("torch", "hand-made", events)


def _analyse(trace):
    timeline = phase_timeline(trace)
    work = find_work(trace, timeline)
    return work, kernel_stats(work), attribute(work, timeline, breakdown_from_trace(trace))


def test_ops_that_run_kernels_and_their_own_time():
    work, stats, _ = _analyse(_eager_step())
    assert stats.source == HOST_OPS
    found = sorted((w.name, w.phase, w.busy_us) for w in work.kernels())
    assert found == [("aten::addmm", "forward", 25), ("aten::clamp_min", "forward", 6),
                     ("aten::copy_", "forward", 4), ("aten::mm", "backward", 20),
                     ("aten::mm", "optimizer", 4),
                     ("inductor graph abcdefgh (kernels not itemised)", "optimizer", 10)]
    assert stats.per_step == 6 and stats.mean_us == pytest.approx(69 / 6)
    assert stats.fused_share == pytest.approx(1 / 6) and stats.fused_time_share == pytest.approx(10 / 69)
    assert any("TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE" in n for n in stats.notes)


def test_itemised_inductor_kernels_replace_the_opaque_graph():
    work, stats, _ = _analyse(_eager_step((("graph_0_cpp_fused_add_mul_0", 81, 87), ("aten::mm", 88, 92))))
    names = {w.name for w in work.kernels() if w.phase == "optimizer"}
    assert names == {"graph_0_cpp_fused_add_mul_0", "aten::mm"}
    assert stats.fused_share == pytest.approx(1 / 6) and not stats.notes
    # A generated kernel of one op is itemised as well, but is no fusion (issue 45).
    work, stats, _ = _analyse(_eager_step((("graph_0_cpp_fused_add_0", 81, 87), ("aten::mm", 88, 92))))
    assert "graph_0_cpp_fused_add_0" in {w.name for w in work.kernels()} and stats.fused_share == 0.0


def test_cpu_attribution_host_against_time_in_kernels():
    _, _, result = _analyse(_eager_step())
    assert result.device_kind == "cpu" and result.launches_per_step is None
    assert result.host_ms == pytest.approx(
        {"data_load": 0.0, "forward": 0.050, "backward": 0.030, "optimizer": 0.015, "other": 0.005})
    assert result.device_ms == pytest.approx(
        {"data_load": 0.0, "forward": 0.035, "backward": 0.020, "optimizer": 0.014, "other": 0.0})
    assert result.device_busy_ms == pytest.approx(0.069)
    assert result.dispatch_ms == pytest.approx(0.031)  # the step's time outside any kernel


def test_tf_ops_take_their_phase_from_their_name():
    trace = Trace("xplane", "hand-made", [
        Event("train", STEP, 0, 100, "host/1/0", step_num=3),
        _op("StatefulPartitionedCall/gapscope_forward/dense/MatMul:_MklMatMul", 10, 30, track="host/1/2"),
        _op("StatefulPartitionedCall/gradient_tape/gapscope_forward/dense/MatMul:MatMul", 30, 50, track="host/1/3"),
    ])
    work, stats, _ = _analyse(trace)
    assert sorted((w.phase, w.busy_us) for w in work.kernels()) == [("backward", 20), ("forward", 20)]


def test_ops_side_by_side_sum_above_their_busy_time():
    """TF runs ops on several threads at once: summed op time (50 µs) exceeds the time any op
    ran (40 µs, threads merged); the compare shows both and their ratio, 1.25x."""
    from types import SimpleNamespace
    from gapscope.analysis.renderers.compare_columns import parallelism
    trace = Trace("xplane", "hand-made", [
        Event("train", STEP, 0, 100, "host/1/0", step_num=3),
        _op("StatefulPartitionedCall/gapscope_forward/dense/MatMul:_MklMatMul", 10, 30, track="host/1/2"),
        _op("StatefulPartitionedCall/gradient_tape/gapscope_forward/dense/MatMul:MatMul", 20, 50,
            track="host/1/3"),
    ])
    _, stats, result = _analyse(trace)
    assert stats.time_ms_per_step == pytest.approx(0.050)
    assert result.device_busy_ms == pytest.approx(0.040)
    assert parallelism(SimpleNamespace(kernels=stats, attribution=result)) == pytest.approx(1.25)


def test_compile_guard_and_tracing_figures():
    trace = Trace("torch", "hand-made", [
        Event("ProfilerStep#1", STEP, 0, 100, "host/1/1", step_num=1),
        Event("ProfilerStep#2", STEP, 100, 100, "host/1/1", step_num=2),
        _op("TorchDynamo Cache Lookup", 10, 12), _op("Torch-Compiled Region: 0/0", 12, 40),
        _op("TorchDynamo Cache Lookup", 110, 113), _op("Torch-Compiled Region: 0/0", 113, 140),
        _op("entire_frame_compile", 150, 170), _op("inductor_compile", 155, 165),   # a recompile
        _op("multi_step_on_iterator", 0, 90, OTHER,
            stats={"tf_function_call": "traced-nonXla", "tracing_count": 2}),
    ])
    rows = [{"step": i, "step_ms": ms} for i, ms in enumerate([500.0, 20.0, 10.0, 11.0, 12.0])]
    stats = compile_stats(trace, phase_timeline(trace), rows, warmup_steps=2)
    assert stats.first_step_ms == 500.0 and stats.steady_median_ms == 11.0
    assert stats.warmup_excess_ms == pytest.approx(489 + 9)
    assert stats.compiled_calls_per_step == 1.0
    assert stats.guard_ms_per_step == pytest.approx(0.0025)
    assert stats.compile_in_window_ms == pytest.approx(0.020)   # nested spans merged, not summed
    assert stats.tf_traced_calls == 1 and stats.tf_tracing_count == 2
    assert len(stats.notes) == 2
