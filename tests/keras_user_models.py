"""Test helper: a user's own Keras models as the Keras guides write them (functional, and a
subclassed model with nested layers), each fit through gapscope.capture_keras into a run
directory. Run as a script under KERAS_BACKEND=torch, it fits both and prints their run dirs."""
from __future__ import annotations

import sys
from pathlib import Path

import user_loops

# Hand-checked in tests/test_keras_user_layers.py: the names, and the FLOPs of the rules' layers.
FUNCTIONAL_LAYERS = ["features", "hidden", "logits", "loss"]
SUBCLASSED_LAYERS = ["block_a", "block_b", "head", "loss"]


def functional():
    import keras
    inputs = keras.Input((100,), name="pixels")
    x = keras.layers.Dense(64, activation="relu", name="features")(inputs)
    x = keras.layers.Dense(32, activation="relu", name="hidden")(x)
    return keras.Model(inputs, keras.layers.Dense(10, name="logits")(x), name="functional_net")


def subclassed():
    import keras

    class Block(keras.layers.Layer):
        """Dense, GELU and LayerNorm inside one layer: its nested layers are part of it."""

        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.dense = keras.layers.Dense(units, activation="gelu", name="dense")
            self.norm = keras.layers.LayerNormalization(name="norm")

        def call(self, x):
            return self.norm(self.dense(x))

    class Net(keras.Model):
        def __init__(self):
            super().__init__(name="subclassed_net")
            self.block_a = Block(64, name="block_a")
            self.block_b = Block(32, name="block_b")
            self.head = keras.layers.Dense(10, name="head")

        def call(self, x):
            return self.head(self.block_b(self.block_a(x)))

    return Net()


def fit(build, out: Path):
    """The model compiled and fit as a guide does it, captured; returns the capture."""
    import keras

    import gapscope
    keras.utils.set_random_seed(0)
    x, y = user_loops.data()
    model = build()
    model.compile(optimizer=keras.optimizers.SGD(0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with gapscope.capture_keras(model, build.__name__, trace_steps=user_loops.TRACE, out=out,
                                warmup_steps=user_loops.WARMUP) as cap:
        model.fit(x, y, batch_size=user_loops.BATCH, epochs=1, verbose=0, callbacks=[cap])
    return cap


def assert_user_layers(run_dir: Path, names: list[str]):
    """The run's layers are the user's, in the model's order; each has forward time; layers plus
    outside add up to the traced phase (the breakdown's, from the same trace) within 5 %, and no
    layer is counted twice (outside is not negative). Returns the layers."""
    import pytest

    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.results.distributed_breakdown import breakdown_of
    from gapscope.analysis.results.layers import layer_breakdown
    layers = layer_breakdown(load_run(run_dir))
    assert [r.name for r in layers.rows] == names, layers.notes
    assert all(r.forward_ms > 0 for r in layers.rows)
    traced = breakdown_of(run_dir, "trace").to_json_dict()["phases"]
    for phase in ("forward", "backward"):
        assert layers.outside_ms(phase) >= 0
        assert sum(r.ms(phase) for r in layers.rows) + layers.outside_ms(phase) == pytest.approx(
            traced[phase]["trace_ms"], rel=0.05)
    return layers


if __name__ == "__main__":
    for model in (functional, subclassed):
        print(fit(model, Path(sys.argv[1])).run_dir)
