"""Phases and steps of traces gapscope did not mark (issue 19): the user's own record_function
ranges first (and --phase), the batch's H2D copy in data_load, blocking copies named, traces
without step markers (--step-marker, else one window), and a last step the profiler cut off."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.events.phase_rules import annotation_phase
from gapscope.analysis.events.timeline import phase_timeline
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, KERNEL, MEMCPY, RUNTIME, STEP, Event, Trace
from gapscope.analysis.events.trace_rules import TraceRules, name_pattern, parse_phase
from gapscope.analysis.measures.blocking import blocking_calls, blocking_notes
from gapscope.analysis.model.run import load_run, reading_rules
from gapscope.analysis.readers.torch_trace import read_torch_trace
from gapscope.analysis.results.breakdown import breakdown, breakdown_from_trace
from gapscope.cli import cli
from gapscope.profilers.errors import GapscopeInputError

FOREIGN = Path(__file__).parent / "fixtures" / "foreign"
ANNOTATED = FOREIGN / "annotated"        # README.md beside each says how it was made
NO_MARKERS = FOREIGN / "no_markers"
TRUNCATED = FOREIGN / "truncated_step"
BATCH_COPY = FOREIGN / "batch_copy"


def _host(name, kind, start, dur, **fields) -> Event:
    """An event on the one host thread of the hand-made traces below."""
    return Event(name, kind, start, dur, "host/1/1", **fields)


@pytest.fixture
def runner():
    return CliRunner()


def _json(runner, *args) -> dict:
    result = runner.invoke(cli, ["breakdown", *map(str, args), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --- the user's own ranges come first ---------------------------------------------------------

def test_annotated_forward_is_the_range_and_the_blocking_copy_stays_in_its_own_range():
    run = load_run(ANNOTATED)
    result = breakdown(run)
    result.self_check()
    assert [s.step for s in result.steps] == [3, 4]
    for step in result.steps:
        # forward is the `## forward ##` range (100 us), not data end .. first backward op (227 us).
        assert step.phase_ms["forward"] == pytest.approx(0.100, rel=0.01)
        assert step.phase_ms == pytest.approx({"data_load": 0.050, "forward": 0.100, "backward": 0.250,
                                               "optimizer": 0.150, "other": 0.450})
    assert result.phase_sources == {"data_load": "framework markers", "forward": "annotated",
                                    "backward": "annotated", "optimizer": "annotated"}
    # The 147 us blocking aten::to inside `## sparse_data_dist ##` (before forward) is other's.
    assert [run.timeline.phase_at(i, start) for i, start in enumerate((1070.0, 2070.0))] == ["other"] * 2
    (copy,) = blocking_calls(run.trace, run.timeline)
    assert (copy.what, copy.phase, copy.count_per_step) == ("blocking copy aten::to", "other", 1)
    assert copy.ms_per_step == pytest.approx(0.147)
    assert any("blocking copy aten::to 0.147 ms per step in other" in n for n in result.notes)
    assert any("record_function" in n and "forward, backward, optimizer" in n for n in result.notes)


def test_phase_option_names_a_range_of_the_users_own(runner):
    # A phase comes from its best origin alone: named by --phase, data_load is that range (the
    # DataLoader's range is a framework marker) ...
    out = _json(runner, ANNOTATED, "--phase", "data_load=## sparse_data_dist ##")
    assert out["phases"]["data_load"]["ms"] == pytest.approx(0.200)
    # ... unless the option names the loader's range too: 50 + 200 us.
    out = _json(runner, ANNOTATED, "--phase", "data_load=## sparse_data_dist ##",
                "--phase", "data_load=enumerate(DataLoader)*")
    assert out["phases"]["data_load"]["ms"] == pytest.approx(0.250)
    assert out["phases"]["other"]["ms"] == pytest.approx(0.250)
    assert out["phase_sources"]["data_load"] == "annotated"
    assert any("blocking copy aten::to 0.147 ms per step in data_load" in n for n in out["notes"])
    # A glob: `*` any text; the brackets of a name are plain characters.
    out = _json(runner, ANNOTATED, "--phase", "forward=## s*dist ##")
    assert out["phases"]["forward"]["ms"] == pytest.approx(0.300)
    assert not any("--phase" in n for n in out["notes"])
    # A pattern that changed nothing is said: it matched no name, or an earlier one took all.
    out = _json(runner, ANNOTATED, "--phase", "forward=## fwd ##", "--phase", "data_load=## s*",
                "--phase", "optimizer=## sparse_data_dist ##")
    assert "--phase forward='## fwd ##' matched no name in the trace" in out["notes"]
    assert ("--phase optimizer='## sparse_data_dist ##' changed nothing: every name it matched was "
            "taken by an earlier --phase ('## s*')") in out["notes"]


def test_table_marks_annotated_phases(runner):
    result = runner.invoke(cli, ["breakdown", str(ANNOTATED), "--wide"])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if "│" in line}
    assert "Ra" in rows["forward"] and "Ra" not in rows["data_load"]
    assert "a annotated (the trace's own record_function ranges)" in " ".join(result.stdout.split())


def test_option_reaches_the_runs_of_compare_and_trace(runner, tmp_path):
    result = runner.invoke(cli, ["compare", str(ANNOTATED), str(ANNOTATED / "worker0.1700000000000.pt.trace.json"),
                                 "--format", "json", "--phase", "data_load=## sparse_data_dist ##"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [r["breakdown"]["phases"]["data_load"]["ms"] for r in runs] == pytest.approx([0.200, 0.200])
    out = tmp_path / "a.trace.json"
    result = runner.invoke(cli, ["trace", str(NO_MARKERS), "--out", str(out), "--step-marker", "train_step"])
    assert result.exit_code == 0, result.output
    steps = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "gapscope.step"]
    assert [(e["ts"], e["dur"]) for e in steps] == [(100, 500), (700, 500)]


def test_option_reaches_the_workers_that_read_a_jobs_ranks(runner, tmp_path, monkeypatch):
    text = next(ANNOTATED.glob("*.pt.trace.json")).read_text()
    for rank in (0, 1):
        info = json.dumps({"backend": "nccl", "rank": rank, "world_size": 2})
        (tmp_path / f"worker{rank}.1700000000000.pt.trace.json").write_text(
            text.replace('"traceEvents"', f'"distributedInfo": {info},\n"traceEvents"', 1))
    monkeypatch.setenv("GAPSCOPE_JOB_WORKERS", "2")  # a process pool, not this process
    out = _json(runner, tmp_path, "--phase", "data_load=## sparse_data_dist ##")
    assert out["job"]["decomposition_ms"]["data_load"] == pytest.approx(0.200)   # not 0.050


def test_real_torch_loop_with_its_own_ranges(tmp_path):
    """torch.profiler on a real loop that names its phases the TorchRec way: each step's forward
    is its `## forward ##` range, and the ProfilerStep the schedule leaves open at the end
    (it begins at the last prof.step() and ends with the profiler) is left out."""
    import torch
    from torch import nn
    from torch.profiler import record_function
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = DataLoader(TensorDataset(torch.randn(160, 32), torch.randint(0, 4, (160,))), batch_size=32)
    path = tmp_path / "loop.pt.trace.json"
    # Active past the loop's end: the profiler stops in the step the last prof.step() began.
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=0, warmup=1, active=10),
                                on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for inputs, targets in data:
            with record_function("## forward ##"):
                loss = nn.functional.cross_entropy(model(inputs), targets)
            with record_function("## backward ##"):
                loss.backward()
            with record_function("## optimizer ##"):
                optimizer.step()
                optimizer.zero_grad()
            prof.step()
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    ranges = sorted((e["ts"], e["dur"]) for e in events if e["name"] == "## forward ##")
    steps = sorted(e["name"] for e in events if e["name"].startswith("ProfilerStep#"))
    result = breakdown(load_run(path))
    result.self_check()
    assert result.phase_sources == {"data_load": "framework markers", "forward": "annotated",
                                    "backward": "annotated", "optimizer": "annotated"}
    assert len(result.steps) == len(ranges) == 4 and len(steps) == 5   # #1-#4, and #5 left open
    assert [s.phase_ms["forward"] for s in result.steps] == pytest.approx(
        [dur / 1000 for _, dur in ranges], rel=0.01)
    assert any(f"last step {steps[-1]} left out" in n for n in result.notes)


@pytest.mark.parametrize("name, phase", [
    ("forward", "forward"), ("## forward ##", "forward"), ("Forward", "forward"),
    ("## backward ##", "backward"), ("## optimizer ##", "optimizer"), ("## zero_grad ##", "optimizer"),
    ("data_load", "data_load"), ("dataloader", "data_load"), ("## copy_batch_to_gpu ##", "data_load"),
    ("[Strategy]SingleDeviceStrategy.training_step", "forward"),
    ("[pl][profile][Strategy]DDPStrategy.backward", "backward"),
    ("[pl][profile][LightningModule]BoringModel.optimizer_step", "optimizer"),
    ("[LightningModule]BoringModel.optimizer_zero_grad", "optimizer"),
    ("[pl][profile][_TrainingEpochLoop].train_dataloader_next", "data_load"),
    ("[Strategy]SingleDeviceStrategy.batch_to_device", "data_load"),
    ("## sparse_data_dist ##", None), ("aten::linear", None), ("forward_hook", None),
    ("[Callback]ModelCheckpoint.on_train_batch_end", None), ("run_training_batch", None),
    ("[Strategy]SingleDeviceStrategy.validation_step", None),
])
def test_common_annotation_names(name, phase):
    assert annotation_phase(name) == phase


def test_lightning_optimizer_step_holds_the_closure():
    """Lightning's optimizer_step runs training_step and backward inside it: those instants are
    forward's and backward's, the rest of it the optimizer's."""
    def ann(name, start, dur):
        return Event("[pl][profile]" + name, ANNOTATION, start, dur, "host/1/1")
    trace = Trace("torch", "lightning", [
        _host("ProfilerStep#0", STEP, 0, 1000, step_num=0),
        ann("[_TrainingEpochLoop].train_dataloader_next", 0, 90),
        ann("[LightningModule]M.optimizer_step", 100, 800),
        ann("[Strategy]SingleDeviceStrategy.training_step", 150, 250),
        ann("[Strategy]SingleDeviceStrategy.backward", 420, 380)])
    (step,) = breakdown_from_trace(trace).steps
    assert step.phase_ms == pytest.approx({"data_load": 0.090, "forward": 0.250, "backward": 0.380,
                                           "optimizer": 0.170, "other": 0.110})


