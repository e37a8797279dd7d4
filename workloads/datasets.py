"""The data of one run: how many samples a run needs, loaded through workloads.data."""
from __future__ import annotations

import numpy as np

from gapscope.workloads.settings import RunSettings
from gapscope.workloads.spec import WorkloadSpec


def dataset_for(spec: WorkloadSpec, settings: RunSettings, raw: bool = False):
    """(x, y) as NumPy arrays: the whole epoch for epoch runs; for a step count exactly the
    samples the steps consume, taken from the one cached epoch (and repeated if the steps
    need more), so that every framework runs exactly that many updates in one pass."""
    from gapscope.workloads.data import load_dataset
    x, y = load_dataset(spec, data_path=settings.data_path, raw=raw)
    if settings.epochs:
        return x, y
    samples = spec.batch_size * settings.steps
    if samples > len(x):
        repeats = -(-samples // len(x))
        x, y = np.concatenate([x] * repeats), np.concatenate([y] * repeats)
    return x[:samples], y[:samples]
