"""`--framework keras-jax`: one real run of the seed CNN on Keras 3 over JAX (CPU), checked many
ways: the spec's parameters, phases from the jitted step's HLO metadata that add up to the step,
the layers by name with their FLOPs, JAX's compile record, the memory line, and the refusals."""
from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from gapscope.analysis.events.hlo_metadata import MIXED, UNATTRIBUTED
from gapscope.analysis.events.phase_rules import PhaseOrigin
from gapscope.analysis.measures.kernels import XLA_THUNKS, find_work, kernel_stats
from gapscope.analysis.model.run import load_run
from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.compile_why import run_compile_why
from gapscope.analysis.results.layers import layer_breakdown
from gapscope.cli import cli
from gapscope.workloads.registry import WORKLOADS

pytest.importorskip("jax")  # the [jax] extra; the suite's own set-up installs it

# As test_layers' CNN runs (batch 32): the conv2 FLOPs below are the same hand count.
RUN = dict(steps=6, warmup_steps=2, trace_steps=2, batch_size=32)


@pytest.fixture(scope="module")
def jax_cnn(tmp_path_factory):
    from gapscope.workloads.launch import launch
    from gapscope.workloads.settings import RunSettings
    outcome = launch(RunSettings("cnn", "keras-jax", **RUN), tmp_path_factory.mktemp("keras_jax"))
    assert outcome.status == "complete", (outcome.error, (outcome.run_dir / "run.log").read_text())
    return outcome.run_dir


@pytest.fixture(scope="module")
def run(jax_cnn):
    return load_run(jax_cnn)


def test_the_run_trains_the_specs_model_on_jax(jax_cnn):
    manifest = json.loads((jax_cnn / "manifest.json").read_text())
    assert manifest["framework"] == "keras-jax" and manifest["status"] == "complete"
    # The seed CNN's count (registry: 563,018), as torch and Keras on TF build it.
    assert manifest["parameters"] == 563_018
    assert manifest["versions"]["jax"] == manifest["versions"]["jaxlib"] is not None
    # Seeded without importing TensorFlow (Keras would, to seed it): no TF in the process.
    assert manifest["versions"]["tf_cpu_allocator"] is None
    assert manifest["trace_window"] == [2, 3] and manifest["steps_run"] == 6
    rows = [line.split(",") for line in (jax_cnn / "steps.csv").read_text().splitlines()]
    losses = [float(r[rows[0].index("loss")]) for r in rows[1:]]
    # Cross-entropy over 10 classes from a fresh model starts near ln 10.
    assert len(losses) == 6 and all(math.isfinite(v) for v in losses) and abs(losses[0] - math.log(10)) < 0.5
    assert list((jax_cnn / "plugins" / "profile").glob("*/*.xplane.pb"))


def test_phases_come_from_the_hlo_metadata_and_add_up_to_the_step(run):
    found = breakdown(run)
    found.self_check()
    traced = breakdown(run, "trace")
    traced.self_check()
    for phase in ("forward", "backward", "optimizer"):
        assert run.timeline.origins[phase] == PhaseOrigin.FRAMEWORK
        assert traced.phases[phase].ms > 0
    assert [s.step_num for s in run.timeline.steps] == [2, 3]
    # Every XLA thunk of the step is one of the program's ops, in a phase, mixed or unattributed.
    stats = kernel_stats(find_work(run.trace, run.timeline, run.hlo))
    assert stats.source == XLA_THUNKS
    assert stats.per_phase["forward"] > 0 and stats.per_phase["backward"] > 0 and stats.per_phase["optimizer"] > 0
    # Counted off the program (jax 0.10.2, this CPU): each ReLU's gradient select fused with its
    # forward mask (conv1-4, dense1: transpose(jvp(convN))/select_n over jvp(convN)/gt) and the
    # log-softmax's gradient (div, add_any) with its forward: 7 mixed fusions, one call a step.
    mixed = {m["name"]: run.hlo.modules["jit_train_step"][m["name"]].op_name for m in stats.mixed_ops}
    assert stats.per_phase[MIXED] == 7 and len(mixed) == 7
    assert sorted(n.split("/")[1] for n in mixed.values()) == [
        "transpose(jvp(compile_loss))"] * 2 + [f"transpose(jvp({layer}))" for layer in
                                                ("conv1", "conv2", "conv3", "conv4", "dense1")]
    # Ops XLA left without a name get their place; only the outputs' copies after the last
    # gradient op stay unattributed: well under 1 % of the thunks' time.
    assert stats.time_ms_per_phase[UNATTRIBUTED] < 0.01 * sum(stats.time_ms_per_phase.values())


def test_the_cnns_layers_carry_the_specs_names_and_flops(run):
    layers = layer_breakdown(run)
    names = [layer.name for layer in WORKLOADS["cnn"].layers()]
    assert [r.name for r in layers.rows] == [n for n in names if n in {r.name for r in layers.rows}]
    assert {f"conv{i}" for i in range(1, 5)} | {"dense1", "logits"} <= {r.name for r in layers.rows}
    assert all(layers.row(f"conv{i}").forward_ms > 0 and layers.row(f"conv{i}").backward_ms > 0
               for i in range(2, 5))
    conv2 = 32 * 576 * 32 * 288 * 2 + 2 * 32 * 576 * 32  # test_layers' hand count, batch 32
    assert layers.batch == 32 and layers.row("conv2").forward_gflop == pytest.approx(conv2 / 1e9, abs=1e-6)
    assert any("JAX's update ops" in note for note in layers.notes)


