"""The data one rank of a distributed run trains on, for every framework's runner."""
from __future__ import annotations

from dataclasses import replace


def rank_shard(spec, settings, rank: int, world_size: int, raw: bool = False):
    """(x, y) of one rank: samples rank::world_size of the data the whole job trains on, so
    every rank runs its steps at the workload's batch in one pass, on samples no other rank
    sees (a step count: world_size times the samples of one process's run)."""
    from workloads.datasets import dataset_for
    x, y = dataset_for(spec, replace(settings, steps=settings.steps * world_size), raw=raw)
    return x[rank::world_size], y[rank::world_size]
