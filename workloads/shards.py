"""The data one rank of a distributed run trains on, for every framework's runner."""
from __future__ import annotations

from dataclasses import replace


def rank_shard(spec, settings, rank: int, world_size: int, raw: bool = False):
    """(x, y) of one rank: samples rank::world_size of the data the whole job trains on, so
    every rank runs its steps at the workload's batch in one pass, on samples no other rank
    sees (a step count: world_size times the samples of one process's run)."""
    from gapscope.workloads.datasets import dataset_for
    x, y = dataset_for(spec, replace(settings, steps=settings.steps * world_size), raw=raw)
    return shard(x, y, rank, world_size)


def shard(x, y, rank: int, world: int, per_rank_samples: int | None = None):
    """Rank `rank`'s samples `rank::world`, cut to `per_rank_samples` where given, so that every
    rank runs the same number of full steps (a rank with a step more would wait on its peers
    for ever)."""
    return x[rank::world][:per_rank_samples], y[rank::world][:per_rank_samples]