def test_gapscope_marks_come_before_annotations():
    trace = Trace("torch", "both", [
        _host("ProfilerStep#0", STEP, 0, 100, step_num=0),
        _host("## forward ##", ANNOTATION, 10, 60),
        _host("gapscope/forward", ANNOTATION, 20, 30)])
    result = breakdown_from_trace(trace)
    assert result.phase_sources["forward"] == "gapscope marks"
    assert result.steps[0].phase_ms["forward"] == pytest.approx(0.030)


def test_name_patterns_and_phase_option_parsing():
    assert name_pattern("[LightningModule]*.training_step").fullmatch("[LightningModule]M.training_step")
    assert not name_pattern("[ab]").fullmatch("a")
    assert name_pattern("step?").fullmatch("step1") and not name_pattern("step?").fullmatch("step12")
    assert parse_phase("forward=## fwd ## = x") == ("forward", "## fwd ## = x")
    rules = TraceRules((("data_load", "## sparse*"), ("forward", "## sparse_data_dist ##")))
    assert rules.user_phase("## sparse_data_dist ##") == "data_load"   # the first given wins
    for bad in ("forwrd=x", "forward", "forward=", "other=x"):
        with pytest.raises(GapscopeInputError):
            parse_phase(bad)


@pytest.mark.parametrize("args", [["--phase", "forwrd=## f ##"], ["--phase", "forward"],
                                  ["--step-marker", " "]])
