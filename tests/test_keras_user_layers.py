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
