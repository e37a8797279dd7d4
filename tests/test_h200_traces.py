"""gapscope's CUDA paths on two real traces from an H200 (benchmarks.gpu_check, 26 November 2026,
torch 2.11.0+cu130): the mlp eager and under torch.compile, cut to two steps with
benchmarks.cut_trace. Every count was read off the traces' kernel names by hand, so a machine
without a GPU still checks kernel, fusion and copy attribution on real CUPTI output."""
from __future__ import annotations

import dataclasses
import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gapscope.analysis.measures.kernels import DEVICE_KERNELS, find_work, kernel_stats
from gapscope.analysis.model.run import load_run
from gapscope.analysis.results.breakdown import breakdown
from benchmarks import cut_trace, gpu_checks as C

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "tests" / "fixtures" / "h200"


def _work(name: str):
    run = load_run(H200 / f"mlp-{name}.pt.trace.json.gz")
    work = find_work(run.trace, run.timeline, run.hlo)
    work.steps = len(run.timeline.steps)
    return run, work


@pytest.fixture(scope="module")
def eager():
    return _work("eager")


@pytest.fixture(scope="module")
def compiled():
    return _work("compile")


def _per_phase(work) -> dict:
    counts = Counter((k.phase, k.fused) for k in work.kernels())
    return {key: n / work.steps for key, n in sorted(counts.items())}


def test_every_kernel_lands_in_its_phase(eager, compiled):
    _, eager_work = eager
    _, compiled_work = compiled
    assert eager_work.source == compiled_work.source == DEVICE_KERNELS
    assert eager_work.steps == compiled_work.steps == 2
    # Eager: forward's 7 (3 GEMM kernels and the cuBLASLt epilogue, fused, the activation, the
    # loss's softmax and NLL), backward's 12, the optimizer's 5 multi_tensor_apply kernels;
    # nothing unplaced.
    assert _per_phase(eager_work) == {("backward", False): 12.0, ("forward", False): 6.0,
                                      ("forward", True): 1.0, ("optimizer", False): 5.0}
    # Compiled: Inductor's Triton kernels in forward (3) and backward (5), and the epilogue of
    # the mm Inductor left to cuBLASLt. Fused of them: forward's addmm_relu and addmm_t, and the
    # epilogue; addmm_2 and backward's threshold_backward and four sums hold one op each
    # (generated kernels, no fusion: issue 45).
    assert _per_phase(compiled_work) == {("backward", False): 14.0, ("forward", False): 7.0,
                                         ("forward", True): 3.0, ("optimizer", False): 5.0}


def test_the_cublaslt_epilogue_counts_as_fused_by_no_compiler(eager):
    """Counted by hand off the kernel names: of forward's 7 kernels a step, one is
    `cublasLt::epilogue::impl::globalKernel`, launched by aten::addmm (the bias of the second
    linear; its ReLU runs apart as aten::clamp_min's kernel); the splitKreduce kernels of
    backward's mm only sum partial products and are not fused."""
    _, work = eager
    fused = [k for k in work.kernels() if k.fusion is not None]
    assert [(k.phase, k.fusion.fuses, k.fusion.kind.by) for k in fused] == [
        ("forward", "dense+bias", "framework")] * 2
    assert all(k.name.startswith("void cublasLt::epilogue::impl::globalKernel<") for k in fused)
    assert not any(k.fusion for k in work.kernels() if "splitKreduce" in k.name)
    stats = kernel_stats(work)
    forward = stats.fusion_by_phase["forward"]
    assert forward["fused_per_step"] == 1.0 and forward["fusions"][0]["fuses"] == "dense+bias"
    assert stats.fused_share == pytest.approx(1 / 24)
    # The fused kernel's share of forward's kernel time, from the kernels' own durations.
    forward_us = [k.busy_us for k in work.kernels() if k.phase == "forward"]
    assert forward["share_of_time"] == pytest.approx(
        sum(k.busy_us for k in fused) / sum(forward_us), abs=1e-4)


def test_the_gpu_check_counts_the_epilogue_of_the_eager_mlp(eager, compiled):
    check = C.framework_fusion(eager[1], "mlp")
    assert check.status == C.PASS, check.detail
    assert check.detail == "cuBLASLt epilogue 1/step in forward; 1 of 24 kernels/step fused"
    # Without its epilogue the mlp fails; the cnn is not required to have one.
    bare = dataclasses.replace(eager[1], items=[w for w in eager[1].items if w.fusion is None])
    assert C.framework_fusion(bare, "mlp").status == C.FAIL
    assert "no cuBLASLt epilogue" in C.framework_fusion(bare, "mlp").detail
    assert C.framework_fusion(bare, "cnn").status == C.PASS
    # A fused kernel the attribution lost (no phase) fails the check.
    lost = dataclasses.replace(eager[1], items=[dataclasses.replace(w, phase="unattributed")
                                                if w.fusion else w for w in eager[1].items])
    check = C.framework_fusion(lost, "cnn")
    assert check.status == C.FAIL and "1 fused kernels/step in no phase (unattributed)" in check.detail