def test_option_mistakes_are_one_line(runner, args):
    result = runner.invoke(cli, ["breakdown", str(ANNOTATED), *args])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gapscope: error: --")


# --- the batch's H2D copy is data_load's -------------------------------------------------------

def test_batch_copy_after_the_loader_is_data_load():
    run = load_run(BATCH_COPY)
    (step,) = breakdown(run).steps
    # data_load: the range (200 us) and both batch copies (50 + 40 us); forward: aten::linear
    # and the copy after it (90 + 30 us), which runs after forward's first op.
    assert step.phase_ms == pytest.approx({"data_load": 0.290, "forward": 0.120, "backward": 0.250,
                                           "optimizer": 0.150, "other": 0.190})
    # The copies' runtime calls (where transfers are placed by time) lie in those phases.
    assert [run.timeline.phase_at(0, t) for t in (215.0, 265.0, 415.0)] == ["data_load", "data_load", "forward"]


def test_copy_that_launches_no_h2d_is_not_data_load():
    """The same loop without the device's memcpy events (a dtype change on the host, say): its
    copies after the loader are forward's, inferred from the data's end."""
    trace = read_torch_trace(next(BATCH_COPY.glob("*.pt.trace.json")))
    host_only = Trace("torch", "no memcpy", [e for e in trace.events if e.kind != MEMCPY])
    (step,) = breakdown_from_trace(host_only).steps
    assert step.phase_ms["data_load"] == pytest.approx(0.200)
    assert step.phase_ms["forward"] == pytest.approx(0.210)   # 50 + 40 + 90 + 30 us


