"""Fused ops without a compiler: the table on literal names, and the seed CNN's real Keras and torch
CPU traces (tests/fixtures/cnn_cpu), whose fused ops per phase were counted off the op names by hand."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gapscope.analysis.measures import fusion_table as T
from gapscope.analysis.measures.kernels import find_work
from gapscope.analysis.model.run import load_run
from gapscope.analysis.renderers import compare_columns, compare_json, evidence_text
from gapscope.analysis.results.compare import _fused_apart_figures, compare
from gapscope.analysis.results.evidence.builders import EvidenceKind
from gapscope.analysis.results.explain import explain
from gapscope.analysis.results.suggestions import Rule, suggest

CNN = Path(__file__).resolve().parent / "fixtures" / "cnn_cpu"


@pytest.mark.parametrize("name, fuses, by", [
    ("StatefulPartitionedCall/gapscope_forward/cnn_1/conv2d_1/Relu:_MklNativeFusedConv2D",
     "conv+bias+ReLU", T.FRAMEWORK),
    ("model/dense_2/BiasAdd:_MklNativeFusedMatMul", "dense+bias", T.FRAMEWORK),
    ("model/dense_3/Relu6_1:_FusedMatMul", "dense+bias+ReLU6", T.FRAMEWORK),
    ("model/conv/FusedBatchNormV3:_FusedConv2D", "conv+batchnorm", T.FRAMEWORK),
    ("grad/conv2d/Conv2DBackpropFilter:_MklNativeConv2DBackpropFilterWithBias",
     "conv filter gradient+bias gradient", T.FRAMEWORK),
    ("model/bn/FusedBatchNormV3:_FusedBatchNormEx", "batchnorm+add+activation", T.FRAMEWORK),
    ("model/ln:_MklFusedInstanceNorm", "MklFusedInstanceNorm", T.FRAMEWORK),
    ("mkldnn::_convolution_pointwise", "conv+post-op", T.FRAMEWORK),
    ("void cublasLt::epilogue::impl::globalKernel<8, 32, float, float, float, true, true, 1>(int)",
     "dense+bias", T.FRAMEWORK),
    ("aten::_addmm_activation", "dense+bias+activation", T.FRAMEWORK),
    ("sm80_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_bias_relu_kernel",
     "conv+bias+activation", T.FRAMEWORK),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16", "attention+softmax", T.FRAMEWORK),
    ("cudnn_generated_fort_native_pointwise_kernel", "cuDNN runtime fusion", T.FRAMEWORK),
    ("triton_poi_fused_addmm_relu_0", "addmm+relu", T.COMPILER),
    ("graph_0_cpp_fused_add_mul_0", "add+mul", T.COMPILER),
    ("subtract_exponential_fusion", "subtract+exponential", T.COMPILER),
])
def test_the_table_says_what_each_name_fused(name, fuses, by):
    found = T.classify(name)
    assert found is not None and (found.fuses, found.kind.by) == (fuses, by)


@pytest.mark.parametrize("name", [
    "model/pool/MaxPool2d:_MklNativeMaxPool", "model/dense/MatMul:_MklMatMul",
    "model/bn/FusedBatchNormV3:FusedBatchNormV3",  # TF's one batchnorm op, no remapper's work
    "void cublasLt::splitKreduce_kernel<32, 16, int, float>(cublasLt::cublasSplitKParams<float>)",
    "aten::mkldnn_convolution", "aten::clamp_min", "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize32x32x8",
])
def test_ops_that_fused_nothing_are_not_in_the_table(name):
    assert T.classify(name) is None


def test_a_generated_kernel_of_one_op_is_no_fusion():
    """Issue 45: 4-5 of a compiled CNN's 13 cpp_fused_* kernels hold one op (relu, sum): a fusion
    needs two or more, so they count as generated kernels. By hand, a step of cpp_fused_relu_1,
    cpp_fused_sum_2, graph_0_cpp_fused_add_0 and one cpp_fused_addmm_relu_0: 1 fusion, 3 generated."""
    from gapscope.analysis.measures.fusion import by_phase
    from gapscope.analysis.measures.kernels import WorkItem
    for name in ("cpp_fused_relu_1", "graph_0_cpp_fused_add_0", "triton_poi_fused_sum_0"):
        assert T.one_op_kernel(name) and T.classify(name) is None, name
    for name in ("cpp_fused_addmm_relu_0", "cpp_fused_0", "fusion.3"):
        assert not T.one_op_kernel(name), name
    names = ["cpp_fused_relu_1", "cpp_fused_sum_2", "graph_0_cpp_fused_add_0", "cpp_fused_addmm_relu_0"]
    items = [WorkItem(name, 10.0 * i, [(10.0 * i, 10.0 * i + 5)], 0, "forward", T.classify(name) is not None,
                      fusion=T.classify(name)) for i, name in enumerate(names)]
    found = by_phase(items, 1)["forward"]
    assert found["fused_per_step"] == 1.0 and found["one_op_generated_per_step"] == 3.0
    assert [row["fuses"] for row in found["fusions"]] == ["addmm+relu"]


def test_a_compiled_runs_fusions_set_against_ops_run_apart():
    """Inductor's names list ATen ops (addmm, relu): the same parts as Keras' dense and Relu."""
    fast = {"forward": {"fusions": [{"fuses": "addmm+relu", "per_step": 2.0}], "fused_per_step": 2.0,
                        "fused_ms_per_step": 0.5, "share_of_time": 0.25}}
    slow = {"forward": {"fusions": [], "apart": [
        {"part": "dense", "per_step": 2.0, "ms_per_step": 3.0}, {"part": "ReLU", "per_step": 2.0, "ms_per_step": 1.25},
        {"part": "conv", "per_step": 4.0, "ms_per_step": 9.0}]}}
    from gapscope.analysis.measures.fusion import fused_apart
    fast_facts, slow_facts, extra = fused_apart(fast, slow, "forward")
    # dense is the anchor (it runs in both); the separate ReLUs are what the fusion saves.
    assert extra == 1.25 and slow_facts["apart_per_step"] == 4.0 and slow_facts["extra_parts"] == ["ReLU"]
    assert fused_apart(fast, slow, "backward") is None and fused_apart(slow, fast, "forward") is None


def test_parts_run_apart_are_named_by_what_they_do():
    assert [T.apart_part(n) for n in ("aten::mkldnn_convolution", "aten::clamp_min", "aten::addmm",
                                      "a/dense/BiasAdd:BiasAdd", "a/conv/Relu:Relu", "aten::softmax")] == [
        "conv", "ReLU", "dense", "bias", "ReLU", None]


@pytest.fixture(scope="module")
def runs():
    keras, torch = (explain(load_run(CNN / side)) for side in ("keras", "torch"))
    return keras, torch


def _fusions(run, phase):
    found = run.kernels.fusion_by_phase.get(phase, {"fusions": []})
    return {row["fuses"]: row["per_step"] for row in found["fusions"]}


def test_keras_fused_ops_per_phase_counted_by_hand(runs):
    keras, _ = runs
    assert _fusions(keras, "forward") == {"conv+bias+ReLU": 4.0, "dense+bias+ReLU": 1.0, "dense+bias": 1.0}
    assert _fusions(keras, "backward") == {"conv filter gradient+bias gradient": 4.0}
    assert _fusions(keras, "optimizer") == {}
    forward = keras.kernels.fusion_by_phase["forward"]
    assert forward["fused_per_step"] == 6.0
    conv = forward["fusions"][0]
    assert conv["names"][0] == "conv2d_1/Relu:_MklNativeFusedConv2D" and conv["kinds_of_name"] == 4
    # The share: the fused ops' own time over all forward ops' own time, from the same work items.
    load = load_run(CNN / "keras")
    items = [k for k in find_work(load.trace, load.timeline, load.hlo).kernels() if k.phase == "forward"]
    fused_us = sum(k.busy_us for k in items if "Fused" in k.name)
    assert forward["share_of_time"] == pytest.approx(fused_us / sum(k.busy_us for k in items), abs=1e-4)
    assert forward["share_of_time"] > 0.5


def test_torch_eager_fuses_nothing_and_runs_the_parts_apart(runs):
    _, torch = runs
    assert all(not d["fusions"] for d in torch.kernels.fusion_by_phase.values())
    assert torch.kernels.fused_share == 0.0
    apart = {r["part"]: (r["per_step"], r["names"]) for r in torch.kernels.fusion_by_phase["forward"]["apart"]}
    assert apart == {"conv": (4.0, ["aten::mkldnn_convolution"]), "ReLU": (5.0, ["aten::clamp_min"]),
                     "dense": (2.0, ["aten::addmm"])}


@pytest.fixture(scope="module")
def pair(runs):
    return compare(list(runs)).pairs[0]


def test_compare_names_the_fused_convolutions_in_forward(runs, pair):
    keras, torch = runs
    fusion = next(e for e in pair.evidence if e.kind == EvidenceKind.FUSION)
    assert fusion.a["fused_share"] > 0 and fusion.b["fused_share"] == 0.0  # no longer 0 % vs 0 %
    assert fusion.a["by_phase"]["forward"]["fusions"] == {"conv+bias+ReLU": 4.0, "dense+bias+ReLU": 1.0,
                                                          "dense+bias": 1.0}
    fused = next(e for e in pair.evidence if e.kind == EvidenceKind.FUSED_OPS)
    assert fused.phase == "forward"
    assert fused.b["apart_per_step"] == 11.0 and fused.b["extra_parts"] == ["ReLU"]
    # What the fusion saves: torch's 5 separate ReLU ops (aten::clamp_min), + since torch is slower.
    relu = next(r for r in torch.kernels.fusion_by_phase["forward"]["apart"] if r["part"] == "ReLU")
    assert fused.delta_ms == pytest.approx(relu["ms_per_step"]) and fused.delta_ms > 0
    text = evidence_text.sentence(fused, pair)
    assert text.startswith("fused ops in forward (+")
    assert ("cnn keras fuses conv+bias+ReLU (4 ops), dense+bias+ReLU (1 op), dense+bias (1 op); "
            "cnn torch runs 11 ops of those apart") in text
    assert "conv 4 (aten::mkldnn_convolution), ReLU 5 (aten::clamp_min), dense 2 (aten::addmm)" in text


def test_the_suggestion_tests_the_fusion_with_a_compiler(runs, pair):
    """Called as compare calls it for the slower run, and apart from whether compare trusts the
    fixtures' step times (both were recorded on a busy machine): the rule is the subject here."""
    _, torch = runs
    figures = _fused_apart_figures(pair, b_slower=True)
    assert figures == {"fused_per_step": 6.0, "apart_per_step": 11.0,
                       "extra_ms": next(e.b["extra_ms_per_step"] for e in pair.evidence
                                        if e.kind == EvidenceKind.FUSED_OPS)}
    phase_ms = {g.phase: g.b_ms for g in pair.phases}
    gaps = {g.phase: g.delta_ms for g in pair.phases}
    found = [s for s in suggest(torch, phase_ms, gaps, pair.b_step_ms, 0.0, figures)
             if s.rule == Rule.FUSED_APART]
    assert [(s.run_label, s.suggested) for s in found] == [("cnn torch", "cnn:torch:compile")]
    assert evidence_text.suggestion(found[0]).startswith(
        "try cnn:torch:compile (fused in the other run, apart here: the other run fuses them into "
        "6 ops per step, this one runs 11 apart")
    # Without the finding, no such suggestion.
    assert not any(s.rule == Rule.FUSED_APART for s in suggest(torch, phase_ms, gaps, pair.b_step_ms, 0.0))


