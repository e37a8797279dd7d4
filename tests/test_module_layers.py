"""Issue 44 item 5: foreign torch traces recorded with_stack/with_modules get their `nn.Module: …`
ranges as layers, at one depth, in inference traces too (decided by the ops, not Python frames),
with backward shown as unmeasured there; --step-marker splits a module's calls into steps.
The fixtures are real traces (benchmarks.module_traces, see their READMEs); every reference
figure is summed here from the fixture's own JSON events."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.events.module_depth import at_depth, default_depth, module_depths
from gapscope.analysis.events.phase_rules import PhaseOrigin
from gapscope.analysis.events.trace_rules import TraceRules
from gapscope.analysis.model.run import load_run, reading_rules
from gapscope.analysis.results.layers import layer_breakdown
from gapscope.cli import cli

FOREIGN = Path(__file__).parent / "fixtures" / "foreign"
INFERENCE = FOREIGN / "module_inference"
TRAINING = FOREIGN / "module_training"
MODULE = "nn.Module: "


def _events(folder: Path) -> list[dict]:
    (path,) = folder.glob("*.pt.trace.json.gz")
    return [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]


def _module_ms(events: list[dict], calls: slice = slice(None)) -> dict[str, float]:
    """Each module's raw range duration in ms, summed over the given calls of each."""
    by_name = defaultdict(list)
    for e in sorted(events, key=lambda e: e["ts"]):
        if e["name"].startswith(MODULE):
            by_name[e["name"][len(MODULE):]].append(e["dur"] / 1000.0)
    return {name: sum(durs[calls]) for name, durs in by_name.items()}


def _breakdown(folder: Path, **rules):
    with reading_rules(TraceRules(**rules)):
        run = load_run(folder)
    return run, layer_breakdown(run)


@pytest.fixture(scope="module")
def inference():
    return _breakdown(INFERENCE)


def test_an_inference_trace_with_the_profilers_autograd_frames_is_inference(inference):
    """The fixture holds the profiler's own `torch/autograd/profiler.py(…)` Python frames inside
    its steps (the names that made 4 of 5 real traces read as training) and no autograd op."""
    events = _events(INFERENCE)
    assert any(e["name"].startswith("torch/autograd/profiler.py") and e["cat"] == "python_function"
               for e in events)
    assert not any("autograd" in e["name"] for e in events if e["cat"] == "cpu_op")
    run, _ = inference
    assert run.timeline.origins["backward"] == PhaseOrigin.NOT_APPLICABLE
    assert run.timeline.origins["optimizer"] == PhaseOrigin.NOT_APPLICABLE


def test_inference_layers_are_the_models_children_and_match_the_raw_module_ranges(inference):
    """Default depth: TinyViT_0's children (patch_embed, blocks, norm, head). Each layer's forward
    is within 5 % of its raw `nn.Module` range per step (2 steps), summed here from the JSON;
    layers plus outside are the traced forward, which is TinyViT_0's own range."""
    _, lb = inference
    raw = {name: ms / 2 for name, ms in _module_ms(_events(INFERENCE)).items()}
    assert [r.name for r in lb.rows] == ["Conv2d_0", "Sequential_0", "LayerNorm_4", "Linear_8"]
    for row in lb.rows:
        assert row.forward_ms > 0
        assert row.forward_ms == pytest.approx(raw[row.name], rel=0.05), row.name
    assert lb.phase_ms["forward"] == pytest.approx(raw["TinyViT_0"], rel=0.05)
    assert sum(r.forward_ms for r in lb.rows) + lb.outside_ms("forward") == pytest.approx(
        lb.phase_ms["forward"], abs=1e-5)  # each figure rounded to 1 ns
    assert lb.unmeasured == ["backward"]
    document = lb.to_json_dict()
    assert document["phase_ms"]["backward"] is None and document["outside_ms"]["backward"] is None
    assert all(row["backward_ms"] is None and row["forward_ms"] > 0 for row in document["layers"])


