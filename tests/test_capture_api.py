"""The public API on real user loops (PyTorch, Keras fit on both backends, TF GradientTape):
each becomes a normal run directory whose breakdown shows all four marked phases."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import keras_user_models
import user_loops
from gapscope.analysis.results.distributed_breakdown import breakdown_of
from gapscope.analysis.readers.run_dir import EXPORTED_XSPACE_DIR
from gapscope.cli import cli

ROOT = Path(__file__).resolve().parent.parent
MARKED = ("data_load", "forward", "backward", "optimizer")


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def _steps(run_dir: Path) -> list[dict]:
    with open(run_dir / "steps.csv") as handle:
        return list(csv.DictReader(handle))


def _assert_all_phases(run_dir: Path, source: str = "auto", steps: int | None = None):
    result = breakdown_of(run_dir, source)
    result.self_check()
    doc = result.to_json_dict()
    assert doc["unidentified_phases"] == []
    for phase in MARKED:
        assert doc["phases"][phase]["ms"] > 0, (phase, doc["phases"], doc["phase_sources"])
    assert sum(p["ms"] for p in doc["phases"].values()) == pytest.approx(doc["step_ms"]["mean"], abs=1e-6)
    if steps is not None:
        assert doc["steps"] == steps
    return doc


def _in_subprocess(code: str, **env) -> subprocess.CompletedProcess:
    """Keras fixes its backend at import, and import side effects are what some tests look at."""
    environment = {**os.environ, **env,
                   "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def torch_capture(tmp_path_factory):
    return user_loops.torch_loop(tmp_path_factory.mktemp("torch_capture"))


def test_torch_loop_becomes_a_run_directory(torch_capture):
    run_dir = torch_capture.run_dir
    manifest = _manifest(run_dir)
    assert manifest["status"] == "complete" and manifest["error"] is None
    assert (manifest["framework"], manifest["workload"], manifest["variant"]) == ("torch", "user-mlp", "user")
    assert manifest["steps"] == user_loops.BATCHES and manifest["trace_window"] == [6, 9]
    assert manifest["versions"]["torch"] and manifest["device"]
    assert len(list(run_dir.glob("*.pt.trace.json.gz"))) == 1
    rows = _steps(run_dir)
    assert len(rows) == user_loops.BATCHES
    # The profiler's warm-up step (5), the window (6..9) and the step after it (10, which pays
    # the profiler's teardown) are not unprofiled steps.
    assert [int(r["step"]) for r in rows if r["traced"] == "1"] == [5, 6, 7, 8, 9, 10]
    assert sum(int(r["warmup"]) for r in rows) == user_loops.WARMUP


def test_torch_loop_breakdown_from_trace_and_timers(torch_capture):
    doc = _assert_all_phases(torch_capture.run_dir, "trace", steps=4)
    assert set(doc["phase_sources"].values()) == {"gapscope marks"}
    # Timers: every steady step that the profiler did not slow down.
    _assert_all_phases(torch_capture.run_dir, "timers",
                       steps=user_loops.BATCHES - user_loops.WARMUP - 6)  # 6: the profiler warm-up, 4 traced, teardown


def test_breakdown_command_reads_it_unchanged(torch_capture):
    result = CliRunner().invoke(cli, ["breakdown", str(torch_capture.run_dir), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["framework"] == "torch"


@pytest.mark.parametrize("how", ["raises", "interrupted"])
def test_a_failing_loop_is_recorded_as_interrupted_and_the_error_goes_on(tmp_path, how):
    """Its steps are the loop's as far as it got: kept, and analysed (test_capture_stops for
    SIGTERM and SIGKILL)."""
    expected = ValueError if how == "raises" else KeyboardInterrupt
    with pytest.raises(expected):
        user_loops.torch_loop(tmp_path, **{"fail_at" if how == "raises" else "interrupt_at": 8})
    (run_dir,) = tmp_path.iterdir()
    manifest = _manifest(run_dir)
    assert manifest["status"] == "interrupted"
    if how == "raises":
        assert manifest["error"] == "ValueError: the user's loop broke"
        assert "the user's loop broke" in manifest["traceback"]
    else:
        assert manifest["error"] == "interrupted"
    # The steps done before the failure are kept; the half step is not.
    assert len(_steps(run_dir)) == 8
    result = CliRunner().invoke(cli, ["breakdown", str(run_dir), "--format", "json"])
    assert result.exit_code == 0, result.output
    how_words = "ValueError: the user's loop broke" if how == "raises" else "interrupted"
    run_words = "interrupted" if how != "raises" else f"interrupted ({how_words})"
    assert f"run {run_words}: these figures are of the 8 steps it recorded" in json.loads(result.stdout)["notes"]


def test_a_torch_capture_does_not_import_tensorflow(tmp_path, monkeypatch):
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)  # gapscope's own setting under test
    done = _in_subprocess(
        "import sys, user_loops\n"
        f"cap = user_loops.torch_loop(__import__('pathlib').Path({str(tmp_path)!r}))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')))")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    # Kineto's 'USDT:... profiler_start/stop' lines stay off the user's stderr (issue 23 item 9)
    assert "USDT" not in done.stderr and "profiler_start" not in done.stderr, done.stderr[-2000:]
    (run_dir,) = tmp_path.iterdir()
    assert list(run_dir.glob("events.out.tfevents.*"))


def test_bad_arguments_are_refused_before_anything_is_created(tmp_path):
    import gapscope
    with pytest.raises(ValueError, match="trace_steps"):
        gapscope.capture("x", trace_steps=(0, 5), out=tmp_path)
    with pytest.raises(ValueError, match="framework"):
        gapscope.capture("x", out=tmp_path, framework="jax")
    with pytest.raises(ValueError, match="unknown phase"):
        with gapscope.capture("x", trace_steps=None, out=tmp_path) as cap:
            with cap.phase("forwards"):
                pass
    # The context had started: its run records the error.
    (run_dir,) = tmp_path.iterdir()
    assert "unknown phase" in _manifest(run_dir)["error"]


def test_keras_fit_on_tensorflow(tmp_path):
    cap, model = user_loops.keras_fit(tmp_path)
    manifest = _manifest(cap.run_dir)
    assert manifest["status"] == "complete" and manifest["framework"] == "keras"
    assert manifest["steps"] == user_loops.BATCHES and manifest["parameters"] == model.count_params()
    assert list(cap.run_dir.glob("plugins/profile/*/*.xplane.pb"))
    doc = _assert_all_phases(cap.run_dir)
    # fit compiles the step: only the trace sees its phases, compensated and scaled to the
    # steps the profiler did not run on.
    assert doc["source"] == "trace, compensated" and doc["step_source"] == "unprofiled steps"
    assert len(doc["per_step"]) == 4
    assert len(_steps(cap.run_dir)) == user_loops.BATCHES
    # Issue 44: the Sequential model's layers by its own names (dense_<n>, dense_<n+1>: without
    # them TF's suffixed scopes read as one layer), FLOPs by the rules (keras_user_models).
    names = [layer.name for layer in model.layers]
    layers = keras_user_models.assert_user_layers(cap.run_dir, names + ["loss"])
    # By hand, batch 64: Dense 100->64 + ReLU, the first with weights: 2*64*64*100 + 2*64*64.
    assert layers.row(names[0]).forward_gflop == pytest.approx(827_392 / 1e9, abs=5e-7)


def test_a_failing_fit_is_recorded_as_interrupted(tmp_path):
    import keras

    import gapscope

    class Breaks(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 7:  # inside the trace window: the TF profiler is running
                raise RuntimeError("a user callback broke")

    model = keras.Sequential([keras.Input((100,)), keras.layers.Dense(10)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = user_loops.data()
    with pytest.raises(RuntimeError, match="a user callback broke"):
        with gapscope.capture_keras(model, "breaks", trace_steps=(6, 10), out=tmp_path) as cap:
            model.fit(x, y, batch_size=user_loops.BATCH, verbose=0, callbacks=[cap, Breaks()])
    manifest = _manifest(cap.run_dir)
    # Its 7 updates before the failure are kept: interrupted, not failed.
    assert manifest["status"] == "interrupted" and manifest["error"] == "RuntimeError: a user callback broke"
    # The profiler was stopped: a later capture can start its own.
    cap, _ = user_loops.keras_fit(tmp_path / "after")
    assert _manifest(cap.run_dir)["status"] == "complete"


def test_keras_fit_keeps_steps_per_execution(tmp_path):
    cap, model = user_loops.keras_fit(tmp_path, steps_per_execution=4)
    assert model.steps_per_execution == 4
    manifest = _manifest(cap.run_dir)
    assert manifest["settings"]["steps_per_execution"] == 4 and manifest["steps_run"] == user_loops.BATCHES
    rows = _steps(cap.run_dir)
    assert len(rows) == user_loops.BATCHES  # one row per update, each call shared by its four
    result = breakdown_of(cap.run_dir)
    result.self_check()
    for phase in ("forward", "backward", "optimizer"):
        assert result.phase_means()[phase] > 0


def test_keras_fit_on_the_torch_backend_uses_torch_profiler(tmp_path):
    done = _in_subprocess(
        "import user_loops, pathlib, keras\n"
        "assert keras.backend.backend() == 'torch'\n"
        f"cap, model = user_loops.keras_fit(pathlib.Path({str(tmp_path)!r}))\n"
        "print(cap.run_dir)", KERAS_BACKEND="torch")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    manifest = _manifest(run_dir)
    assert manifest["status"] == "complete" and manifest["framework"] == "keras-torch"
    assert list(run_dir.glob("*.pt.trace.json.gz"))
    # The only XSpace is gapscope's view of the torch trace, for XProf's trace viewer.
    assert [p.parent.relative_to(run_dir).parts for p in run_dir.rglob("*.xplane.pb")] == \
        [EXPORTED_XSPACE_DIR]
    _assert_all_phases(run_dir, "trace", steps=4)
    # On torch the step runs eagerly: the timers see every phase too.
    _assert_all_phases(run_dir, "timers")
    # Issue 44: the Sequential model's two Dense layers by their names (the loss is no module).
    names = [layer["name"] for layer in manifest["layers"] if layer["name"] != "loss"]
    assert len(names) == 2
    keras_user_models.assert_user_layers(run_dir, names)


def test_keras_fit_on_jax_uses_jax_profiler_and_the_programs_metadata(tmp_path):
    """Issue 48: a user's own model on Keras' JAX backend. Keras' own jitted step, unmarked: the
    phases come from the XLA program's HLO metadata, the layers from their scopes in it."""
    pytest.importorskip("jax")
    done = _in_subprocess(
        "import user_loops, pathlib, keras\n"
        "assert keras.backend.backend() == 'jax'\n"
        f"cap, model = user_loops.keras_fit(pathlib.Path({str(tmp_path)!r}))\n"
        "print(cap.run_dir)", KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    manifest = _manifest(run_dir)
    assert manifest["status"] == "complete" and manifest["framework"] == "keras-jax"
    assert manifest["settings"]["backend"] == "jax"
    result = breakdown_of(run_dir, "trace")
    result.self_check()  # the phases add up to the step
    doc = result.to_json_dict()
    # Keras on JAX fetches the next batch between its callbacks' calls: no data_load in the trace.
    assert doc["unidentified_phases"] == ["data_load"] and doc["steps"] == 4
    assert all(doc["phases"][p]["ms"] > 0 for p in ("forward", "backward", "optimizer"))
    assert {doc["phase_sources"][p] for p in ("forward", "backward", "optimizer")} == {"framework markers"}
    record = json.loads((run_dir / "compile.json").read_text())
    assert [e["step"] for e in record["jax_events"] if e["function"] == "train_step"] == [0]
    # The Sequential model's two Dense layers by their names, and the loss (Keras' compile_loss
    # scope, as on TF), each inside JAX's jvp/transpose scopes.
    names = [layer["name"] for layer in manifest["layers"]]
    assert names == ["dense", "dense_1", "loss"]
    layers = keras_user_models.assert_user_layers(run_dir, names)
    # The batch, noted while JAX traced the step: dense's forward is 2 x batch x 100 x 64 + bias.
    assert layers.batch == user_loops.BATCH
    assert layers.row("dense").forward_gflop == pytest.approx(
        (2 * user_loops.BATCH * 100 * 64 + user_loops.BATCH * 64 * 2) / 1e9, rel=0.01)


@pytest.mark.parametrize("compiled", [True, False], ids=["tf.function", "eager"])
def test_gradient_tape_loop(tmp_path, compiled):
    cap = user_loops.gradient_tape_loop(tmp_path, compiled)
    manifest = _manifest(cap.run_dir)
    assert manifest["status"] == "complete" and manifest["framework"] == "tf"
    assert manifest["steps"] == user_loops.BATCHES
    doc = _assert_all_phases(cap.run_dir, "trace", steps=4)
    assert doc["phase_sources"]["forward"] == "gapscope marks"
    timers = breakdown_of(cap.run_dir, "timers")
    if compiled:
        # Inside a tf.function phases are name scopes: only the trace sees them.
        assert timers.unidentified_phases == ["forward", "backward", "optimizer"]
    else:
        _assert_all_phases(cap.run_dir, "timers")