def test_ops_that_start_together_are_ordered_outer_first():
    import numpy as np

    from gapscope.analysis.events.tracks import outer_first
    starts, durs = np.array([5.0, 1.0, 5.0, 3.0, 5.0]), np.array([1.0, 9.0, 4.0, 2.0, 2.0])
    assert outer_first(starts, durs).tolist() == [1, 3, 2, 4, 0]


def test_item_sync_is_named_in_its_phase():
    trace = Trace("torch", "item", [
        _host("ProfilerStep#0", STEP, 0, 1000, step_num=0),
        _host("## forward ##", ANNOTATION, 0, 500),
        _host("aten::item", HOST_OP, 100, 300),
        _host("aten::_local_scalar_dense", HOST_OP, 101, 298),
        _host("cudaMemcpyAsync", RUNTIME, 110, 10, correlation=5),
        _host("cudaStreamSynchronize", RUNTIME, 121, 270),
        _host("cudaDeviceSynchronize", RUNTIME, 600, 20),
        Event("volta_sgemm", KERNEL, 0, 390, "device/0/7")])
    found = blocking_calls(trace, phase_timeline(trace))
    assert [(b.what, b.phase) for b in found] == [("sync aten::item", "forward"),
                                                  ("sync cudaDeviceSynchronize", "other")]
    assert [b.ms_per_step for b in found] == pytest.approx([0.300, 0.020])
    # The note names waits of 5 % of the step or more: not the 20 us sync.
    assert blocking_notes(trace, phase_timeline(trace)) == [
        "the host waits for the device: sync aten::item 0.300 ms per step in forward"]


# --- no step markers ---------------------------------------------------------------------------

def test_trace_without_step_markers_takes_iterations_between_optimizer_steps():
    result = breakdown(load_run(NO_MARKERS))
    result.self_check()
    (step,) = result.steps  # [560, 1160]: the first iteration, up to 560, is warm-up
    assert step.step_ms == pytest.approx(0.600)
    assert step.phase_ms == pytest.approx({"data_load": 0.100, "forward": 0.090, "backward": 0.140,
                                           "optimizer": 0.100, "other": 0.170})
    assert any("1 iteration(s) taken between optimizer steps" in n and "the first (0.510 ms" in n
               for n in result.notes)
    assert not any(n.startswith("warning:") for n in result.notes)


