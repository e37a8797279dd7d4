"""Memory beside time on real torch and Keras runs: per-phase net change of a known tensor, a
planted leak's creep, the seed CNN's memory in the breakdown, a Keras activation's size."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.events.memory_event import MemoryEvent
from gapscope.analysis.measures.memory.creep import creep
from gapscope.analysis.measures.memory.levels import Levels
from gapscope.analysis.model.run import load_run
from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.memory.figures import MB
from gapscope.cli import cli

ROOT = Path(__file__).resolve().parent.parent
KEPT_BYTES = 1 << 20            # the tensor forward allocates and backward frees: 1 MiB
# The leak: a 256-sample batch through Linear(256, 1024), ReLU, Linear(1024, 1); each step's
# loss is kept with its graph (backward with retain_graph), which holds ReLU's output for
# its own backward and the second Linear's (one tensor, 256 x 1024 floats), MSE's input
# (the model's output, 256 x 1 floats) and the loss itself (one float).
LEAK_BATCH, LEAK_WIDTH = 256, 1024
LEAK_BYTES = LEAK_BATCH * LEAK_WIDTH * 4 + LEAK_BATCH * 1 * 4 + 4


def _known_tensor_loop(out: Path, kept_bytes: int = KEPT_BYTES) -> Path:
    import torch

    import gapscope
    weight = torch.ones(16, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=0.01)
    batches = [torch.ones(16) for _ in range(8)]
    with gapscope.capture("memory-known", trace_steps=(3, 7), out=out, warmup_steps=2) as cap:
        for batch in cap.data(batches):
            with cap.phase("forward"):
                kept = torch.ones(kept_bytes // 4)  # float32: exactly kept_bytes
                loss = (weight * batch).sum()
            with cap.phase("backward"):
                loss.backward()
                del kept
            with cap.phase("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            cap.step(loss)
    return cap.run_dir


def _leaking_loop(out: Path) -> Path:
    import torch

    import gapscope
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, LEAK_WIDTH), torch.nn.ReLU(),
                                torch.nn.Linear(LEAK_WIDTH, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = torch.randn(LEAK_BATCH, 256), torch.randn(LEAK_BATCH, 1)
    kept = []  # the leak
    with gapscope.capture("memory-leak", trace_steps=(3, 9), out=out, warmup_steps=2) as cap:
        for inputs, targets in cap.data([(x, y)] * 12):
            with cap.phase("forward"):
                loss = torch.nn.functional.mse_loss(model(inputs), targets)
            with cap.phase("backward"):
                loss.backward(retain_graph=True)
            with cap.phase("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            kept.append(loss)
            cap.step(loss)
    return cap.run_dir


@pytest.fixture(scope="module")
def known_dir(tmp_path_factory):
    return _known_tensor_loop(tmp_path_factory.mktemp("memory_known"))


@pytest.fixture(scope="module")
def known_run(known_dir):
    return breakdown(load_run(known_dir))


@pytest.fixture(scope="module")
def leak_run(tmp_path_factory):
    return breakdown(load_run(_leaking_loop(tmp_path_factory.mktemp("memory_leak"))))


def test_a_tensor_kept_from_forward_to_backward_is_forwards_net_change_and_backwards_release(known_run):
    memory = known_run.memory
    assert memory is not None and memory.source.startswith("torch profiler")
    assert len(memory.steps) == 4  # the window, steps 3..6
    for step in memory.steps:
        # The loss (4 bytes) replaces the last step's; the gradient (64 bytes) lives from
        # backward to the optimizer's zero_grad: within 64 bytes of the tensor either way.
        assert abs(step.net["forward"] - KEPT_BYTES) <= 64, step
        assert abs(step.net["backward"] + KEPT_BYTES) <= 64, step
        assert step.high_water["forward"] - step.start >= KEPT_BYTES
        assert step.peak_allocated - step.start >= KEPT_BYTES
    doc = known_run.to_json_dict()["memory"]
    assert doc["phases"]["forward"]["net_mb"] == pytest.approx(KEPT_BYTES / MB, abs=1e-3)
    assert doc["phases"]["backward"]["net_mb"] == pytest.approx(-KEPT_BYTES / MB, abs=1e-3)
    assert not doc["creep"]["grows"]  # nothing is kept across steps
    assert "allocated and kept" not in (doc["creep_line"] or "")


def test_compare_memory_leads_with_who_keeps_more_at_the_end_of_forward(known_dir, tmp_path):
    twice = _known_tensor_loop(tmp_path, 2 * KEPT_BYTES)  # the same capture, twice the tensor
    result = CliRunner().invoke(cli, ["compare", "--memory", str(known_dir), str(twice)])
    assert result.exit_code in (0, 3), result.output  # 3: the machine was busy (time, not memory)
    first, where, *_ = result.output.splitlines()
    assert first.endswith("holds 2.0x more at the end of forward (activations kept for "
                          f"backward): {2 * KEPT_BYTES / MB:.1f} vs {KEPT_BYTES / MB:.1f} MB"), first
    # Then where: the bigger side's top forward site, the tensor of twice the size.
    assert "allocates most in forward at" in where and f"({2 * KEPT_BYTES / MB:.1f} MB)" in where, where
    doc = json.loads(CliRunner().invoke(cli, ["compare", str(known_dir), str(twice),
                                              "--format", "json"]).stdout)
    (pair,) = doc["comparisons"]
    assert pair["memory"]["figure"] == "forward_net_mb"
    assert pair["memory"]["ratio"] == pytest.approx(2.0, abs=1e-3)
    assert all("memory" in run["breakdown"] for run in doc["runs"])


def test_the_known_tensor_is_the_top_allocation_site_of_forward(known_run):
    (site, *_) = known_run.memory.sites
    assert site["phase"] == "forward" and site["bytes_per_step"] == KEPT_BYTES
    assert "ones" in site["op"] or "empty" in site["op"] or "fill" in site["op"]


def test_a_planted_leak_is_reported_as_creep_of_its_size_a_step(leak_run):
    memory = leak_run.memory
    assert memory.creep is not None and memory.creep.steps == 6
    assert memory.creep.per_step == pytest.approx(LEAK_BYTES, rel=0.01)
    assert memory.creep.significant
    line = memory.creep_line()
    assert line.startswith(f"memory creeps: {LEAK_BYTES / MB:+.2f} MB a step")
    assert any(note.startswith("memory creeps:") for note in leak_run.notes)
    doc = leak_run.to_json_dict()["memory"]["creep"]
    assert doc["grows"] and doc["mb_per_step"] == pytest.approx(LEAK_BYTES / MB, rel=0.01)


def test_the_leak_grows_each_steps_peak_by_its_size(leak_run):
    peaks = [s.peak_allocated for s in leak_run.memory.steps]
    assert all(b - a == pytest.approx(LEAK_BYTES, rel=0.01) for a, b in zip(peaks, peaks[1:]))


def test_levels_follow_the_allocators_own_total_and_fill_in_a_running_sum():
    events = [MemoryEvent(10.0, 100, None, None, "cpu", "host/1/1"),
              MemoryEvent(20.0, 50, None, None, "cpu", "host/1/1"),
              MemoryEvent(30.0, -100, None, None, "cpu", "host/1/1"),
              MemoryEvent(40.0, 10, 1000, 4096, "cpu", "host/1/1")]
    levels = Levels(events)
    assert levels.allocated == [100, 150, 50, 1000]
    assert (levels.at(5.0), levels.at(25.0), levels.at(30.0), levels.at(45.0)) == (0, 150, 150, 1000)
    assert levels.reserved_at(45.0) == 4096 and levels.reserved_at(25.0) is None


def test_creep_is_the_least_squares_slope_with_a_t_interval():
    found = creep([0.0, 1.0, 2.0, 3.0], [10.0, 12.0, 14.0, 16.0])
    assert found.per_step == pytest.approx(2.0) and found.ci95 == pytest.approx((2.0, 2.0))
    noisy = creep([0.0, 1.0, 2.0, 3.0], [10.0, 13.0, 13.0, 16.0])
    # slope 1.8; residuals -0.2, 1.0, -0.8, 0.4: s² = 1.8 / 2, sxx = 5, t(2) = 4.303
    half = 4.303 * (0.9 / 5) ** 0.5
    assert noisy.ci95 == pytest.approx((1.8 - half, 1.8 + half))
    assert creep([1.0], [1.0]) is None


@pytest.fixture(scope="module")
def cnn_run(tmp_path_factory):
    from gapscope.workloads.launch import launch
    from gapscope.workloads.settings import RunSettings
    outcome = launch(RunSettings("cnn", "torch", steps=10, warmup_steps=3, trace_steps=3),
                     tmp_path_factory.mktemp("memory_cnn"))
    assert outcome.status == "complete", outcome.error
    return outcome.run_dir


def test_the_seed_cnn_has_peak_and_per_phase_memory_in_breakdown_and_json(cnn_run):
    rows = (cnn_run / "steps.csv").read_text().splitlines()
    header = rows[0].split(",")
    rss = [float(line.split(",")[header.index("rss_mb")]) for line in rows[1:]]
    assert len(rss) == 10 and all(r > 10 for r in rss)  # a torch process holds far more than 10 MB
    result = CliRunner().invoke(cli, ["breakdown", str(cnn_run), "--format", "json"])
    assert result.exit_code == 0, result.output
    memory = json.loads(result.output)["memory"]
    assert memory["traced_steps"] == 3 and len(memory["per_step"]) == 3
    phases = memory["phases"]
    # Forward keeps the activations for backward, which frees them.
    assert phases["forward"]["net_mb"] > 1 and phases["backward"]["net_mb"] < -1
    assert memory["peak_allocated_mb"] == max(p["high_water_mb"] for p in phases.values()
                                              if p["high_water_mb"] is not None)
    assert memory["rss"]["steps"] >= 1 and memory["rss"]["mean_mb"] == pytest.approx(
        sum(rss[3:]) / len(rss[3:]), rel=0.2)
    # conv1's ReLU output (batch x 26 x 26 x 32 floats) is what conv1 keeps for backward: ReLU's
    # own backward and conv2's read it; the convolution's output before ReLU is freed.
    batch = json.loads((cnn_run / "manifest.json").read_text())["workload_spec"]["batch_size"]
    assert memory["layers_kept_mb"]["conv1"] == pytest.approx(batch * 26 * 26 * 32 * 4 / MB, abs=1e-3)
    assert list(memory["layers_kept_mb"])[:2] == ["conv1", "conv2"]  # in the model's order
    table = CliRunner().invoke(cli, ["breakdown", str(cnn_run), "--wide"])
    assert table.exit_code == 0, table.output
    assert "peak" in table.output and f"{phases['forward']['high_water_mb']:.1f}" in table.output


def test_a_run_recorded_without_memory_events_says_so_in_one_line(cnn_run, tmp_path):
    import gzip
    import shutil
    copy = tmp_path / "run"
    shutil.copytree(cnn_run, copy)
    (trace,) = copy.glob("*.pt.trace.json.gz")
    data = json.loads(gzip.decompress(trace.read_bytes()))
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("name") != "[memory]"]
    trace.write_bytes(gzip.compress(json.dumps(data).encode()))
    memory = breakdown(load_run(copy)).memory
    assert memory.steps == [] and memory.rss is not None
    assert [n for n in memory.notes if "no [memory] events" in n]


_KERAS_LOOP = """
import sys, numpy as np, keras, gapscope
BATCH, WIDTH, INPUTS = {batch}, {width}, {inputs}
model = keras.Sequential([keras.Input((INPUTS,)), keras.layers.Dense(WIDTH, activation="relu"),
                          keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.001), loss="mse")
