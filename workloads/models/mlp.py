"""The MLP of seed 000 (dense layers with ReLU between), built identically in torch and Keras."""
from __future__ import annotations


def build_torch(spec):
    from torch import nn
    layers, width = [], spec.input_shape[0]
    for hidden in spec.hidden:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, spec.num_classes))
    return nn.Sequential(*layers)


def build_keras(spec):
    import keras
    layers = [keras.Input(spec.input_shape)]
    layers += [keras.layers.Dense(h, activation="relu") for h in spec.hidden]
    # Logits out, like torch's CrossEntropyLoss expects; the loss is built from_logits.
    layers.append(keras.layers.Dense(spec.num_classes))
    return keras.Sequential(layers, name=spec.name)
