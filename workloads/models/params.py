"""Trainable parameter counts, counted the same way in torch and Keras."""
from __future__ import annotations

import math


def torch_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def keras_parameters(model) -> int:
    """Trainable weights only: Keras' count_params() also counts BatchNorm's moving mean and
    variance, which torch keeps as buffers, so it would differ for the same architecture."""
    return sum(math.prod(w.shape) for w in model.trainable_weights)