def test_the_headline_names_the_fusion_where_it_carries_forward(pair):
    # In the fixture backward leads the gap, so the headline does not name forward's fusion.
    assert pair.leading_phase.phase == "backward" and pair.fusion_behind_gap is None
    # Where forward leads, the ReLUs run apart (about 12 % of its delta) are named beside it.
    phases = [dataclasses.replace(g, share_of_gap=0.0) if g.phase == "backward" else g for g in pair.phases]
    led = dataclasses.replace(pair, phases=phases)
    assert led.leading_phase.phase == "forward"
    assert led.fusion_behind_gap is not None
    line = compare_columns._where(led)
    assert "; cnn keras fuses conv+bias+ReLU (4 ops)" in line and "separate ReLU ops" in line
    doc = compare_json.document(dataclasses.replace(compare(list(_runs_of(pair))), pairs=[led]))
    assert doc["comparisons"][0]["fusion_behind_gap"]["phase"] == "forward"
    assert doc["comparisons"][0]["fusion_behind_gap"]["text"].startswith("cnn keras fuses conv+bias+ReLU")
    # A forward delta ten times the ReLUs' time: they no longer carry it.
    big = [dataclasses.replace(g, delta_ms=g.delta_ms * 10) if g.phase == "forward" else g for g in phases]
    assert dataclasses.replace(led, phases=big).fusion_behind_gap is None


def _runs_of(pair):
    return [explain(load_run(CNN / side)) for side in ("keras", "torch")]
