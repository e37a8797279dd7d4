"""Kernels by layer on the two real H200 traces (mlp eager and under torch.compile, two
steps each, tests/fixtures/h200): every count below was read off the traces by hand, kernel by
kernel, with the host op that launched it (see each test). Also the op-name rules and the GPU
peak table, and a compiled CPU graph's itemised kernels."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gapscope.analysis.measures.device_peaks import device_peak, peak_gflops
from gapscope.analysis.measures.kernel_layers import kernel_layers, op_kinds
from gapscope.analysis.measures.kernels import find_work
from gapscope.analysis.model.run import load_run
from gapscope.analysis.results.layers import layer_breakdown
from h200_runs import H200, SPECS, run_folder

ROOT = Path(__file__).resolve().parent.parent


def _placed(name: str):
    run = load_run(H200 / f"mlp-{name}.pt.trace.json.gz")
    return kernel_layers(run.trace, run.timeline, SPECS)


def _counts(found, phase: str) -> dict[str, float]:
    counts = {name: g[phase].count for name, g in found.layers.items()}
    return {**counts, "mixed": found.mixed[phase].count, "outside": found.outside[phase].count}


def test_compiled_kernels_are_placed_or_mixed_as_counted_by_hand():
    """Forward, per step: aten::mm (the 1st GEMM of 2, dense1) launches 1 kernel, then
    triton_poi_fused_addmm_relu_0 (ReLU: only dense1 has one); triton_poi_fused_addmm_t_1 and
    triton_poi_fused_addmm_2 (addmm: dense1 or logits) are mixed; aten::addmm (the 2nd GEMM,
    logits) launches scal_kernel, sgemm_largek_lds64 and cuBLASLt's epilogue (and a memset, no
    kernel); the eager loss launches a copy (aten::contiguous inside cross_entropy_loss),
    softmax_warp_forward and nll_loss_forward: 2 + 3 + 3 + 2 mixed = 10.
    Backward: ones_like's fill is outside any layer; nll_loss_backward's zero_ and kernel and
    softmax_warp_backward are the loss (their autograd nodes' names); in the compiled backward
    only triton_poi_fused_threshold_backward_2 names one layer (dense1); its three extern mm
    (five cuBLAS/CUTLASS kernels) and four fused sums fit both dense layers: 1 + 3 + 1 + 9 = 14."""
    found = _placed("compile")
    assert found.steps == 2
    assert _counts(found, "forward") == {"dense1": 2, "logits": 3, "loss": 3, "mixed": 2, "outside": 0}
    assert _counts(found, "backward") == {"dense1": 1, "logits": 0, "loss": 3, "mixed": 9, "outside": 1}
    assert set(found.mixed["forward"].names) == {"triton_poi_fused_addmm_t_1", "triton_poi_fused_addmm_2"}
    mixed_backward = found.mixed["backward"].names
    assert sorted(n for n in mixed_backward if n.startswith("triton")) == [
        "triton_per_fused_sum_1", "triton_per_fused_sum_4", "triton_red_fused_sum_0", "triton_red_fused_sum_3"]
    assert all(fits == ("dense1", "logits") for fits in mixed_backward.values())
    # Per kernel, each of the 2 steps counted once: 10 forward and 14 backward kernels a step.
    assert sum(found.placed_by.values()) == 2 * (10 + 14)
    assert found.placed_by == {"order": 8, "name": 16, "mixed": 22, "outside": 2}


def test_eager_kernels_follow_their_ops_and_autograd_nodes():
    """Forward: aten::linear #1 (dense1: its GEMM), aten::relu (dense1), aten::linear #2
    (logits: scal, sgemm_largek, epilogue), the loss's softmax and nll_loss: 2 + 3 + 2.
    Backward: the two AddmmBackward0 nodes run in reverse order, logits first (its mm's CUTLASS
    kernel and split-K reduce, its weight-gradient GEMM and the bias's sum reduce), then
    dense1 after ReluBackward0's threshold kernel (2 GEMM kernels and a sum: 4 with ReLU's)."""
    found = _placed("eager")
    assert _counts(found, "forward") == {"dense1": 2, "logits": 3, "loss": 2, "mixed": 0, "outside": 0}
    assert _counts(found, "backward") == {"dense1": 4, "logits": 4, "loss": 3, "mixed": 0, "outside": 1}
    # The slowest kernel of the step, the 50 µs sm80_xmma_gemm_..._nt weight gradient, is
    # logits' (launched inside the first AddmmBackward0): its backward is the costly one.
    assert found.layers["logits"]["backward"].ms > 3 * found.layers["dense1"]["backward"].ms


def test_a_users_modules_take_no_kernel_by_op_name():
    """A user's model's layers (kind "module": capture(model=)) have no kind an op name could
    fit: a kernel no range or autograd node places is outside, never mixed or guessed by
    name (this trace has no layer ranges: all 7 forward and 12 backward kernels a step)."""
    run = load_run(H200 / "mlp-eager.pt.trace.json.gz")
    own = [{"name": s["name"], "kind": "module", "dims": {}} for s in SPECS]
    found = kernel_layers(run.trace, run.timeline, own)
    assert _counts(found, "forward") == {"dense1": 0, "logits": 0, "loss": 0, "mixed": 0, "outside": 7}
    assert _counts(found, "backward") == {"dense1": 0, "logits": 0, "loss": 0, "mixed": 0, "outside": 12}


def test_groups_add_up_to_the_phases_kernel_time():
    for name in ("eager", "compile"):
        run = load_run(H200 / f"mlp-{name}.pt.trace.json.gz")
        found = kernel_layers(run.trace, run.timeline, SPECS)
        work = find_work(run.trace, run.timeline)
        for phase in ("forward", "backward"):
            traced = sum(w.busy_us for w in work.kernels() if w.phase == phase) / 1000.0 / 2
            assert found.phase_ms(phase) == pytest.approx(traced, rel=1e-9)


def test_a_bare_trace_without_layers_or_spec_has_none():
    run = load_run(H200 / "mlp-compile.pt.trace.json.gz")
    assert kernel_layers(run.trace, run.timeline, None) is None


def test_layer_breakdown_gives_gflops_only_where_no_mixed_kernel_may_belong(tmp_path):
    eager = layer_breakdown(load_run(run_folder(tmp_path, "eager"))).kernels
    dense1 = next(r for r in eager["layers"] if r["name"] == "dense1")
    # dense1's forward (100 inputs, 128 units, batch 256): the GEMM's 2·256·100·128 and the
    # bias and ReLU's 2·256·128 FLOP, over its two kernels' time.
    flop = 2 * 256 * 100 * 128 + 2 * 256 * 128
    assert dense1["forward"]["gflop"] == pytest.approx(flop / 1e9, abs=1e-6)  # kept to 6 digits
    assert dense1["forward"]["gflops"] == pytest.approx(flop / 1e9 / (dense1["forward"]["ms"] / 1e3), rel=1e-3)
    assert dense1["forward"]["peak_share"] == pytest.approx(dense1["forward"]["gflops"] / 67_000, rel=1e-4)
    compiled = layer_breakdown(load_run(run_folder(tmp_path, "compile"))).kernels
    rows = {r["name"]: r for r in compiled["layers"]}
    assert rows["dense1"]["forward"]["gflops"] is None and rows["logits"]["backward"]["gflops"] is None
    assert rows["loss"]["forward"]["gflops"] is not None   # no mixed kernel fits the loss
    assert compiled["peak"]["gflops"] == 67_000.0


def test_cli_prints_the_kernel_table_and_what_is_mixed(tmp_path):
    folder = run_folder(tmp_path, "compile")
    out = subprocess.run([sys.executable, str(ROOT / "cli.py"), "breakdown", str(folder), "--layers"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "gapscope device kernels by layer" in out.stdout
    assert "triton_poi_fused_addmm_t_1 (dense1 or logits)" in out.stdout
    assert "kernels placed by order 8, name 16, mixed 22, outside 2" in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80


@pytest.mark.parametrize("name, kinds, anchor", [
    ("triton_poi_fused_addmm_relu_0", [("dense", "lstm"), ("relu",)], False),
    ("triton_tem_fused_addmm_relu_0", [("dense", "lstm"), ("relu",)], True),
    ("triton_poi_fused_threshold_backward_2", [("relu",)], False),
    ("triton_red_fused_sum_0", [], False),
    ("cpp_fused__log_softmax_nll_loss_forward_3", [("loss",), ("loss",)], False),
    ("triton_per_fused_native_batch_norm_backward_1", [("batchnorm",)], False),
    ("triton_poi_fused_max_pool2d_with_indices_backward_4", [("maxpool2d",)], False),
    ("aten::linear", [("dense", "lstm")], True),
    ("autograd::engine::evaluate_function: ConvolutionBackward0", [("conv2d",)], True),
    ("autograd::engine::evaluate_function: NllLossBackward0", [("loss",)], False),
    ("aten::view", [], False),
])
def test_op_names_say_which_kinds_of_layer_they_fit(name, kinds, anchor):
    assert op_kinds(name) == (kinds, anchor)


def test_device_peak_table():
    assert device_peak("NVIDIA H100 80GB HBM3").product == "H100 SXM"
    assert device_peak("NVIDIA H100 PCIe").product == "H100 PCIe"
    assert device_peak("NVIDIA A100-SXM4-40GB").product == "A100"   # not the A10
    assert device_peak("NVIDIA L40S").product == "L40S"              # not the L4
    assert device_peak("NVIDIA A10G") is None and device_peak("NVIDIA H100 NVL") is None
    assert peak_gflops("NVIDIA H200", "bf16")["gflops"] == 989_400.0
    assert peak_gflops("Tesla T4", "tf32") is None and peak_gflops(None) is None


def test_a_compiled_cpu_graphs_itemised_kernels_are_placed_by_the_same_rules():
    """One hand-made CPU step of the mlp under torch.compile with Inductor's kernel profiling:
    forward graph: aten::addmm 10 µs (1st GEMM: dense1), graph_0_cpp_fused_relu_0 2 µs (ReLU:
    dense1), aten::addmm 4 µs (2nd: logits), graph_0_cpp_fused_0 1 µs (no op named: mixed);
    the eager loss (cross_entropy_loss 8 µs around _log_softmax 3 µs); backward graph: graph_0_cpp_fused_threshold_backward_1
    2 µs (dense1), aten::mm 5 + 6 + 7 µs (GEMMs of a compiled backward: dense1 or logits),
    graph_0_cpp_fused_sum_2 1 µs (mixed)."""
    from gapscope.analysis.events.timeline import phase_timeline
    from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, STEP, Event, Trace

    def op(name, start, end, kind=HOST_OP):
        return Event(name, kind, start, end - start, "host/1/1")

    graph = "## Call CompiledFxGraph abcdefgh12345 ##"
    events = [Event("ProfilerStep#1", STEP, 0, 100, "host/1/1", step_num=1),
              op("gapscope/forward", 0, 40, ANNOTATION), op("CompiledFunction", 1, 30), op(graph, 2, 29),
              op("aten::addmm", 3, 13), op("graph_0_cpp_fused_relu_0", 13, 15),
              op("aten::addmm", 16, 20), op("graph_0_cpp_fused_0", 21, 22),
              op("aten::cross_entropy_loss", 31, 39), op("aten::_log_softmax", 32, 35),
              op("gapscope/backward", 40, 80, ANNOTATION),
              op("autograd::engine::evaluate_function: CompiledFunctionBackward", 41, 79),
              op(graph.replace("abcdefgh", "bwdgraph"), 42, 78),
              op("graph_0_cpp_fused_threshold_backward_1", 43, 45), op("aten::mm", 46, 51),
              op("aten::mm", 52, 58), op("aten::mm", 60, 67), op("graph_0_cpp_fused_sum_2", 70, 71)]
    trace = Trace("torch", "hand-made", events)
    found = kernel_layers(trace, phase_timeline(trace), SPECS)
    assert found.source == "host ops"
    ms = {name: [round(g[p].ms * 1000, 6) for p in ("forward", "backward")] for name, g in found.layers.items()}
    # The loss: cross_entropy_loss's own 5 µs (a CPU op's time without its children) and 3.
    assert ms == {"dense1": [12, 2], "logits": [4, 0], "loss": [8, 0]}  # µs
    assert found.mixed["forward"].names == {"graph_0_cpp_fused_0": ("dense1", "logits")}
    assert found.mixed["backward"].count == 4 and found.mixed["backward"].ms == pytest.approx(0.019)
    assert found.placed_by == {"order": 2, "name": 4, "mixed": 5}