x, y = np.ones((BATCH * 8, INPUTS), "float32"), np.ones((BATCH * 8, 1), "float32")
cap = gapscope.capture_keras(model, "keras-memory", trace_steps=(3, 6), out=sys.argv[1],
                             warmup_steps=2)
model.fit(x, y, batch_size=BATCH, epochs=1, callbacks=[cap], verbose=0)
print(cap.run_dir)
"""


@pytest.mark.parametrize("allocator", ["onednn", "default", "bfc"])
def test_a_keras_dense_layers_activation_is_forwards_high_water_mark(tmp_path, allocator):
    """Both kinds of CPU, forced: TF runs with oneDNN on AVX-512 Intel CPUs and without it on
    an AVX2 AMD EPYC, whose default CPU allocator records no allocator events: there a line says
    so and how to get them (TF_CPU_ALLOCATOR_USE_BFC, which gives them)."""
    # A narrow input (32 features) leaves the Dense layer's output the one large tensor of
    # forward. TF sizes are what the ops asked for (its allocator's blocks may be larger).
    batch, width, inputs = 256, 1024, 32
    activation = batch * width * 4  # the Dense layer's ReLU output, kept for backward
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3",
           "TF_ENABLE_ONEDNN_OPTS": "1" if allocator == "onednn" else "0"}
    env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
    if allocator == "bfc":
        env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    done = subprocess.run([sys.executable, "-c", _KERAS_LOOP.format(batch=batch, width=width,
                                                                    inputs=inputs),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run = Path(done.stdout.strip().splitlines()[-1])
    assert json.loads((run / "manifest.json").read_text())["versions"]["tf_cpu_allocator"] == allocator
    memory = breakdown(load_run(run)).memory
    if allocator == "default":
        assert memory.source is None and memory.steps == [] and memory.rss is not None
        (note,) = memory.notes
        assert note.startswith("memory: no allocator events: this TensorFlow ran without oneDNN")
        assert "TF_CPU_ALLOCATOR_USE_BFC=true" in note
        table = CliRunner().invoke(cli, ["breakdown", str(run), "--wide"])
        assert table.exit_code == 0 and "ran without oneDNN" in table.output, table.output
        return
    assert memory.source == "TF allocator events" and memory.steps
    for step in memory.steps:
        assert step.net["forward"] == pytest.approx(activation, rel=0.10)
    highs = [step.high_water["forward"] - step.start for step in memory.steps]
    if allocator == "onednn":
        assert highs == pytest.approx([activation] * len(highs), rel=0.10)
    else:
        # Every block recorded: a 1 MB buffer of the step before is at
        # times freed only after this forward began (3 runs in 4 had none here).
        assert min(highs) == pytest.approx(activation, rel=0.10)
        assert all(activation * 0.9 < high < 2 * activation * 1.15 for high in highs)
    large_only = any("only its large blocks" in note for note in memory.notes)
    assert large_only == (allocator == "onednn")
    # The layer's scope in the ops' names says whose activation it is.
    assert memory.layers["dense"] == pytest.approx(activation, rel=0.10)


def test_the_memory_events_are_decoded_with_the_others_in_one_inflation(tmp_path, monkeypatch):
    import gzip

    from gapscope.analysis.readers import safe_files, torch_trace
    # 40,000 events of ~250 bytes: 10 MB, so events straddle the reader's 4 MB chunks (the
    # first, decoded without the memory fields, is decoded again with them); an op between
    # them, and args before the name in some, as other writers order keys.
    events = []
    for i in range(40_000):
        sign = 1 if i % 2 == 0 else -1
        args = {"Total Reserved": 0, "Total Allocated": 4096 * ((i + 1) % 2), "Bytes": sign * 4096,
                "Device Id": -1, "Device Type": 0, "Addr": 1000 + i}
        event = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                 "pid": 7, "tid": 8, "ts": 1000.0 + i, "args": args}
        events.append({"args": args, **{k: v for k, v in event.items() if k != "args"}}
                      if i % 3 == 0 else event)
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 7, "tid": 8,
                       "ts": 1000.0 + i, "dur": 0.5, "args": {"External id": i}})
    path = tmp_path / "t.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}, indent=1).encode()))
    opened = []
    open_stream = safe_files.open_stream
    monkeypatch.setattr(safe_files, "open_stream", lambda p: opened.append(p) or open_stream(p))
    trace = torch_trace.read_torch_trace(path)
    found = trace.metadata["memory_events"]
    assert opened == [path]  # the gzip inflated once, for every event
    assert len(trace.columns) == 40_000 and len(found) == 40_000
    assert sum(e.nbytes for e in found) == 0 and sum(e.nbytes > 0 for e in found) == 20_000
    assert [e.ts_us for e in found] == [1000.0 + i for i in range(40_000)]
    assert {e.track for e in found} == {"host/7/8"} and {e.device for e in found} == {"cpu"}


def test_gapscope_trace_draws_the_allocators_level_as_a_counter_track(cnn_run, tmp_path):
    from gapscope.analysis.readers.torch_trace import read_torch_trace
    (trace,) = cnn_run.glob("*.pt.trace.json.gz")
    events = read_torch_trace(trace).metadata["memory_events"]
    out = tmp_path / "cnn.trace.json"
    result = CliRunner().invoke(cli, ["trace", str(cnn_run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    counters = [e for e in json.loads(out.read_text())["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == len(events) and {c["name"] for c in counters} == {"memory cpu"}
    last = max(events, key=lambda e: e.ts_us)
    assert counters[-1]["args"]["allocated MB"] == pytest.approx(last.allocated / MB)


def test_the_report_has_a_memory_section_with_the_steps_curve(cnn_run, tmp_path):
    from gapscope.analysis.report import write_report
    files = write_report([cnn_run], tmp_path / "report.md")
    text = files.markdown.read_text()
    memory = breakdown(load_run(cnn_run)).memory
    assert "## Where the memory goes" in text and "report-memory.png" in text
    assert f"| {memory.peak_allocated_mb():.1f} |" in text
    assert (tmp_path / "report-memory.png").stat().st_size > 1000
    curve = memory.curve
    assert curve["step"] == memory.steps[-1].step
    assert max(curve["allocated_mb"]) == pytest.approx(memory.steps[-1].peak_allocated / MB, abs=1e-4)
    assert curve["phases"][0][0] == 0.0 and curve["t_ms"][-1] >= curve["phases"][-1][1] - 1e-3


def _x(name: str, cat: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def _mem(ts: float, nbytes: int, total: int) -> dict:
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
            "ts": ts, "args": {"Total Reserved": 0, "Total Allocated": total, "Bytes": nbytes,
                               "Device Id": -1, "Device Type": 0, "Addr": 1}}


def test_hand_made_trace_gives_each_phases_net_change_and_high_water_mark(tmp_path):
    # One step of 100 µs: forward 10-40 (an addmm 12-35 allocates 1000 and 500 bytes, frees
    # the 500), backward 50-90 (allocates 200 at 60, frees forward's 1000 at 70), other the
    # rest (frees the 200 at 95).
    events = [_x("ProfilerStep#1", "user_annotation", 1000, 100),
              _x("gapscope/forward", "user_annotation", 1010, 30), _x("aten::addmm", "cpu_op", 1012, 23),
              _x("gapscope/backward", "user_annotation", 1050, 40),
              _x("AddmmBackward0", "cpu_op", 1055, 30),
              _mem(1015, 1000, 1000), _mem(1020, 500, 1500), _mem(1030, -500, 1000),
              _mem(1060, 200, 1200), _mem(1070, -1000, 200), _mem(1095, -200, 0)]
    path = tmp_path / "hand.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    memory = breakdown(load_run(path)).memory
    (step,) = memory.steps
    assert (step.start, step.end, step.peak_allocated) == (0, 0, 1500)
    assert (step.allocated, step.freed, step.churn) == (1700, 1700, 1700)
    assert step.net == {"data_load": 0, "forward": 1000, "backward": -800, "optimizer": 0, "other": -200}
    # A phase's mark: the level it began at, then what its own events reached.
    assert (step.high_water["forward"], step.high_water["backward"], step.high_water["other"]) == (1500, 1200, 0)
    assert step.after_forward == 1000
    (site, backward_site) = memory.sites
    assert (site["op"], site["phase"], site["bytes_per_step"]) == ("aten::addmm", "forward", 1500)
    assert (backward_site["op"], backward_site["phase"]) == ("AddmmBackward0", "backward")


def test_an_activation_backward_frees_is_kept_though_a_forward_scoped_op_runs_after(tmp_path):
    # TF's executor runs forward-scoped ops (metrics) while backward runs: forward's last range
    # (72-80) ends after backward (50-70) freed the layer's activation (addr 7, at 60). Kept
    # is what backward found held: the 1000 bytes, not the 500 freed inside forward (addr 8).
    def mem(ts, nbytes, total, addr):
        event = _mem(ts, nbytes, total)
        event["args"]["Addr"] = addr
        return event
    events = [_x("ProfilerStep#1", "user_annotation", 1000, 100),
              _x("gapscope/forward", "user_annotation", 1010, 30),
              _x("gapscope_layer/dense", "user_annotation", 1012, 23),
              mem(1015, 1000, 1000, 7), mem(1020, 500, 1500, 8), mem(1030, -500, 1000, 8),
              _x("gapscope/backward", "user_annotation", 1050, 20), mem(1060, -1000, 0, 7),
              _x("gapscope/forward", "user_annotation", 1072, 8)]
    path = tmp_path / "late.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    memory = breakdown(load_run(path)).memory
    assert memory.layers == {"dense": 1000.0}


def test_a_timers_breakdown_gives_the_rss_without_reading_the_trace(cnn_run):
    run = load_run(cnn_run)
    memory = breakdown(run, "timers").memory
    assert "trace" not in run.__dict__  # the cached property was never read
    assert memory.steps == [] and memory.source is None
    unprofiled = [r for r in run.rows if r["step"] >= run.warmup_steps and not r["traced"]]
    assert memory.rss["steps"] == len(unprofiled)
    assert memory.rss["peak_mb"] == max(r["rss_mb"] for r in unprofiled)


def test_the_memory_gap_names_the_layers_whose_kept_activations_differ_most():
    from gapscope.analysis.measures.memory.phase_memory import StepMemory
    from gapscope.analysis.results.memory.figures import MemoryFigures
    from gapscope.analysis.results.memory.gap import memory_gap
    from gapscope.analysis.results.records import Breakdown, PhaseSource

    def run(label: str, forward: int, layers: dict[str, int]) -> Breakdown:
        step = StepMemory(0, 3 * forward, None, 0, 0, forward, forward,
                          net={"data_load": 0, "forward": forward, "backward": -forward,
                               "optimizer": 0, "other": 0})
        figures = MemoryFigures("hand", "cpu", [step], layers={k: float(v) for k, v in layers.items()})
        return Breakdown(PhaseSource.TIMERS, [], [1.0], {}, label=label, memory=figures)

    a = run("torch", 196_000_000, {"conv1": 100_000_000, "conv2": 90_000_000, "dense": 6_000_000})
    b = run("keras", 412_000_000, {"conv1": 110_000_000, "conv2": 290_000_000, "dense": 12_000_000})
    gap = memory_gap(a, b)
    assert gap["line"] == ("keras holds 2.1x more at the end of forward (activations kept for "
                           "backward): 412.0 vs 196.0 MB")
    assert [layer["layer"] for layer in gap["layers"]] == ["conv2", "conv1", "dense"]
    assert gap["layers"][0]["delta_mb"] == 200.0
    assert gap["where"][0] == "conv2: torch keeps 90.0, keras 290.0 MB"


def test_profile_memory_can_be_left_out_and_the_breakdown_says_so(tmp_path, monkeypatch):
    from gapscope.profilers.torch_session import PROFILE_MEMORY_ENV
    monkeypatch.setenv(PROFILE_MEMORY_ENV, "0")
    run_dir = _known_tensor_loop(tmp_path)
    (trace,) = run_dir.glob("*.pt.trace.json.gz")
    assert b"[memory]" not in __import__("gzip").decompress(trace.read_bytes())
    memory = breakdown(load_run(run_dir)).memory
    assert memory.steps == [] and [n for n in memory.notes if "no [memory] events" in n]


def test_resident_memory_creeps_only_past_a_tenth_of_a_megabyte_a_step():
    # A process warming up grows its RSS by arenas and pages (the demo's Keras MLP: +0.02 MB a
    # step, its interval clear of zero): no creep said; a real leak of 0.5 MB a step is.
    from gapscope.analysis.measures.memory.creep import Creep
    from gapscope.analysis.results.memory.figures import MemoryFigures
    warming = MemoryFigures(None, None, rss={"creep": Creep(0.02, (0.01, 0.03), 44)})
    assert warming.creep_line() is None
    leaking = MemoryFigures(None, None, rss={"creep": Creep(0.5, (0.4, 0.6), 44)})
    assert leaking.creep_line() == ("memory creeps: resident memory +0.50 MB a step (95 % interval "
                                    "+0.40 to +0.60, 44 steps)")


def test_a_step_whose_phases_change_nothing_says_so_not_an_empty_list():
    """Issue 47 item 8: every phase's net change under 0.005 MB printed "net a step:  MB"."""
    from gapscope.analysis.measures.memory.phase_memory import StepMemory
    from gapscope.analysis.results.memory.figures import MemoryFigures
    phases = ("data_load", "forward", "backward", "optimizer", "other")
    mb = 1_000_000
    step = StepMemory(3, peak_allocated=2 * mb, peak_reserved=None, start=mb, end=mb + 4000,
                      allocated=mb, freed=mb, high_water=dict.fromkeys(phases, 2 * mb),
                      net={**dict.fromkeys(phases, 0), "backward": 4000})  # 0.004 MB: below the 0.005 shown
    (line,) = MemoryFigures("torch profiler (profile_memory)", "cpu", [step]).lines()
    assert line == ("memory (cpu, torch profiler (profile_memory)): step peak 2.00 MB; no phase changes "
                    "the level a step; 1.00 MB freed and allocated again a step")


