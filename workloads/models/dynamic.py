"""Seed 001's data-dependent control flow: a layer or a ReLU chosen by the batch mean, in torch and Keras.

The seed's branches give different widths (Linear(10, 1) vs ReLU of 10 features); here the
linear layer is 10 -> 10 so both branches agree, and a shared head maps to one value."""
from __future__ import annotations

THRESHOLD = 0.5


def build_torch(spec):
    import torch
    from torch import nn

    class DynamicModel(nn.Module):
        def __init__(self):
            super().__init__()
            width = spec.input_shape[0]
            self.linear = nn.Linear(width, width)
            self.head = nn.Linear(width, spec.outputs)

        def forward(self, x):
            # A Python `if` on a tensor's value, as in the seed: eager torch syncs to read it,
            # torch.compile has to break the graph (or specialise) here.
            if torch.mean(x) > THRESHOLD:
                x = self.linear(x)
            else:
                x = torch.relu(x)
            return self.head(x)

    return DynamicModel()


def build_keras(spec):
    import keras
    from keras import ops

    class MeanSwitch(keras.layers.Layer):
        """Both branches live in the graph (tf.cond / XLA conditional); one runs per batch."""

        def __init__(self, width, **kwargs):
            super().__init__(**kwargs)
            self.linear = keras.layers.Dense(width)

        def build(self, input_shape):
            # Weights made here, not on first call inside a cond branch, where graph tracing
            # would create them in a branch-local scope.
            self.linear.build(input_shape)

        def call(self, x):
            return ops.cond(ops.mean(x) > THRESHOLD, lambda: self.linear(x), lambda: ops.relu(x))

    inputs = keras.Input(spec.input_shape)
    switched = MeanSwitch(spec.input_shape[0], name="mean_switch")(inputs)
    return keras.Model(inputs, keras.layers.Dense(spec.outputs)(switched), name=spec.name)
