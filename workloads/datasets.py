"""The data of one run: how many samples a run needs, loaded through workloads.data."""
from __future__ import annotations

from workloads.settings import RunSettings
from workloads.spec import WorkloadSpec


def dataset_for(spec: WorkloadSpec, settings: RunSettings, raw: bool = False):
    """(x, y) as NumPy arrays: the whole data set for epoch runs; for a step count only as
    many samples as the steps consume (a short run needs no 60,000-image epoch)."""
    from workloads.data import load_dataset
    samples = None if settings.epochs else min(spec.samples, spec.batch_size * settings.steps)
    return load_dataset(spec, samples=samples, data_path=settings.data_path, raw=raw)
