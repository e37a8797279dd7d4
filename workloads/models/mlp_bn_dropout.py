"""Seed 000's second MLP (Linear, BatchNorm, ReLU, Dropout per hidden layer), built identically in torch and Keras.
Neither framework fuses any of them, so each is a layer of its own: dense1, bn1, relu1, dropout1,
dense2, …, logits, loss."""
from __future__ import annotations

from gapscope.workloads.layer_specs import LayerSpec, loss_layer

DROPOUT = 0.5
# Keras' defaults differ from torch's (momentum 0.99 vs 0.9 in Keras' convention, eps 1e-3 vs
# 1e-5); torch's values in both, so the two frameworks normalise the same way.
BN_MOMENTUM_TORCH, BN_EPSILON = 0.1, 1e-5


def layers(spec) -> list[LayerSpec]:
    found, width = [], spec.input_shape[0]
    for index, hidden in enumerate(spec.hidden, start=1):
        found += [LayerSpec(f"dense{index}", "dense", {"inputs": width, "units": hidden},
                            input_grad=index > 1),
                  LayerSpec(f"bn{index}", "batchnorm", {"features": hidden}),
                  LayerSpec(f"relu{index}", "relu", {"features": hidden}),
                  LayerSpec(f"dropout{index}", "dropout", {"features": hidden, "rate": DROPOUT})]
        width = hidden
    found.append(LayerSpec("logits", "dense", {"inputs": width, "units": spec.outputs},
                           input_grad=bool(spec.hidden)))
    return found + [loss_layer(spec)]


def build_torch(spec):
    from collections import OrderedDict

    from torch import nn
    made = {"dense": lambda d: nn.Linear(d["inputs"], d["units"]),
            "batchnorm": lambda d: nn.BatchNorm1d(d["features"], eps=BN_EPSILON,
                                                  momentum=BN_MOMENTUM_TORCH),
            "relu": lambda d: nn.ReLU(), "dropout": lambda d: nn.Dropout(d["rate"])}
    # The loss is the runner's module.
    return nn.Sequential(OrderedDict((layer.name, made[layer.kind](layer.dims))
                                     for layer in layers(spec)[:-1]))


def build_keras(spec):
    import keras
    made = {"dense": lambda d, name: keras.layers.Dense(d["units"], name=name),  # logits, as in mlp.py
            "batchnorm": lambda d, name: keras.layers.BatchNormalization(
                epsilon=BN_EPSILON, momentum=1 - BN_MOMENTUM_TORCH, name=name),
            "relu": lambda d, name: keras.layers.ReLU(name=name),
            "dropout": lambda d, name: keras.layers.Dropout(d["rate"], name=name)}
    built = [keras.Input(spec.input_shape)]
    built += [made[layer.kind](layer.dims, layer.name) for layer in layers(spec)[:-1]]
    return keras.Sequential(built, name=spec.name)