def test_trace_without_step_markers_or_optimizer_steps_is_one_window_with_a_warning(tmp_path):
    doc = json.loads(next(NO_MARKERS.glob("*.pt.trace.json")).read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith("Optimizer.step#")]
    path = tmp_path / "worker0.pt.trace.json"
    path.write_text(json.dumps(doc))
    result = breakdown(load_run(path))
    result.self_check()
    (step,) = result.steps
    assert step.step_ms == pytest.approx(1.250)   # 50 .. 1300 us
    assert step.phase_ms == pytest.approx({"data_load": 0.200, "forward": 0.0, "backward": 0.280,
                                           "optimizer": 0.0, "other": 0.770})
    warnings = [n for n in result.notes if n.startswith("warning:")]
    assert len(warnings) == 1 and "no step markers" in warnings[0] and "one step" in warnings[0]
    assert "--step-marker" in warnings[0] and "1.250 ms" in warnings[0]


@pytest.mark.parametrize("marker", ["train_step", "train_*"])
def test_step_marker_makes_each_range_a_step(runner, marker):
    out = _json(runner, NO_MARKERS, "--step-marker", marker)
    assert out["steps"] == 2 and out["step_ms"]["mean"] == pytest.approx(0.500)
    assert {p: out["phases"][p]["ms"] for p in out["phases"]} == pytest.approx(
        {"data_load": 0.100, "forward": 0.090, "backward": 0.140, "optimizer": 0.100, "other": 0.070})
    assert out["phase_sources"]["forward"] == "inferred"
    assert not any(n.startswith("warning:") for n in out["notes"])


def test_step_marker_overrides_profiler_steps_and_counts_nested_ones_once():
    trace = Trace("torch", "nested", [
        _host("ProfilerStep#0", STEP, 0, 1000, step_num=0),
        _host("iteration#7", ANNOTATION, 0, 400),
        _host("iteration#inner", ANNOTATION, 10, 100),
        _host("iteration#8", HOST_OP, 500, 300)])
    timeline = phase_timeline(trace, TraceRules(step_marker="iteration#*"))
    assert [(s.step_num, s.dur_us) for s in timeline.steps] == [(7, 400), (8, 300)]


def test_step_marker_that_matches_nothing_falls_back_to_one_window():
    with reading_rules(TraceRules(step_marker="train_stpe")):
        result = breakdown(load_run(NO_MARKERS))
    assert len(result.steps) == 1
    assert any("no host event matches --step-marker 'train_stpe'" in n for n in result.notes)


