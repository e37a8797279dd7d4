"""Seed 002's MNIST CNN (4 Conv2D layers, a 2-layer dense head, 563,018 parameters) in torch and Keras.

The blog gives only "4 Conv2D layers, a small 2-layer FCN, around 563,000 parameters"; this
3x3 'valid' stack with one 2x2 pooling lands within 0.01 % of that:
  28x28x1 -> conv 32 -> 26 -> conv 32 -> 24 -> pool -> 12 -> conv 32 -> 10 -> conv 64 -> 8
  -> flatten 8*8*64 = 4096 -> dense 128 -> dense 10 (logits)
  320 + 9,248 + 9,248 + 18,496 + 524,416 + 1,290 = 563,018.
torch takes NCHW batches (workloads.data.to_torch_layout), Keras the NHWC the data comes in.
Layers are named by `layers(spec)`: conv1 … conv4 (ReLU inside), pool, flatten, dense1,
logits, loss."""
from __future__ import annotations

from gapscope.workloads.layer_specs import LayerSpec, dense_layers, loss_layer

FILTERS = (32, 32, 32, 64)
POOL_AFTER = 1          # index of the conv layer followed by 2x2 max pooling
KERNEL = 3
POOL = 2


def layers(spec) -> list[LayerSpec]:
    side, channels = spec.input_shape[0], spec.input_shape[-1]
    found = []
    for index, filters in enumerate(FILTERS):
        found.append(LayerSpec(f"conv{index + 1}", "conv2d",
                               {"height": side, "width": side, "in_channels": channels,
                                "out_channels": filters, "kernel": KERNEL}, "relu", index > 0))
        side, channels = side - (KERNEL - 1), filters
        if index == POOL_AFTER:
            found.append(LayerSpec("pool", "maxpool2d", {"height": side, "width": side,
                                                         "channels": channels, "size": POOL}))
            side //= POOL
    found.append(LayerSpec("flatten", "flatten", {"features": side * side * channels}))
    return found + dense_layers(spec, side * side * channels, True) + [loss_layer(spec)]


def build_torch(spec):
    from collections import OrderedDict

    from torch import nn
    modules = OrderedDict()
    for layer in layers(spec)[:-1]:  # the loss is the runner's module
        dims = layer.dims
        if layer.kind == "conv2d":
            # Conv and its ReLU in one named module: Keras fuses the activation into Conv2D.
            modules[layer.name] = nn.Sequential(
                nn.Conv2d(dims["in_channels"], dims["out_channels"], dims["kernel"]), nn.ReLU())
        elif layer.kind == "maxpool2d":
            modules[layer.name] = nn.MaxPool2d(dims["size"])
        elif layer.kind == "flatten":
            modules[layer.name] = nn.Flatten()
        else:
            linear = nn.Linear(dims["inputs"], dims["units"])
            modules[layer.name] = nn.Sequential(linear, nn.ReLU()) if layer.activation else linear
    return nn.Sequential(modules)


def build_keras(spec):
    import keras
    built = [keras.Input(spec.input_shape)]
    for layer in layers(spec)[:-1]:
        dims = layer.dims
        # Pinned, so a keras.json preferring channels_first cannot change what is measured.
        if layer.kind == "conv2d":
            built.append(keras.layers.Conv2D(dims["out_channels"], dims["kernel"],
                                             activation=layer.activation,
                                             data_format="channels_last", name=layer.name))
        elif layer.kind == "maxpool2d":
            built.append(keras.layers.MaxPooling2D(dims["size"], data_format="channels_last",
                                                   name=layer.name))
        elif layer.kind == "flatten":
            built.append(keras.layers.Flatten(name=layer.name))
        else:  # dense; the logits' loss is built from_logits
            built.append(keras.layers.Dense(dims["units"], activation=layer.activation,
                                            name=layer.name))
    return keras.Sequential(built, name=spec.name)
