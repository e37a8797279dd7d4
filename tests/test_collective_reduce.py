"""A job's collectives reduced rank by rank, in whatever order the ranks complete: the clock
offsets and who arrived last equal those from every rank's collectives at once. Hand-made: ranks
0-1 on host a, 2-3 on host b whose clock reads 1000 µs behind; each all-reduce k ends at 100k+50
on a's clock everywhere, and the ranks arrive at 100k+10, +20, +30, +25 (rank 2 last each time,
though on b's own clock rank 1 looks last)."""
from __future__ import annotations

import itertools

import pytest

from gapscope.analysis.measures.clock_align import clock_offsets
from gapscope.analysis.measures.collectives import Collective
from gapscope.analysis.results.engines.collective_reduce import CollectiveReduction, digest

HOSTS = {0: "a", 1: "a", 2: "b", 3: "b"}
ARRIVES = {0: 10.0, 1: 20.0, 2: 30.0, 3: 25.0}
SKEW = {"a": 0.0, "b": -1000.0}   # what each host's clock reads beside a's


def _collectives(rank: int) -> list[Collective]:
    shift = SKEW[HOSTS[rank]]
    return [Collective("all_reduce", 100 * k + ARRIVES[rank] + shift, 100 * k + 50 + shift, 4000,
                       k, "backward", "nccl", k) for k in range(3)]


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1)])
def test_streamed_in_any_order_the_figures_are_those_of_all_at_once(order):
    reduction = CollectiveReduction(HOSTS)
    for rank in order:
        reduction.add(rank, digest(_collectives(rank)))
    offsets, line = reduction.clocks()
    assert offsets == {0: 0.0, 1: 0.0, 2: 1000.0, 3: 1000.0}
    assert offsets == clock_offsets({r: _collectives(r) for r in HOSTS}, HOSTS)
    assert line == "2 hosts: offsets estimated from matching collective completions, applied"
    assert reduction.last_arrival() == {0: 0.0, 1: 0.0, 2: 1.0, 3: 0.0}


def test_a_failed_reference_rank_leaves_the_clocks_unaligned_and_says_so():
    reduction = CollectiveReduction(HOSTS)
    for rank in (2, 3, 1):
        reduction.add(rank, _collectives(rank))
    reduction.drop(0)
    offsets, line = reduction.clocks()
    assert offsets == {1: 0.0, 2: 0.0, 3: 0.0}
    assert line == "2 hosts; the reference rank 0 failed: clocks not aligned"


def test_one_host_ties_go_to_the_lowest_rank_as_in_rank_order():
    hosts = {0: "a", 1: "a", 2: "a"}
    same = [Collective("all_reduce", 5.0, 9.0, None, 0, "other", "gloo", 0)]
    for order in itertools.permutations(hosts):
        reduction = CollectiveReduction(hosts)
        for rank in order:
            reduction.add(rank, same)
        assert reduction.clocks() == ({0: 0.0, 1: 0.0, 2: 0.0}, None)
        assert reduction.last_arrival() == {0: 1.0, 1: 0.0, 2: 0.0}
