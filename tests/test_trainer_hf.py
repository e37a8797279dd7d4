"""gapscope's Hugging Face Trainer capture on real tiny runs (a 2-layer GPT-2 built from its config,
random tokens, CPU, nothing downloaded): a run directory whose phases add up, gradient
accumulation with evaluation between updates, a failed train(), and compare reading them."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

os.environ["HF_HUB_OFFLINE"] = "1"

import trainer_fits  # noqa: E402
from trainer_fits import MARKED, STEPS, TRACE, WARMUP, manifest_of, phase_ranges, steps_of  # noqa: E402
from gapscope.analysis.results.distributed_breakdown import breakdown_of  # noqa: E402
from gapscope.cli import cli  # noqa: E402
from gapscope.profilers.errors import EXIT_INCONCLUSIVE  # noqa: E402

@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return trainer_fits.hf_fit(tmp_path_factory.mktemp("hf"), steps=STEPS, trace_steps=TRACE,
                               warmup=WARMUP, layer_depth=2).run_dir


@pytest.fixture(scope="module")
def accumulated(tmp_path_factory):
    return trainer_fits.hf_fit(tmp_path_factory.mktemp("hf_acc"), steps=12, accumulate=2,
                               eval_every=4, trace_steps=TRACE, warmup=WARMUP).run_dir


def test_a_train_is_a_run_directory_whose_phases_add_up(plain):
    manifest = manifest_of(plain)
    assert manifest["status"] == "complete" and manifest["error"] is None
    assert (manifest["framework"], manifest["workload"], manifest["variant"]) == ("torch", "hf-gpt2", "user")
    assert manifest["settings"]["api"] == "gapscope.trainers.hf"
    assert manifest["steps"] == STEPS and manifest["trace_window"] == [6, 8]
    rows = steps_of(plain)
    assert [int(r["step"]) for r in rows if r["traced"] == "1"] == [5, 6, 7, 8, 9]
    for row in rows:
        assert all(float(row[f"{phase}_ms"]) > 0 for phase in MARKED), row
        assert sum(float(row[f"{phase}_ms"]) for phase in MARKED) <= float(row["step_ms"]), row
    # Per traced step: the fetch and the copy to the device (two data_load ranges), one each
    # of compute_loss, accelerator.backward and the update.
    assert phase_ranges(plain) == {"gapscope/data_load": 6, "gapscope/forward": 3, "gapscope/backward": 3,
                              "gapscope/optimizer": 3}


def test_layers_of_the_trainers_model(plain):
    """Issue 44: the GPT-2's layers two levels deep, each with forward and backward time and
    FlopCounterMode's FLOPs; `transformer` keeps its own (its children's taken out). By hand:
    lm_head 2·(8·16)·32·128 = 1,048,576 forward, twice that backward."""
    import torch
    layers = trainer_fits.layers_add_up(plain)
    names = [r.name for r in layers.rows]
    assert names[:3] == ["transformer", "transformer.wte", "transformer.wpe"]
    assert {"transformer.h.0", "transformer.h.1", "transformer.ln_f", "lm_head"} <= set(names)
    for name in ("transformer.h.0", "transformer.h.1", "lm_head"):
        assert layers.row(name).forward_ms > 0 and layers.row(name).backward_ms > 0, name
    counted = {layer["name"]: layer["dims"] for layer in manifest_of(plain)["layers"]}
    assert (counted["lm_head"]["forward_flop"], counted["lm_head"]["backward_flop"]) == (1_048_576, 2_097_152)
    model = trainer_fits.hf_model()
    tokens = torch.randint(0, 128, (trainer_fits.HF_BATCH, trainer_fits.HF_TOKENS))
    reference = trainer_fits.flop_counter_reference(
        model, lambda: model(input_ids=tokens, labels=tokens).loss)
    key = "GPT2LMHeadModel."
    for name in ("transformer.h.0", "transformer.h.1", "lm_head"):
        for phase in ("forward", "backward"):
            expected = reference[key + name][phase]
            assert layers.row(name).gflop(phase) * 1e9 == pytest.approx(expected, rel=0.01), (name, phase)
    children = [n for n in names if n.startswith("transformer.") and n.count(".") == 1
                or n.startswith("transformer.h.") and n.count(".") == 2]
    own = reference[key + "transformer"]["forward"] - sum(reference.get(key + n, {}).get("forward", 0)
                                                          for n in children)
    assert counted["transformer"]["forward_flop"] == own


@pytest.mark.parametrize("source, steps", [("trace", 3), ("timers", STEPS - WARMUP - 5)])
def test_breakdown_reads_it_from_trace_and_timers(plain, source, steps):
    result = breakdown_of(plain, source)
    result.self_check()
    doc = result.to_json_dict()
    assert doc["unidentified_phases"] == [] and doc["steps"] == steps
    assert all(doc["phases"][phase]["ms"] > 0 for phase in MARKED), doc["phases"]
    assert sum(p["ms"] for p in doc["phases"].values()) == pytest.approx(doc["step_ms"]["mean"], abs=1e-6)


def test_accumulation_with_evaluation_between_updates(accumulated):
    manifest = manifest_of(accumulated)
    assert manifest["status"] == "complete" and manifest["steps"] == 12
    assert manifest["settings"]["gradient_accumulation_steps"] == 2
    # One fetch of both micro-batches and two copies, two forwards and backwards, one update per
    # step; evaluation's own _prepare_inputs and compute_loss (every 4 updates) are not marked.
    assert phase_ranges(accumulated) == {"gapscope/data_load": 9, "gapscope/forward": 6,
                                    "gapscope/backward": 6, "gapscope/optimizer": 3}
    # The update's loss: its micro-batches' shares summed (random tokens of 128: near ln 128 =
    # 4.85, where one share would be half of it).
    assert all(4.0 < float(row["loss"]) < 5.3 for row in steps_of(accumulated))


def test_a_train_that_raises_is_recorded_as_interrupted(tmp_path):
    with pytest.raises(ValueError, match="the trainer broke"):
        trainer_fits.hf_fit(tmp_path, steps=STEPS, trace_steps=None, fail_at=6)
    (run_dir,) = [p for p in tmp_path.iterdir() if p.name.startswith("hf-gpt2-")]
    manifest = manifest_of(run_dir)
    assert manifest["status"] == "interrupted" and manifest["error"] == "ValueError: the trainer broke"
    assert len(steps_of(run_dir)) == 5  # the update that raised never reached gapscope's on_step_end


def test_a_train_stopped_by_sigterm_is_interrupted_with_its_steps(tmp_path):
    """SIGTERM at the end of update 6 (before gapscope's callback sees it end): the run records
    the 5 updates before it, `interrupted` by SIGTERM, then the process ends by that signal."""
    import signal
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", "import pathlib, trainer_fits; trainer_fits.hf_fit("
                               f"pathlib.Path({str(tmp_path)!r}), steps={STEPS}, trace_steps=None, sigterm_at=6)"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(root / "tests")])},
        capture_output=True, text=True, timeout=300)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.name.startswith("hf-gpt2-")]
    manifest = manifest_of(run_dir)
    assert (manifest["status"], manifest["error"], manifest["stopped_by"]) == ("interrupted", "interrupted", "SIGTERM")
    assert len(steps_of(run_dir)) == 5
    result = CliRunner().invoke(cli, ["breakdown", str(run_dir), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["steps"] == 5 - WARMUP
    assert "run interrupted (SIGTERM): these figures are of the 5 steps it recorded" in doc["notes"]


def test_compare_reads_two_trains(plain, accumulated):
    result = CliRunner().invoke(cli, ["compare", str(plain), str(accumulated), "--format", "json"])
    assert result.exit_code in (0, EXIT_INCONCLUSIVE), result.output  # 3: the machine was busy
    runs = json.loads(result.stdout)["runs"]
    assert [run["breakdown"]["steps"] for run in runs] == [STEPS - WARMUP - 5, 12 - WARMUP - 5]