def test_compile_json_holds_jaxs_trace_and_compile_of_the_step(run, jax_cnn):
    record = json.loads((jax_cnn / "compile.json").read_text())
    assert record["framework"] == "jax" and isinstance(record["compiles"], list)
    step = [e for e in record["jax_events"] if "train_step" in e["function"]]
    assert {e["stage"] for e in step} == {"jax_trace", "lower", "xla_compile"}
    assert all(e["step"] == 0 and e["ms"] > 0 for e in step)
    # Keras' end-of-fit metrics compile after the last update, its set-up before the first: in
    # no step, and out of the stages, which hold what step 0 compiled.
    outside = [e for e in record["jax_events"] if e["step"] is None]
    assert {e["function"] for e in outside} >= {"jit(true_divide)"}
    why = run_compile_why(run, 1000.0)
    assert why.stages_ms["xla_compile"] == pytest.approx(sum(
        e["ms"] for e in record["jax_events"] if e["stage"] == "xla_compile" and e["step"] == 0), abs=1e-3)
    assert why.tf_traces.get("train_step") == 1 and why.retraces == []
    assert "XLA compile" in why.line() and "train_step traced 1 time" in why.line()


def test_memory_and_the_cli_say_what_jax_gives(jax_cnn):
    result = CliRunner().invoke(cli, ["breakdown", str(jax_cnn)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "JAX's CPU client reports none" in text and "RSS" in text


def test_what_keras_jax_cannot_run_is_refused_in_one_line():
    from gapscope.workloads.settings import RunSettings
    from gapscope.profilers.errors import GapscopeInputError
    for variant, says in (("jit", "does not apply to keras-jax"), ("spe4", "steps_per_execution=1 only")):
        with pytest.raises(GapscopeInputError, match=says):
            RunSettings("cnn", "keras-jax", variant=variant).with_variant(cuda_available=False)


def test_without_the_jax_extra_run_says_so_in_one_line(monkeypatch, tmp_path):
    import importlib.util
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "jax" else found(name, *args))
    result = CliRunner().invoke(cli, ["run", "cnn", "--framework", "keras-jax", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == (
        "gapscope: error: --framework keras-jax needs JAX, which is not installed: "
        "pip install -e '.[jax]' (a CPU jax/jaxlib)")
    assert not list(tmp_path.iterdir())  # refused before any run directory


def test_step_losses_are_exact_where_keras_weighs_its_loss_mean_by_batch_size():
    """Keras' own JAX train_step weighs each update's loss by its batch size in the running mean
    the logs carry. Batches of 4, 4 and 2 samples with losses 1, 2 and 4 give running means 1,
    (4 + 8) / 8 = 1.5 and (4 + 8 + 8) / 10 = 2: with the samples the step losses are 1, 2 and 4;
    taken as equal weights the short last batch's read (3 x 2 - 2 x 1.5) = 3."""
    from gapscope.profilers.keras_marks import step_callback
    from gapscope.profilers.timers import HostClock, StepTimer

    def losses(samples_before):
        timer = StepTimer(HostClock())
        callback = step_callback(timer, None, samples_before=samples_before)
        for batch, mean in enumerate((1.0, 1.5, 2.0)):
            callback.on_train_batch_begin(batch)
            callback.on_train_batch_end(batch, {"loss": mean})
        return [row["loss"] for row in timer.rows(timed_phases=())]

    assert losses(lambda batches: min(4 * batches, 10)) == pytest.approx([1.0, 2.0, 4.0])
    assert losses(None) == pytest.approx([1.0, 2.0, 3.0])


def test_compare_reads_keras_jax_beside_torch_and_keras(jax_cnn, run):
    """compare of the JAX run (baseline) with the fixture CNN runs of torch and Keras on TF:
    exit 3, as those two were recorded on a busy machine (their README), each pair with its five
    phases, and the ratio the two step times make."""
    from pathlib import Path
    fixtures = Path(__file__).parent / "fixtures" / "cnn_cpu"
    result = CliRunner().invoke(cli, ["compare", str(jax_cnn), str(fixtures / "torch"),
                                      str(fixtures / "keras"), "--format", "json"])
    assert result.exit_code == 3, result.output
    doc = json.loads(result.stdout)
    pairs = doc["comparisons"]
    assert [(p["a_label"], p["b_label"]) for p in pairs] == [("cnn keras-jax", "cnn torch"),
                                                              ("cnn keras-jax", "cnn keras")]
    step = breakdown(run).to_json_dict()["step_ms"]["mean"]
    for pair, other in zip(pairs, ("torch", "keras")):
        assert pair["a_step_ms"] == pytest.approx(step, abs=1e-6)
        assert pair["ratio"] == pytest.approx(pair["b_step_ms"] / pair["a_step_ms"], rel=1e-3)
        assert set(pair["phases"]) == {"data_load", "forward", "backward", "optimizer", "other"}
        assert pair["inconclusive"].startswith("busy machine"), other
