"""Seed 002's MNIST CNN (4 Conv2D layers, a 2-layer dense head, 563,018 parameters) in torch and Keras.

The blog gives only "4 Conv2D layers, a small 2-layer FCN, around 563,000 parameters"; this
3x3 'valid' stack with one 2x2 pooling lands within 0.01 % of that:
  28x28x1 -> conv 32 -> 26 -> conv 32 -> 24 -> pool -> 12 -> conv 32 -> 10 -> conv 64 -> 8
  -> flatten 8*8*64 = 4096 -> dense 128 -> dense 10 (logits)
  320 + 9,248 + 9,248 + 18,496 + 524,416 + 1,290 = 563,018.
torch takes NCHW batches (workloads.data.to_torch_layout), Keras the NHWC the data comes in."""
from __future__ import annotations

FILTERS = (32, 32, 32, 64)
POOL_AFTER = 1          # index of the conv layer followed by 2x2 max pooling
KERNEL = 3


def _feature_side(side: int) -> int:
    for index in range(len(FILTERS)):
        side -= KERNEL - 1
        if index == POOL_AFTER:
            side //= 2
    return side


def build_torch(spec):
    from torch import nn
    side, channels = spec.input_shape[0], spec.input_shape[-1]
    layers = []
    for index, filters in enumerate(FILTERS):
        layers += [nn.Conv2d(channels, filters, KERNEL), nn.ReLU()]
        if index == POOL_AFTER:
            layers.append(nn.MaxPool2d(2))
        channels = filters
    flat = channels * _feature_side(side) ** 2
    layers.append(nn.Flatten())
    for width in spec.hidden:
        layers += [nn.Linear(flat, width), nn.ReLU()]
        flat = width
    layers.append(nn.Linear(flat, spec.outputs))
    return nn.Sequential(*layers)


def build_keras(spec):
    import keras
    layers = [keras.Input(spec.input_shape)]
    for index, filters in enumerate(FILTERS):
        # Pinned, so a keras.json preferring channels_first cannot change what is measured.
        layers.append(keras.layers.Conv2D(filters, KERNEL, activation="relu",
                                          data_format="channels_last"))
        if index == POOL_AFTER:
            layers.append(keras.layers.MaxPooling2D(2, data_format="channels_last"))
    layers.append(keras.layers.Flatten())
    layers += [keras.layers.Dense(width, activation="relu") for width in spec.hidden]
    layers.append(keras.layers.Dense(spec.outputs))  # logits; the loss is built from_logits
    return keras.Sequential(layers, name=spec.name)
