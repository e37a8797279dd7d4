"""The MLP of seed 000 (dense layers with ReLU between), built identically in torch and Keras.
Layers are named by `layers(spec)`: dense1 … (ReLU inside), logits, loss."""
from __future__ import annotations

from gapscope.workloads.layer_specs import LayerSpec, dense_layers, loss_layer


def layers(spec) -> list[LayerSpec]:
    return dense_layers(spec, spec.input_shape[0], False) + [loss_layer(spec)]


def build_torch(spec):
    from collections import OrderedDict

    from torch import nn
    modules = OrderedDict()
    for layer in layers(spec)[:-1]:  # the loss is the runner's module
        linear = nn.Linear(layer.dims["inputs"], layer.dims["units"])
        # Linear and its ReLU in one named module: Keras fuses the activation into Dense.
        modules[layer.name] = nn.Sequential(linear, nn.ReLU()) if layer.activation else linear
    return nn.Sequential(modules)


def build_keras(spec):
    import keras
    built = [keras.Input(spec.input_shape)]
    # Logits out, like torch's CrossEntropyLoss expects; the loss is built from_logits.
    built += [keras.layers.Dense(layer.dims["units"], activation=layer.activation, name=layer.name)
              for layer in layers(spec)[:-1]]
    return keras.Sequential(built, name=spec.name)