def test_layer_depth_chooses_the_level(tmp_path):
    """--layer-depth 0 is the model itself; 2 the blocks, with the shallower leaves beside them.
    The CLI's table and markdown print backward as '-', never 0.000."""
    raw = {name: ms / 2 for name, ms in _module_ms(_events(INFERENCE)).items()}
    _, top = _breakdown(INFERENCE, layer_depth=0)
    assert [r.name for r in top.rows] == ["TinyViT_0"]
    assert top.rows[0].forward_ms == pytest.approx(raw["TinyViT_0"], rel=0.05)
    _, deep = _breakdown(INFERENCE, layer_depth=2)
    assert [r.name for r in deep.rows] == ["Conv2d_0", "Block_0", "Block_1", "LayerNorm_4", "Linear_8"]
    for row in deep.rows:
        assert row.forward_ms == pytest.approx(raw[row.name], rel=0.05), row.name
    for fmt in ("table", "markdown"):
        result = CliRunner().invoke(cli, ["breakdown", str(INFERENCE), "--layers", "-q", "--format", fmt,
                                          "--layer-depth", "2"])
        assert result.exit_code == 0, result.output
        line = next(line for line in result.output.splitlines() if "Block_0" in line)
        cells = [c.strip() for c in line.replace("│", "|").split("|") if c.strip()]
        assert cells[1] == f"{deep.row('Block_0').forward_ms:.3f}" and cells[2] == "-", line
        assert "0.000" not in next(line for line in result.output.splitlines() if "outside layers" in line)
    bad = CliRunner().invoke(cli, ["breakdown", str(INFERENCE), "--layers", "--layer-depth", "-1"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_step_marker_splits_a_modules_forward_backward_cycles_into_steps():
    """A training trace with no ProfilerStep and no optimizer: --step-marker on the model's range
    makes each step run from one call's start to the next's (4 calls: 3 steps). Per layer,
    forward within 5 % of the raw ranges of the first 3 calls, and backward linked (AddmmBackward0
    to the Linear layers); layers plus outside are each phase."""
    events = _events(TRAINING)
    starts = sorted(e["ts"] for e in events if e["name"] == MODULE + "Sequential_0")
    run, lb = _breakdown(TRAINING, step_marker=MODULE + "Sequential_0")
    steps = run.timeline.steps
    assert len(starts) == 4 and len(steps) == 3
    for step, (lo, hi) in zip(steps, zip(starts, starts[1:])):
        assert (step.start_us, step.end_us) == pytest.approx((lo, hi), abs=1e-3)
    raw = {name: ms / 3 for name, ms in _module_ms(events, slice(0, 3)).items()}
    assert [r.name for r in lb.rows] == ["Linear_0", "ReLU_0", "Linear_1", "CrossEntropyLoss_0"]
    for row in lb.rows:
        assert row.forward_ms == pytest.approx(raw[row.name], rel=0.05), row.name
    assert lb.row("Linear_0").backward_ms > 0 and lb.row("Linear_1").backward_ms > 0
    assert lb.unmeasured == []
    for phase in ("forward", "backward"):
        assert sum(r.ms(phase) for r in lb.rows) + lb.outside_ms(phase) == pytest.approx(
            lb.phase_ms[phase], abs=1e-5)  # each figure rounded to 1 ns


def _spans(*spans):
    return {"host/1/1": [(float(s), float(e), name) for s, e, name in spans]}


def test_module_depth_on_literal_ranges():
    """DistributedDataParallel_0 (0-100) > Net_0 (0-90) > conv 0-40, fc 50-90 > Linear_0 55-60;
    a loss after it at 100-110, on depth 0. The default passes the one-module level (Net_0 alone
    at depth 1) down to depth 2; the loss, a leaf at depth 0, stays a layer at every depth."""
    ranges = _spans((0, 100, "DDP_0"), (0, 90, "Net_0"), (0, 40, "conv"), (50, 90, "fc"),
                    (55, 60, "Linear_0"), (100, 110, "loss"))
    depths = module_depths(ranges)["host/1/1"]
    assert [d for d, _ in depths] == [0, 1, 2, 2, 3, 0]
    assert [parent for _, parent in depths] == [True, True, False, True, False, False]
    assert default_depth(ranges, module_depths(ranges)) == 2
    names = lambda depth: [n for _, _, n in at_depth(ranges, depth)[0]["host/1/1"]]
    assert at_depth(ranges, None)[1] == 2
    assert names(None) == ["conv", "fc", "loss"]
    assert names(0) == ["DDP_0", "loss"]
    assert names(3) == ["conv", "Linear_0", "loss"]
    # Two modules on depth 0 (a model and its loss): their children, the loss kept as it is.
    flat = _spans((0, 50, "Net_0"), (0, 20, "a"), (20, 50, "b"), (60, 70, "CrossEntropyLoss_0"))
    assert [n for _, _, n in at_depth(flat, None)[0]["host/1/1"]] == ["a", "b", "CrossEntropyLoss_0"]


def test_forward_backward_cycles_without_a_marker_are_steps_at_the_models_calls():
    """The same trace with no --step-marker: no longer one cold window. By hand from the file,
    Sequential_0's calls start 247.0, 1716.8, 10674.9 and 11109.7 µs after the first event and
    the last backward op ends at 11437.9: the first call's 1.470 ms is warm-up, then 8.958,
    0.435 and 0.328 ms (the last to its backward's end). The suggested marker keeps the first."""
    events = _events(TRAINING)
    starts = sorted(e["ts"] for e in events if e["name"] == MODULE + "Sequential_0")
    run, _ = _breakdown(TRAINING)
    steps = run.timeline.steps
    assert len(steps) == 3
    assert [s.dur_us / 1000 for s in steps] == pytest.approx([8.958, 0.435, 0.328], abs=1e-3)
    for step, (lo, hi) in zip(steps, zip(starts[1:], starts[2:])):
        assert (step.start_us, step.end_us) == pytest.approx((lo, hi), abs=1e-3)
    note = next(n for n in run.timeline.notes if n.startswith("no step markers"))
    assert "the first (1.470 ms) left out as warm-up (--step-marker 'nn.Module: Sequential_0' keeps it)" in note
    marked, _ = _breakdown(TRAINING, step_marker=MODULE + "Sequential_0")
    assert marked.timeline.steps[0].dur_us / 1000 == pytest.approx(1.470, abs=1e-3)


SHAPES = FOREIGN / "module_shapes"


@pytest.fixture(scope="module")
def shaped():
    return _breakdown(SHAPES)


def test_a_modules_three_cycles_are_two_steps_after_warm_up(shaped):
    """Net_0's calls at 252.2, 7513.5 and 9232.0 µs (README; its loss module is called as often,
    later): the first cycle (7.261 ms) is warm-up, then 1.718 ms to the third call and 1.112 ms
    from it to its backward's end (the last AccumulateGrad node ends at 10343.7 µs)."""
    run, _ = shaped
    assert [s.dur_us / 1000 for s in run.timeline.steps] == pytest.approx([1.718, 1.112], abs=2e-3)
    assert any("the first (7.261 ms) left out as warm-up (--step-marker 'nn.Module: Net_0' keeps it)" in n
               for n in run.timeline.notes)


def test_layer_flops_come_from_the_matrix_products_input_dims(shaped):
    """Per step, by hand from the README's shapes (2·M·K·N): Linear_0 forward 2·64·256·512 =
    16,777,216, backward its weight gradient alone 2·512·64·256 = 16,777,216; Linear_1 forward
    2·64·512·10 = 655,360, backward 2 × 655,360 (input and weight gradients)."""
    _, lb = shaped
    flops = {r.name: (r.forward_gflop, r.backward_gflop) for r in lb.rows}
    assert flops == {"Linear_0": (pytest.approx(0.016777, abs=1e-6), pytest.approx(0.016777, abs=1e-6)),
                     "Linear_1": (pytest.approx(0.000655, abs=1e-6), pytest.approx(0.001311, abs=1e-6)),
                     "CrossEntropyLoss_0": (None, None)}  # no matrix product: no FLOPs counted
    assert any("from their Input Dims (record_shapes)" in n for n in lb.notes)
    # Without record_shapes (the training fixture): said so, no FLOPs.
    _, plain = _breakdown(TRAINING)
    assert all(r.forward_gflop is None for r in plain.rows)
    assert any("no layer shapes (record_shapes), so no FLOPs" in n for n in plain.notes)
