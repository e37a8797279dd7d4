"""Causes in foreign traces: transfers, kernels and launches per phase, the compare headline that
names the biggest cause inside the biggest phase delta, different GPUs and world sizes warned,
device busy never above the step, and Inductor's kernel names counted as fused. The fixtures'
figures are derived by hand in the README.md beside each (tests/fixtures/foreign/<name>/)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.measures.fusion_table import is_compiler_fused, one_op_kernel
from gapscope.analysis.measures.runtime_calls import COPY, LAUNCH, SYNC, call_kind, waits_for_device
from gapscope.analysis.renderers import compare_markdown, compare_table, evidence_text
from gapscope.analysis.results.compare import compare
from gapscope.analysis.results.evidence.builders import Evidence, EvidenceKind
from gapscope.analysis.results.explain import explain_run
from gapscope.cli import cli

FOREIGN = Path(__file__).parent / "fixtures" / "foreign"
D2D = FOREIGN / "d2d_pair"
DEVICES = FOREIGN / "devices_differ"
TWO_STREAMS = FOREIGN / "two_streams"
HEADLINE_CAUSE = "forward +0.300 ms: +3 device-to-device copies per step (+6.0 MB, +0.090 ms)"


@pytest.fixture(scope="module")
def d2d():
    return compare([explain_run(D2D / "control"), explain_run(D2D / "test")])


def test_copies_kernels_and_launches_go_to_the_phase_that_issued_them(d2d):
    control, test = d2d.runs
    assert test.transfers.by_phase == {
        "data_load": {"H2D": {"count_per_step": 1.0, "bytes_per_step": 1_000_000.0,
                              "ms_per_step": 0.02, "calls_ms_per_step": 0.01}},
        "forward": {"D2D": {"count_per_step": 4.0, "bytes_per_step": 8_000_000.0,
                            "ms_per_step": 0.08, "calls_ms_per_step": 0.04}}}
    assert control.transfers.by_phase["forward"]["D2D"]["count_per_step"] == 1.0
    # One kernel launch in forward, backward and optimizer; the copies' calls are copies.
    assert test.attribution.calls_by_phase == {
        "data_load": {COPY: {"count_per_step": 1.0, "ms_per_step": 0.01}},
        "forward": {COPY: {"count_per_step": 4.0, "ms_per_step": 0.04},
                    LAUNCH: {"count_per_step": 1.0, "ms_per_step": 0.01}},
        "backward": {LAUNCH: {"count_per_step": 1.0, "ms_per_step": 0.01}},
        "optimizer": {LAUNCH: {"count_per_step": 1.0, "ms_per_step": 0.01}}}
    assert test.kernels.per_phase["forward"] == 1.0
    assert test.kernels.time_ms_per_phase["forward"] == pytest.approx(0.200)
    # The per-phase queueing calls add up to the run's launches per step.
    calls = test.attribution.calls_by_phase
    assert sum(c[k]["count_per_step"] for c in calls.values() for k in (LAUNCH, COPY) if k in c) \
        == test.attribution.launches_per_step == 8


def test_compare_headline_names_the_extra_copies(d2d):
    (pair,) = d2d.pairs
    assert pair.gap_ms == pytest.approx(0.300)
    assert {g.phase: g.delta_ms for g in pair.phases}["forward"] == pytest.approx(0.300)
    cause = pair.cause
    assert (cause.phase, cause.kind, cause.way) == ("forward", "transfers", "D2D")
    assert cause.delta_count == 3.0 and cause.delta_bytes == 6_000_000.0
    assert cause.delta_ms == pytest.approx(0.090)  # 3 x (20 µs copy + 10 µs call)
    assert evidence_text.cause(cause) == HEADLINE_CAUSE
    # The same words in the table, the Markdown and the JSON (which the report and the
    # TensorBoard tab read), and the figures as a structured field.
    assert HEADLINE_CAUSE in " ".join(compare_table.render(d2d).split())
    assert HEADLINE_CAUSE in compare_markdown.render(d2d)
    result = CliRunner().invoke(cli, ["compare", str(D2D / "control"), str(D2D / "test"),
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)["comparisons"][0]["cause"]
    assert doc["text"] == HEADLINE_CAUSE
    assert (doc["kind"], doc["way"], doc["delta_count"], doc["delta_bytes"]) == ("transfers", "D2D", 3.0, 6e6)


def test_the_phase_evidence_shows_its_copies(d2d):
    (pair,) = d2d.pairs
    forward = next(e for e in pair.evidence if e.kind == EvidenceKind.KERNELS and e.phase == "forward")
    assert "D2D 1 vs 4 (2.0 MB vs 8.0 MB)" in evidence_text.sentence(forward, pair)


def test_no_cause_is_named_against_the_phase_direction(d2d):
    """Swapped, forward got faster by 0.300 ms: the cause is 3 copies fewer, not more."""
    reverse = compare(list(reversed(d2d.runs)))
    assert evidence_text.cause(reverse.pairs[0].cause) == (
        "forward -0.300 ms: -3 device-to-device copies per step (-6.0 MB, -0.090 ms)")


def test_different_gpus_and_world_sizes_are_warned():
    a100, v100 = explain_run(DEVICES / "a100"), explain_run(DEVICES / "v100")
    # Read from the traces: the entry of the device the kernels ran on, not the first one.
    assert (a100.hardware.device, a100.hardware.memory_gib, a100.hardware.sms) == (
        "NVIDIA A100-SXM4-40GB", 39.4, 108)
    assert (v100.hardware.device, v100.hardware.memory_gib, v100.hardware.sms) == (
        "Tesla V100-SXM2-32GB", 31.7, 80)
    assert (a100.hardware.world_size, v100.hardware.world_size) == (8, 2)
    assert a100.breakdown.device == "NVIDIA A100-SXM4-40GB"
    comparison = compare([a100, v100])
    assert comparison.pairs[0].devices_differ
    assert ("different devices: NVIDIA A100-SXM4-40GB (39.4 GiB, 108 SMs) (a100) vs "
            "Tesla V100-SXM2-32GB (31.7 GiB, 80 SMs) (v100): the gap includes the hardware"
            in comparison.warnings)
    assert any(w.startswith("different world sizes: 8 process(es) (a100) vs 2 (v100)")
               for w in comparison.warnings)


def test_same_gpu_and_world_is_not_warned(d2d):
    assert not d2d.pairs[0].devices_differ
    assert not any(w.startswith(("different devices", "different world")) for w in d2d.warnings)


def test_busy_is_the_device_work_inside_the_step_window():
    run = explain_run(TWO_STREAMS)
    at = run.attribution
    # Step 1: 1010-1100 (two streams overlapping count once) = 90; step 2: 1100-1200 = 100.
    assert at.device_busy_ms == pytest.approx(0.095)
    assert at.device_busy_ms <= min(run.breakdown.step_times_ms)
    assert at.device_busy_ms + at.device_idle_ms == pytest.approx(0.100)
    assert at.late_ms == pytest.approx(0.040)
    # Summed kernel time is another figure: 420 µs of kernels over two steps.
    assert run.kernels.time_ms_per_step == pytest.approx(0.210)


def test_inductor_kernels_of_every_torch_2_version_count_as_fused():
    """Generated kernels that list two ops or more, or none (torch 2.0's triton__0d1d2d3de), count
    as fused; those that list one (add, sum, _softmax: issue 45) are generated kernels, no
    fusion. The trace's 6 kernels: two sgemm, triton__0d1d2d3de and three one-op ones: 1/6."""
    run = explain_run(TWO_STREAMS)
    assert run.kernels.fused_share == pytest.approx(1 / 6)
    for name in ("triton__0d1d2d3de", "triton_poi_fused_add_mul_0", "cpp_fused_addmm_relu_0"):
        assert is_compiler_fused(name), name
    for name in ("triton_poi_fused_add_0", "triton_red_fused_sum_1", "triton_per_fused__softmax_2",
                 "triton_tem_fused_mm_3", "cpp_fused_relu_0"):
        assert not is_compiler_fused(name) and one_op_kernel(name), name
    for name in ("ampere_sgemm_128x64_nt", "_fwd_kernel", "void at::native::vectorized_elementwise_kernel"):
        assert not is_compiler_fused(name), name


def test_an_h2d_outside_data_load_is_said_where_it_fell():
    run = explain_run(TWO_STREAMS)
    assert set(run.transfers.by_phase) == {"backward"}
    t = run.transfers.to_json_dict()
    pair = compare([run, run]).pairs[0]
    text = evidence_text.sentence(Evidence(EvidenceKind.TRANSFERS, "data_load", t, t, 0.0), pair)
    assert text == "transfers in data_load (+0.000 ms): none in data_load; elsewhere 0.5 H2D in backward"


def test_runtime_calls_by_what_they_do():
    assert [call_kind(n) for n in ("cudaLaunchKernel", "hipLaunchKernel", "cudaGraphLaunch",
                                   "cudaMemcpyAsync", "hipMemsetAsync", "cudaStreamSynchronize",
                                   "cudaDeviceSynchronize", "cudaEventRecord")] == [
        LAUNCH, LAUNCH, LAUNCH, COPY, COPY, SYNC, SYNC, None]


def test_the_host_waits_in_synchronizes_and_blocking_copies_only():
    """One classifier for the blocking notes and other's "device wait": a stream waiting on an
    event is the device's wait (the host call returns at once), an Async copy only queues."""
    names = ("cudaStreamSynchronize", "hipDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
             "cudaMemcpy2D", "hipMemcpy", "cudaMemcpyAsync", "hipMemcpyAsync", "cudaMemcpy2DAsync",
             "cudaMemcpyToSymbolAsync", "cudaStreamWaitEvent", "cudaLaunchKernel")
    assert [n for n in names if waits_for_device(n)] == list(names[:6])


def test_unattributed_kernels_are_worded_per_framework(fixtures_dir):
    gpu = explain_run(fixtures_dir / "async_gpu_two_steps.pt.trace.json")
    pair = compare([gpu, gpu]).pairs[0]
    (evidence,) = [e for e in pair.evidence if e.kind == EvidenceKind.UNATTRIBUTED][:1]
    text = evidence_text.sentence(evidence, pair)
    assert "no launching host call" in text and "XLA" not in text
    evidence.a["framework"] = "tensorflow"
    assert "copies XLA added" in evidence_text.sentence(evidence, pair)