def _rss_rows(levels: dict[int, float], traced: range) -> list[dict]:
    return [{"step": s, "traced": s in traced, "rss_mb": mb} for s, mb in levels.items()]


def test_resident_memory_is_fitted_outside_the_traced_window_a_level_each_side():
    """Steps 5-9 flat at 300 MB, the window 10-14 (the profiler's buffers), then 15-29 flat at
    320 MB: fitted across the window as one line that jump read as creep; a level a stretch
    gives a slope of exactly 0. The same with +1 MB a step throughout: 1 MB a step."""
    from gapscope.analysis.measures.memory.rss import rss_figures
    from gapscope.analysis.results.memory.figures import MemoryFigures
    wiggle = {s: 0.05 * (-1) ** s for s in range(30)}   # a page or so either way
    flat = {s: (300.0 if s < 10 else 320.0) + wiggle[s] for s in range(30)}
    found = rss_figures(_rss_rows(flat, range(10, 15)), 5)
    assert found["trend_steps"] == 20 and found["trend_unknown"] is None
    assert abs(found["creep"].per_step) < 0.01 and not found["creep"].significant
    assert MemoryFigures(None, None, rss=found).creep_line() is None
    # The old fit, one line through all 20 unprofiled steps: +1.06 MB a step "beyond noise".
    from gapscope.analysis.measures.memory.creep import creep
    steps = [s for s in range(5, 30) if not 10 <= s < 15]
    assert creep(steps, [flat[s] for s in steps]).significant
    leak = {s: v + 1.0 * s for s, v in flat.items()}
    leaking = rss_figures(_rss_rows(leak, range(10, 15)), 5)
    assert leaking["creep"].per_step == pytest.approx(1.0, abs=0.02) and leaking["level_change"] is None
    assert MemoryFigures(None, None, rss=leaking).creep_line().startswith(
        "memory creeps: resident memory +1.00 MB a step")