def test_trace_with_device_events_only_is_one_window_of_its_device_events(runner, tmp_path):
    path = tmp_path / "gpu_only.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "volta_sgemm", "pid": 0, "tid": 7, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "kernel", "name": "volta_sgemm", "pid": 0, "tid": 7, "ts": 30, "dur": 5}]}))
    result = runner.invoke(cli, ["breakdown", str(path), "--step-marker", "train_step",
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["steps"] == 1 and doc["step_ms"]["mean"] == pytest.approx(0.025)
    (note,) = [n for n in doc["notes"] if "whole trace" in n]
    assert "no host event matches --step-marker 'train_step'" in note
    assert "0.025 ms of device events only" in note


def test_trace_without_any_event_is_one_line(runner, tmp_path):
    path = tmp_path / "empty.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}}]}))
    result = runner.invoke(cli, ["breakdown", str(path), "--step-marker", "train_step"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("gapscope: error:") and "holds no complete events" in line, line


# --- a last step the profiler cut off ----------------------------------------------------------

def test_truncated_last_step_is_left_out_with_a_note():
    result = breakdown(load_run(TRUNCATED))
    result.self_check()
    assert [s.step for s in result.steps] == [10]
    assert result.step_stats()["mean"] == pytest.approx(9.288)   # not (9.288 + 0.049) / 2
    (note,) = [n for n in result.notes if "left out" in n]
    assert "ProfilerStep#11" in note and "0.049 ms" in note and "backward or optimizer" in note


def _steps(*spec):
    """Steps of (start, dur, has_backward) with a backward op and an optimizer range where asked."""
    events = []
    for i, (start, dur, whole) in enumerate(spec):
        events.append(_host(f"ProfilerStep#{i}", STEP, start, dur, step_num=i))
        if whole:
            events.append(_host("autograd::engine::evaluate_function: AddmmBackward0", HOST_OP,
                                start + dur * 0.2, dur * 0.3))
            events.append(_host("Optimizer.step#SGD.step", ANNOTATION, start + dur * 0.6, dur * 0.3))
        else:
            events.append(_host("aten::linear", HOST_OP, start, dur * 0.5))
    return Trace("torch", "steps", events)


@pytest.mark.parametrize("spec, kept", [
    (((0, 1000, True), (1000, 1000, True), (2000, 40, False)), 2),   # cut: short, no backward
    (((0, 1000, True), (1000, 1000, True), (2000, 400, True)), 3),   # a small last batch: whole
    (((0, 1000, True), (1000, 1000, True), (2000, 600, False)), 3),  # not under half the median
    (((0, 1000, False), (1000, 1000, False), (2000, 40, False)), 3),  # no step shows backward
    (((0, 1000, True), (1000, 40, False), (1040, 1000, True)), 3),   # a short step not last
])
def test_cut_off_rule(spec, kept):
    assert len(phase_timeline(_steps(*spec)).steps) == kept


DDP_FORWARD = FOREIGN / "ddp_forward"


@pytest.mark.parametrize("wrapper,forward_ms,origin", [
    ("DistributedDataParallel.forward", 0.45, "framework markers"),
    ("FullyShardedDataParallel.forward", 0.45, "framework markers"),
    ("SomeOtherWrapper.forward", 0.2, "inferred")])
def test_a_distributed_wrappers_range_is_forward_with_the_loss_after_it(tmp_path, wrapper, forward_ms, origin):
    text = next(DDP_FORWARD.glob("*.pt.trace.json")).read_text().replace("DistributedDataParallel.forward", wrapper)
    path = tmp_path / "rank0.pt.trace.json"
    path.write_text(text)
    result = breakdown(load_run(path))
    assert result.phases["forward"].ms == pytest.approx(forward_ms)
    assert result.phase_sources["forward"] == origin


ITERATIONS = FOREIGN / "optimizer_iterations"


def _optimizer_starts(folder: Path) -> list[float]:
    doc = json.loads(next(folder.glob("*.pt.trace.json")).read_text())
    return [e["ts"] for e in doc["traceEvents"] if e["name"].startswith("Optimizer.step#")]


@pytest.mark.parametrize("side", ["nw0", "nw4"])
def test_iterations_without_markers_match_optimizer_to_optimizer_times(side):
    """Each iteration within 2 % of the time from one optimizer step to the next (the truth, read
    straight from the trace), the first (cold) one left out."""
    starts = _optimizer_starts(ITERATIONS / side)
    truth = [(b - a) / 1000 for a, b in zip(starts, starts[1:])]
    result = breakdown(load_run(ITERATIONS / side))
    result.self_check()
    assert len(result.steps) == len(truth) == 5
    for step, want in zip(result.steps, truth):
        assert step.step_ms == pytest.approx(want, rel=0.02)


def test_compare_of_traces_without_markers_names_the_faster_side(runner):
    result = runner.invoke(cli, ["compare", str(ITERATIONS / "nw0"), str(ITERATIONS / "nw4"), "--format", "json"])
    assert result.exit_code == 0, result.output
    pair = json.loads(result.stdout)["comparisons"][0]
    assert pair["b_step_ms"] / pair["a_step_ms"] == pytest.approx(1.2 / 1.6)  # nw4 1.33x faster
    assert not any("no steps" in w for w in json.loads(result.stdout)["warnings"])


def test_compare_of_single_window_traces_says_so_first(runner, tmp_path):
    """Without optimizer steps either, each side is one window: the verdict's first line says so,
    as does the first of the JSON warnings."""
    for side in ("nw0", "nw4"):
        doc = json.loads(next((ITERATIONS / side).glob("*.pt.trace.json")).read_text())
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith("Optimizer.step#")]
        (tmp_path / side).mkdir()
        (tmp_path / side / "worker0.pt.trace.json").write_text(json.dumps(doc))
    args = ["compare", str(tmp_path / "nw0"), str(tmp_path / "nw4")]
    table = runner.invoke(cli, args)
    assert table.exit_code == 0, table.output
    first = table.stdout.splitlines()[0]
    assert first.startswith("warning: nw0 has no steps: its whole trace is analysed as one step")
    doc = json.loads(runner.invoke(cli, args + ["--format", "json"]).stdout)
    assert doc["warnings"][0].startswith("nw0 has no steps") and doc["warnings"][1].startswith("nw4 has no steps")
    markdown = runner.invoke(cli, args + ["--format", "markdown"]).stdout
    assert markdown.startswith("**warning: nw0 has no steps")


def test_two_trace_files_of_one_name_are_labelled_by_their_folders(runner):
    files = [str(next((ITERATIONS / side).glob("*.pt.trace.json"))) for side in ("nw0", "nw4")]
    assert Path(files[0]).name == Path(files[1]).name
    doc = json.loads(runner.invoke(cli, ["compare", *files, "--format", "json"]).stdout)
    name = Path(files[0]).name
    pair = doc["comparisons"][0]
    assert [pair["a_label"], pair["b_label"]] == [f"nw0/{name}", f"nw4/{name}"]


def test_keras_optimizer_ops_between_backward_ops_are_one_boundary():
    """A TF optimizer runs one op per variable: the ops of one update, with no backward op
    between them, end one iteration together (three updates: two iterations of 1000 µs)."""
    events = []
    for base in (0, 1000, 2000):
        events += [_host("sequential/dense/MatMul:MatMul", HOST_OP, base + 100, 200),
                   _host("gradient_tape/sequential/dense/MatMul_1:MatMul", HOST_OP, base + 400, 300),
                   _host("sgd/AssignSubVariableOp:AssignSubVariableOp", HOST_OP, base + 750, 50),
                   _host("sgd/AssignSubVariableOp_1:AssignSubVariableOp", HOST_OP, base + 850, 50)]
    timeline = phase_timeline(Trace("xplane", "keras", events))
    assert [(s.start_us, s.dur_us) for s in timeline.steps] == [(900, 1000), (1900, 1000)]
    assert timeline.phase_ms(0)["optimizer"] == pytest.approx(0.1)


@pytest.fixture(scope="module")
def stepless_torch_trace(tmp_path_factory):
    import user_loops
    return user_loops.torch_profile_without_steps(tmp_path_factory.mktemp("stepless"))


def test_a_real_loop_without_prof_step_is_cut_at_its_optimizer_steps(stepless_torch_trace):
    """torch.profiler around six iterations, no prof.step(): five iterations, each from one
    Optimizer.step's end to the next's, the first left out as warm-up; every phase found."""
    doc = json.loads((stepless_torch_trace / "worker0.pt.trace.json").read_text())
    ends = sorted(e["ts"] + e["dur"] for e in doc["traceEvents"]
                  if e.get("ph") == "X" and e["name"].startswith("Optimizer.step#"))
    assert len(ends) == 6
    result = breakdown(load_run(stepless_torch_trace))
    result.self_check()
    assert [s.step_ms for s in result.steps] == pytest.approx(
        [(b - a) / 1000 for a, b in zip(ends, ends[1:])], abs=1e-6)
    assert result.unidentified_phases == []
    assert any("5 iteration(s) taken between optimizer steps" in n for n in result.notes)


def test_a_phase_rule_the_timers_cannot_use_is_said(fixtures_dir):
    """Issue 47 item 9: `--source timers --phase ...` was ignored without a word (a trace's
    unmatched pattern is said: 'matched no name in the trace')."""
    run = fixtures_dir / "cnn_cpu" / "torch"
    timers = _json(CliRunner(), str(run), "--source", "timers", "--phase", "forward=zzz",
                   "--step-marker", "Step*")
    assert ("--phase forward='zzz', --step-marker 'Step*' not used: the step timers' phases are "
            "gapscope's own marks and no trace was read (they apply to a trace's names)") in timers["notes"]
    traced = _json(CliRunner(), str(run), "--phase", "forward=zzz")
    assert "--phase forward='zzz' matched no name in the trace" in traced["notes"]
    assert not [n for n in _json(CliRunner(), str(run), "--source", "timers")["notes"] if "not used" in n]
