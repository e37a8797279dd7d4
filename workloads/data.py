"""Deterministic synthetic data that a model can learn, shaped like the real data sets."""
from __future__ import annotations

import numpy as np


def synthetic_classification(samples: int, input_shape: tuple[int, ...], num_classes: int,
                             seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian inputs labelled by a fixed random linear teacher, so the labels are a function
    of the inputs (the loss falls) and the same seed gives the same bytes in every framework."""
    rng = np.random.default_rng(seed)
    features = int(np.prod(input_shape))
    teacher = rng.standard_normal((features, num_classes)) / np.sqrt(features)
    x = rng.standard_normal((samples, features), dtype=np.float32)
    # A little label noise keeps the task from being perfectly separable, as real data is.
    logits = x @ teacher + 0.1 * rng.standard_normal((samples, num_classes))
    y = logits.argmax(axis=1).astype(np.int64)
    return x.reshape((samples, *input_shape)), y