def test_the_fusion_check_on_the_real_pair(eager, compiled):
    check = C.triton_fusion(C.FusionFigures.of(compiled[1]), C.FusionFigures.of(eager[1]))
    assert check.status == C.PASS, check.detail
    # More kernels in all (29 against 24), fewer of ATen's own in the model (16 against 19).
    # Fused share: Inductor's two kernels of two ops or more a step, of 29: 7 %.
    assert check.detail.startswith("forward and backward 8 Triton + 16 other kernels/step against "
                                   "eager's 19; all phases 29 against 24; fused share 7 %")
    assert "top Triton kernel triton_" in check.detail


def test_the_batch_copies_are_pinned_and_in_data_load(eager, compiled):
    for _, work in (eager, compiled):
        check = C.transfers_in_data_load(work, "pinned")
        assert check.status == C.PASS, check.detail
        assert check.detail == "H2D 2/step (pinned) all in data_load; no D2H"


def test_the_breakdown_adds_up_on_both(eager, compiled):
    for run, _ in (eager, compiled):
        result = breakdown(run).to_json_dict()
        phases = sum(p["ms"] for p in result["phases"].values())
        assert phases == pytest.approx(result["step_ms"]["mean"], abs=1e-3)
        assert result["phases"]["forward"]["ms"] > 0 and result["phases"]["optimizer"]["ms"] > 0


def test_cut_trace_keeps_the_launched_device_events(tmp_path):
    """The cut of a cut: one step of the two, its kernels found by correlation."""
    with gzip.open(H200 / "mlp-eager.pt.trace.json.gz", "rt") as handle:
        document = json.load(handle)
    one = cut_trace.cut(document, 1, 1)
    names = [e["name"] for e in one["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
    assert len(names) == 1
    assert sum(e.get("cat") == "kernel" for e in one["traceEvents"]) == 24
    with pytest.raises(ValueError, match="2 ProfilerStep spans"):
        cut_trace.cut(document, 1, 2)


def _cut(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.cut_trace", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_cut_trace_refuses_bad_input_in_one_line_with_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    no_ts = tmp_path / "no_ts.json"
    no_ts.write_text('{"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "dur": 5}]}')
    source = H200 / "mlp-eager.pt.trace.json.gz"
    cases = [((bad, tmp_path / "o.json"), f"cut_trace: {bad}: "),
             (("/dev/zero", tmp_path / "o.json"), "cut_trace: /dev/zero: cannot read"),  # no endless read
             ((no_ts, tmp_path / "o.json"), f"cut_trace: {no_ts}: a complete event"),
             ((source, tmp_path / "missing" / "o.json"), f"cut_trace: {tmp_path / 'missing' / 'o.json'}: no folder")]
    for args, says in cases:
        done = _cut(*args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(says), (args, done.stderr)
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "missing").exists()
    # And a good cut, gzipped by its name, read back by the reader.
    done = _cut(source, tmp_path / "cut.json.gz", "--first", "0", "--steps", "1")
    assert done.returncode == 0, done.stderr
    with gzip.open(tmp_path / "cut.json.gz", "rt") as handle:
        assert sum(e.get("name", "").startswith("ProfilerStep#") for e in json.load(handle)["traceEvents"]) == 1
    assert not (tmp_path / "o.json").exists()


def test_backward_per_layer_on_a_gpu_where_the_autograd_thread_comes_first_in_the_file():
    """An H200 mlp run with its layer ranges (the gpu_check of 28 November found every layer
    without backward): Kineto writes the autograd thread's events before the main thread's, so
    the nodes lie before the first layer range, where the reader kept no sequence number. By
    hand from the JSON below: layers plus outside are the traced backward."""
    from click.testing import CliRunner

    from gapscope.cli import cli
    path = H200 / "mlp-eager-layers.pt.trace.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    names = [str(e.get("name", "")) for e in events]
    first_node = next(i for i, n in enumerate(names) if n.startswith("autograd::engine::evaluate_function: "))
    assert first_node < next(i for i, n in enumerate(names) if n.startswith("gapscope_layer/"))
    result = CliRunner().invoke(cli, ["breakdown", str(path), "--layers", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    layers = {r["name"]: r["backward_ms"] for r in doc["layers"]["layers"]}
    assert layers == {"dense1": pytest.approx(0.125449), "logits": pytest.approx(0.201264),
                      "loss": pytest.approx(0.155416)}
    assert sum(layers.values()) + doc["layers"]["outside_ms"]["backward"] == \
        pytest.approx(doc["phases"]["backward"]["ms"], abs=1e-5)
