"""gapscope's Lightning callback on real tiny fits (CPU): plain, gradient accumulation under
bf16-mixed, two optimizers (manual optimization) and two-rank DDP, each a run directory that
breakdown and compare read like any other."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import trainer_fits
from trainer_fits import MARKED, STEPS, TRACE, WARMUP, manifest_of, phase_ranges, steps_of
from gapscope.analysis.results.distributed_breakdown import breakdown_of
from gapscope.cli import cli
from gapscope.profilers.errors import EXIT_INCONCLUSIVE

ROOT = Path(__file__).resolve().parent.parent
@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return trainer_fits.lightning_fit(tmp_path_factory.mktemp("lit"), steps=STEPS, trace_steps=TRACE,
                                      warmup=WARMUP).run_dir


@pytest.fixture(scope="module")
def accumulated(tmp_path_factory):
    return trainer_fits.lightning_fit(tmp_path_factory.mktemp("lit_acc"), steps=12, accumulate=2,
                                      precision="bf16-mixed", trace_steps=TRACE, warmup=WARMUP).run_dir


def test_layers_of_the_lightning_module(plain):
    """Issue 44: the callback gives the LightningModule's layers as capture(model=) does: its
    `self.net` (a Sequential, all the parameters) looked through to net.0 and net.2, each with
    forward and backward time and FlopCounterMode's FLOPs. By hand, batch 64: net.0 (100 -> 64)
    2·64·100·64 = 819,200 forward and as many backward (the weights' gradient only: none flows
    to the input); net.2 (64 -> 10) 81,920 forward, 163,840 backward."""
    import torch
    layers = trainer_fits.layers_add_up(plain)
    assert [r.name for r in layers.rows] == ["net.0", "net.2"]
    assert all(r.forward_ms > 0 and r.backward_ms > 0 for r in layers.rows)
    counted = {layer["name"]: layer["dims"] for layer in manifest_of(plain)["layers"]}
    assert [(counted[n]["forward_flop"], counted[n]["backward_flop"]) for n in ("net.0", "net.2")] == [
        (819_200, 819_200), (81_920, 163_840)]
    model = trainer_fits.lightning_module("Mlp").net
    inputs, targets = torch.randn(trainer_fits.BATCH, 100), torch.randint(0, 10, (trainer_fits.BATCH,))
    reference = trainer_fits.flop_counter_reference(
        model, lambda: torch.nn.functional.cross_entropy(model(inputs), targets))
    for name, key in (("net.0", "Sequential.0"), ("net.2", "Sequential.2")):
        for phase in ("forward", "backward"):
            assert layers.row(name).gflop(phase) * 1e9 == pytest.approx(reference[key][phase], rel=0.01)
    row = layers.row("net.0")
    assert row.gflops("forward") == pytest.approx(row.forward_gflop / (row.forward_ms / 1000))


def test_a_fit_is_a_run_directory_whose_phases_add_up(plain):
    manifest = manifest_of(plain)
    assert manifest["status"] == "complete" and manifest["error"] is None
    assert (manifest["framework"], manifest["workload"], manifest["variant"]) == ("torch", "lit-mlp", "user")
    assert manifest["settings"]["api"] == "gapscope.trainers.lightning"
    assert manifest["steps"] == STEPS and manifest["trace_window"] == [6, 8]
    rows = steps_of(plain)
    assert len(rows) == STEPS
    # The profiler's warm-up step (5), the window (6..8) and the teardown step after it (9).
    assert [int(r["step"]) for r in rows if r["traced"] == "1"] == [5, 6, 7, 8, 9]
    for row in rows:
        marked = sum(float(row[f"{phase}_ms"]) for phase in MARKED)
        assert all(float(row[f"{phase}_ms"]) > 0 for phase in MARKED), row
        assert marked <= float(row["step_ms"]), row  # other = step - the four, never negative
    # One range of each phase per traced step (the profiler's warm-up step is not recorded), and
    # two of optimizer: zero_grad (before backward) and the update.
    assert phase_ranges(plain) == {"gapscope/data_load": 3, "gapscope/forward": 3, "gapscope/backward": 3,
                              "gapscope/optimizer": 6}


@pytest.mark.parametrize("source, steps", [("trace", 3), ("timers", STEPS - WARMUP - 5)])
def test_breakdown_reads_it_from_trace_and_timers(plain, source, steps):
    result = breakdown_of(plain, source)
    result.self_check()
    doc = result.to_json_dict()
    assert doc["unidentified_phases"] == [] and doc["steps"] == steps
    assert all(doc["phases"][phase]["ms"] > 0 for phase in MARKED), doc["phases"]
    assert sum(p["ms"] for p in doc["phases"].values()) == pytest.approx(doc["step_ms"]["mean"], abs=1e-6)


def test_gradient_accumulation_makes_one_step_of_each_update(accumulated):
    manifest = manifest_of(accumulated)
    assert manifest["status"] == "complete" and manifest["steps"] == 12
    assert manifest["settings"]["precision"] == "bf16-mixed"
    assert manifest["settings"]["accumulate_grad_batches"] == 2
    # Two micro-batches a step: two fetches, forwards and backwards; one zero_grad and update.
    assert phase_ranges(accumulated) == {f"gapscope/{phase}": 6 for phase in MARKED}
    # The step's loss is the update's: the sum of the micro-batch losses Lightning halved
    # (10 classes, hardly trained: near ln 10 = 2.3, where one halved loss would be near 1.15).
    assert all(1.9 < float(row["loss"]) < 2.6 for row in steps_of(accumulated))


def test_two_optimizers_under_manual_optimization(tmp_path):
    run_dir = trainer_fits.lightning_fit(tmp_path, steps=24, two_optimizers=True,
                                         trace_steps=TRACE, warmup=WARMUP).run_dir
    # Lightning counts each optimizer's step in max_steps; a gapscope step is one training_step.
    assert manifest_of(run_dir)["steps"] == 12 and len(steps_of(run_dir)) == 12
    ranges = phase_ranges(run_dir)
    assert ranges["gapscope/backward"] == ranges["gapscope/optimizer"] == 2 * 3
    assert ranges["gapscope/data_load"] == 3
    doc = breakdown_of(run_dir, "timers").to_json_dict()
    assert all(doc["phases"][phase]["ms"] > 0 for phase in MARKED)


def test_a_compiled_module_records_what_it_compiled(tmp_path):
    """`trainer.fit(torch.compile(module))`, as Lightning's docs write it: the callback records
    Dynamo's compiles into compile.json as `gapscope run --variant compile` does (aot_eager: no
    C++ compile)."""
    import torch._dynamo
    torch._dynamo.reset()
    try:
        callback = trainer_fits.lightning_fit(tmp_path, steps=8, trace_steps=None, warmup=WARMUP,
                                              compile_backend="aot_eager")
    finally:
        torch._dynamo.reset()
    records = json.loads((callback.run_dir / "compile.json").read_text())
    # Lightning compiles training_step; its forward graph and lazily its backward, at step 0.
    assert [(c["co_name"], c["is_forward"], c["step"]) for c in records["compiles"]] == [
        ("training_step", True, 0), (None, False, 0)]
    assert records["graph_breaks"] == []
    why = breakdown_of(callback.run_dir).compile_why
    assert [g.function for g in why.graphs] == ["training_step"] and why.recompiles == []
    assert why.stages_ms["dynamo"] > 0 and why.stages_ms["aot_autograd"] > 0
    assert why.line().endswith("1 graph, 0 graph breaks, 0 recompiles")


def test_compare_reads_two_fits(plain, accumulated):
    result = CliRunner().invoke(cli, ["compare", str(plain), str(accumulated), "--format", "json"])
    assert result.exit_code in (0, EXIT_INCONCLUSIVE), result.output  # 3: the machine was busy
    runs = json.loads(result.stdout)["runs"]
    assert [run["breakdown"]["steps"] for run in runs] == [STEPS - WARMUP - 5, 12 - WARMUP - 5]


def test_ddp_writes_one_rank_directory_each_in_a_job(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "lightning_ddp_fit.py"), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (job,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert job.name.startswith("lit-ddp-torch-user-x2-")
    assert manifest_of(job)["status"] == "complete"
    for rank in (0, 1):
        manifest = manifest_of(job / f"rank{rank}")
        assert (manifest["status"], manifest["rank"], manifest["world_size"], manifest["steps"]) == (
            "complete", rank, 2, 8)
    result = CliRunner().invoke(cli, ["breakdown", str(job), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["ranks"]) == 2