def test_a_one_off_allocation_is_a_level_change_not_creep():
    """300 MB flat, 350 MB from step 22 on (one 50 MB buffer kept): as one line +2.1 MB a step;
    split at the step times' least-squares change point, each side flat: a level change."""
    from gapscope.analysis.measures.memory.rss import rss_figures
    from gapscope.analysis.results.memory.figures import MemoryFigures
    levels = {s: (350.0 if s >= 22 else 300.0 if s < 10 else 310.0) + 0.05 * (-1) ** s for s in range(40)}
    found = rss_figures(_rss_rows(levels, range(10, 15)), 5)
    change = found["level_change"]
    assert change.step == 22 and change.before == pytest.approx(310.0, abs=0.1)
    assert change.after == pytest.approx(350.0, abs=0.1)
    memory = MemoryFigures(None, None, rss=found)
    assert memory.creep_line() is None
    # Steps 15-21: four at 309.95 and three at 310.05, median 309.95 (printed 309.9).
    assert ("resident memory changed level once: 309.9 to 350.0 MB at step 22, flat before and "
            "after (a one-off, not creep)") in memory.lines()
    assert memory.to_json_dict()["rss"]["creep"]["level_change"]["step"] == 22


def test_too_few_steps_outside_the_window_tell_no_trend(leak_run):
    """The planted leak's loop: 12 steps, warm-up 2, the profiler on for steps 2-9 (its own
    warm-up included): two unprofiled steps after it, too few for a slope beside a level; its
    allocator's trend inside the window still says the leak."""
    rss = leak_run.memory.rss
    too_few = "too few steps outside the traced window to tell (0 steps)"
    assert rss["creep"] is None and rss["trend_unknown"] == too_few
    assert f"resident memory trend: {too_few}" in leak_run.memory.lines()
    assert leak_run.memory.creep_line().startswith(f"memory creeps: {LEAK_BYTES / MB:+.2f} MB a step")


