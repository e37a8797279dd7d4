"""Issue 44 item 2: a user's own Keras model captured with gapscope.capture_keras (functional,
Sequential, subclassed with nested layers; Keras on TF and on torch) gets per-layer figures by
its own layer names, nested layers inside their top-level layer, and the FLOPs the Keras layer
rules count. The Sequential model is test_capture_api's (its fits check the same here)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import keras_user_models as models

ROOT = Path(__file__).resolve().parent.parent
BATCH = 64  # user_loops.BATCH


@pytest.fixture(scope="module")
def tf_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("keras_user_tf")
    return {build.__name__: models.fit(build, out).run_dir for build in (models.functional, models.subclassed)}


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory):
    """Keras fixes its backend at import: the torch backend's fits run in a process of their own."""
    out = tmp_path_factory.mktemp("keras_user_torch")
    env = {**os.environ, "KERAS_BACKEND": "torch",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "keras_user_models.py"), str(out)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    functional, subclassed = (Path(line) for line in done.stdout.strip().splitlines()[-2:])
    return {"functional": functional, "subclassed": subclassed}


def _gflop(forward: int, backward: int) -> tuple[float, float]:
    return forward / 1e9, backward / 1e9


# By hand, batch 64 (layer_flops' rules): features Dense 100->64 + ReLU, the first layer with
# weights (no input gradient): GEMM 2*64*64*100 = 819,200, bias and ReLU 2*64*64 = 8,192, so
# forward 827,392 and backward 819,200 + 8,192. hidden 64->32 + ReLU: GEMM 262,144, 4,096 more;
# backward 2*262,144 + 4,096. logits / head 32->10: GEMM 40,960 + bias 640; backward 81,920 + 640.
# Cross-entropy on 10 logits: forward 4*640 + 2*64 = 2,688, backward 2*640 = 1,280.
FLOPS = {"features": _gflop(827_392, 827_392), "hidden": _gflop(266_240, 528_384),
         "logits": _gflop(41_600, 82_560), "head": _gflop(41_600, 82_560), "loss": _gflop(2_688, 1_280)}


def _check_flops(layers, names):
    for name in names:
        row = layers.row(name)
        # The JSON keeps GFLOP to 6 decimals.
        assert (row.forward_gflop, row.backward_gflop) == pytest.approx(FLOPS[name], abs=5e-7), name
        assert row.gflops("forward") == pytest.approx(row.forward_gflop / (row.forward_ms / 1000.0))


def test_functional_model_on_tensorflow(tf_runs):
    layers = models.assert_user_layers(tf_runs["functional"], models.FUNCTIONAL_LAYERS)
    _check_flops(layers, models.FUNCTIONAL_LAYERS)
    assert layers.row("features").params == 100 * 64 + 64 and layers.batch == BATCH


def test_subclassed_model_with_nested_layers_on_tensorflow(tf_runs):
    """Each Block's Dense, GELU and LayerNorm are that block's (TF scopes block_a/dense/…); a
    Block has no FLOP rule (GELU and LayerNorm have none), said in a note; its parameters are
    Keras' own count (Dense 100*64 + 64, LayerNorm 2*64)."""
    layers = models.assert_user_layers(tf_runs["subclassed"], models.SUBCLASSED_LAYERS)
    _check_flops(layers, ["head", "loss"])
    assert layers.row("block_a").forward_gflop is None and layers.row("block_a").params == 100 * 64 + 64 + 2 * 64
    assert any("no FLOP rule for block_a (Block), block_b (Block)" in note for note in layers.notes)


def test_keras_on_torch_layers_are_module_ranges_in_the_trace(torch_runs):
    """On the torch backend a Keras layer is a torch module: the layer ranges of the seed
    Keras-on-torch runs wrap the user's top-level layers; Keras' compute_loss is no module, so
    the loss is outside layers."""
    layers = models.assert_user_layers(torch_runs["functional"], models.FUNCTIONAL_LAYERS[:-1])
    _check_flops(layers, models.FUNCTIONAL_LAYERS[:-1])
    assert all(r.backward_ms > 0 for r in layers.rows)
    nested = models.assert_user_layers(torch_runs["subclassed"], models.SUBCLASSED_LAYERS[:-1])
    _check_flops(nested, ["head"])


def test_without_a_batch_size_the_layers_have_no_flops_and_say_why(tf_runs, tmp_path):
    """A run whose manifest names no batch size (TF traced the step for any batch) keeps its
    layers and times, with no FLOPs and the note that says how to give it; a bad batch_size is
    refused before anything is created."""
    import json
    import shutil

    import keras

    import gapscope
    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.results.layers import layer_breakdown
    run_dir = tmp_path / tf_runs["functional"].name
    shutil.copytree(tf_runs["functional"], run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    del manifest["workload_spec"]
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    layers = layer_breakdown(load_run(run_dir))
    assert [r.name for r in layers.rows] == models.FUNCTIONAL_LAYERS
    assert all(r.forward_gflop is None and r.forward_ms > 0 for r in layers.rows)
    assert any("batch_size=N" in note for note in layers.notes)
    with pytest.raises(ValueError, match="batch_size"):
        gapscope.capture_keras(keras.Sequential([keras.layers.Dense(2)]), "x", out=tmp_path, batch_size=0)


def test_suffixed_scopes_are_read_as_the_models_layers_in_forward_order():
    """TF's scopes in a real Keras fit of Sequential([Dense "dense" (ReLU), Dense "dense_1"])
    (test_memory's loop, 2026-11-28): the layer dense ran as `dense_1`, the layer dense_1 as
    `dense_1_2`, and TF read the variables of both first. Each scope is one layer: `dense_1_2`
    only by its order (the first computing op of `dense_1` runs before that of `dense_1_2`)."""
    from gapscope.analysis.events.trace import HOST_OP, Event, Trace
    from gapscope.analysis.measures.layer_times import scope_layer, scope_names
    head = "StatefulPartitionedCall/gapscope_forward/sequential_1/"
    ops = [(870.8, "dense_1_2/Cast/ReadVariableOp:ReadVariableOp"),
           (1449.4, "dense_1/BiasAdd/ReadVariableOp:ReadVariableOp"),
           (2096.5, "dense_1/Relu:_MklNativeFusedMatMul"), (2609.5, "dense_1_2/Add:_MklNativeFusedMatMul")]
    trace = Trace("xplane", "x", [Event(head + name, HOST_OP, start, 10.0, "host/0/1") for start, name in ops])
    resolved = scope_names(trace, ["dense", "dense_1", "loss"])
    assert resolved == {"dense_1": "dense", "dense_1_2": "dense_1"}
    gradient = "StatefulPartitionedCall/gradient_tape/gapscope_forward/sequential_1/dense_1_2/MatMul/MatMul"
    assert scope_layer(gradient, {"dense", "dense_1", "loss"}, resolved) == ("dense_1", "backward")
    # Unambiguous scopes need no order: `hidden_1` can be `hidden` only.
    trace = Trace("xplane", "x", [Event(head + "hidden_1/Relu:Relu", HOST_OP, 5.0, 1.0, "host/0/1")])
    assert scope_names(trace, ["hidden", "logits"]) == {"hidden_1": "hidden"}
