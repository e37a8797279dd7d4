"""Seed 000's second MLP (Linear, BatchNorm, ReLU, Dropout per hidden layer), built identically in torch and Keras."""
from __future__ import annotations

DROPOUT = 0.5
# Keras' defaults differ from torch's (momentum 0.99 vs 0.9 in Keras' convention, eps 1e-3 vs
# 1e-5); torch's values in both, so the two frameworks normalise the same way.
BN_MOMENTUM_TORCH, BN_EPSILON = 0.1, 1e-5


def build_torch(spec):
    from torch import nn
    layers, width = [], spec.input_shape[0]
    for hidden in spec.hidden:
        layers += [nn.Linear(width, hidden),
                   nn.BatchNorm1d(hidden, eps=BN_EPSILON, momentum=BN_MOMENTUM_TORCH),
                   nn.ReLU(), nn.Dropout(DROPOUT)]
        width = hidden
    layers.append(nn.Linear(width, spec.outputs))
    return nn.Sequential(*layers)


def build_keras(spec):
    import keras
    layers = [keras.Input(spec.input_shape)]
    for hidden in spec.hidden:
        layers += [keras.layers.Dense(hidden),
                   keras.layers.BatchNormalization(epsilon=BN_EPSILON,
                                                   momentum=1 - BN_MOMENTUM_TORCH),
                   keras.layers.ReLU(), keras.layers.Dropout(DROPOUT)]
    layers.append(keras.layers.Dense(spec.outputs))  # logits, as in mlp.py
    return keras.Sequential(layers, name=spec.name)