def _readme_loop(out: Path, name: str, batches: int = 30, plant=None) -> Path:
    """The README's own loop (its model, data and default window), with `plant(step, kept)`
    called after each step to keep memory on purpose."""
    import torch

    import gapscope
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(100, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(64, 100), torch.randint(0, 10, (64,))) for _ in range(batches)]
    kept = []
    with gapscope.capture(name, out=out) as cap:
        for step, (inputs, targets) in enumerate(cap.data(data)):
            with cap.phase("forward"):
                loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            with cap.phase("backward"):
                loss.backward()
            with cap.phase("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            if plant:
                plant(step, kept)
            cap.step(loss)
    return cap.run_dir


def _one_off(step, kept):   # 50 MB once, written so that its pages are resident
    import torch
    if step == 22:
        kept.append(torch.ones(50_000_000 // 4))


def _leak(step, kept):      # 1 MiB a step, written
    import torch
    kept.append(torch.ones(1 << 18))


@pytest.fixture(scope="module")
def readme_loops(tmp_path_factory):
    """Each loop in a fresh process, as a user's script runs: in this long-lived test process
    malloc hands a leak the pages earlier tests freed, and its resident memory does not grow."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    out = tmp_path_factory.mktemp("readme_loops")
    loops = (("readme", ()), ("one-off", (40, _one_off)), ("leak", (40, _leak)))
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                             max_tasks_per_child=1) as pool:  # a process of its own each
        runs = {name: pool.submit(_readme_loop, out, name, *args) for name, args in loops}
        return {name: breakdown(load_run(run.result())) for name, run in runs.items()}


def test_the_readme_loop_prints_no_creep_and_the_planted_ones_are_told_apart(readme_loops):
    readme, one_off, leak = readme_loops["readme"], readme_loops["one-off"], readme_loops["leak"]
    # 30 steps, warm-up 5, the profiler on around 10-14: some 18 unprofiled steps either side.
    # Told (enough steps outside the window), and no creep said: a flat fit, a slope of a few kB
    # a step, or one level change (what the allocator of a fresh process does varies by run).
    assert readme.memory.rss["trend_unknown"] is None
    assert not any(n.startswith("memory creeps") for n in readme.notes), readme.notes
    # 50 MB once from step 22 (its pages written in the step before step 23's row): a level change.
    change = one_off.memory.rss["level_change"]
    assert change is not None and change.after - change.before == pytest.approx(50.0, abs=5.0)
    assert not any(n.startswith("memory creeps") for n in one_off.notes), one_off.notes
    # 1 MiB (1.049 MB) a step, written: resident memory creeps by up to that (less where malloc
    # hands out pages the test process freed earlier: 0.92 MB a step in one run here).
    rss = leak.memory.rss
    assert rss["level_change"] is None and rss["creep"].significant
    assert 0.5 <= rss["creep"].per_step <= 1.049 * 1.1
    assert any(n.startswith("memory creeps: ") and "; resident memory +" in n for n in leak.notes), leak.notes


def test_compare_memory_keeps_the_frameworks_footprint_apart():
    """Issue 45: "keras holds 1.9x more RSS, 1282 vs 662 MB" was mostly library size. By hand:
    torch 300 MB after its import, keras 656 (356 more): the model and data hold 362 vs 626 MB,
    1.7x, and the footprint is said apart."""
    from gapscope.analysis.results.memory.figures import MemoryFigures
    from gapscope.analysis.results.memory.gap import memory_gap
    from gapscope.analysis.results.records import Breakdown, PhaseSource

    def side(label, mean, after_import):
        return Breakdown(PhaseSource.TIMERS, [], [1.0], {}, label=label, memory=MemoryFigures(
            None, None, rss={"mean_mb": mean, "after_import_mb": after_import, "creep": None}))
    gap = memory_gap(side("mlp torch", 662.0, 300.0), side("mlp keras", 1282.0, 656.0))
    assert gap["figure"] == "rss_model_mb" and gap["ratio"] == pytest.approx(626 / 362, abs=1e-4)
    assert gap["line"] == ("mlp keras holds 1.7x more for the model and data in resident memory "
                           "(RSS less the framework's footprint after import): 626.0 vs 362.0 MB; "
                           "framework footprint apart (RSS after import, before the model): 300.0 "
                           "vs 656.0 MB")
    # Runs recorded before the footprint was kept: the whole process, as before.
    old = memory_gap(side("a", 662.0, None), side("b", 1282.0, None))
    assert old["figure"] == "rss_mb"


def test_a_run_records_its_footprint_after_the_frameworks_import(torch_run):
    """The runner reads its RSS right after `import torch`, before the model and data exist:
    less than the steps' RSS, and kept in the memory figures."""
    manifest = json.loads((torch_run / "manifest.json").read_text())
    after_import = manifest["rss_after_import_mb"]
    rss = breakdown(load_run(torch_run)).memory.rss
    assert 50 < after_import < rss["mean_mb"] and rss["after_import_mb"] == after_import
