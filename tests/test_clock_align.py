"""Clock offsets across ranks: exactly zero on one host, recovered from matching collective ends across hosts."""
from __future__ import annotations

from pathlib import Path

import pytest

from gapscope.analysis.measures.clock_align import clock_alignment, clock_offsets
from gapscope.analysis.measures.collectives import Collective, find_collectives
from gapscope.analysis.readers.torch_trace import read_torch_trace
from gapscope.analysis.events.timeline import phase_timeline

FIXTURES = Path(__file__).parent / "fixtures" / "distributed"


def _collectives(name: str) -> list[Collective]:
    trace = read_torch_trace(FIXTURES / name)
    return find_collectives(trace, phase_timeline(trace))


def test_ranks_on_one_host_share_its_clock_exactly():
    # The real gloo run's ranks ran on one host: their ends differ by milliseconds (a
    # descheduled gloo thread records its end late on a loaded 2-core machine), which an
    # estimate would take for clock skew; one host has one clock, so the offset is 0.0.
    found = {0: _collectives("gloo_rank0_two_steps.pt.trace.json"),
             1: _collectives("gloo_rank1_two_steps.pt.trace.json")}
    assert max(abs(a.end_us - b.end_us) for a, b in zip(found[0], found[1])) > 500
    assert clock_offsets(found, {0: "vm", 1: "vm"}) == {0: 0.0, 1: 0.0}
    assert clock_alignment(found, {0: "vm", 1: "vm"})[1].same_host


def test_a_known_shift_on_another_host_is_recovered_within_microseconds():
    # Rank 1's fixture: the same job with every time shifted by +12.345 ms and its NCCL
    # kernels' ends jittered by +2, -3, +1, +4 µs.
    found = {0: _collectives("nccl_rank0_two_steps.pt.trace.json"),
             1: _collectives("nccl_rank1_shifted_two_steps.pt.trace.json")}
    offsets = clock_offsets(found, {0: "node-a", 1: "node-b"})
    assert offsets[0] == 0.0
    assert offsets[1] == pytest.approx(-12345.0, abs=3.0)
    detail = clock_alignment(found, {0: "node-a", 1: "node-b"})[1]
    assert detail.matched == 4 and not detail.same_host
    assert detail.spread_us == pytest.approx(1.5)  # ends' median distance from the estimate
    # On the reference's clock the matching ends agree to the jitter (each at most 3 µs from
    # the median jitter of 1.5).
    for a, b in zip(found[0], found[1]):
        assert abs(b.end_us + offsets[1] - a.end_us) <= 4.5


def _synthetic(ends: list[float], kind: str = "all_reduce") -> list[Collective]:
    return [Collective(kind, end - 100.0, end, 4096, i, "backward", "gloo", i)
            for i, end in enumerate(ends)]


def test_noisy_ends_take_the_median_not_the_mean():
    reference = [1000.0 * i for i in range(1, 10)]
    # Rank 1's clock runs 5 ms behind; two of its nine ends were recorded 3 ms late.
    shifted = [end - 5000.0 for end in reference]
    shifted[2] += 3000.0
    shifted[6] += 3000.0
    found = {0: _synthetic(reference), 1: _synthetic(shifted)}
    offset = clock_offsets(found, {0: "a", 1: "b"})[1]
    assert offset == pytest.approx(5000.0)
    mean = sum(r - s for r, s in zip(reference, shifted)) / len(reference)
    assert abs(mean - 5000.0) > 600  # what an average would have said
    assert clock_alignment(found, {0: "a", 1: "b"})[1].spread_us == 0.0


def test_matching_is_per_kind_in_issue_order_and_reference_is_the_lowest_rank():
    # Ranks 2 and 3; 3 on the reference's host, 5 on another. Rank 5 lacks the first
    # broadcast: matching the n-th of each kind keeps its all-reduces paired right.
    reference = _synthetic([100.0, 300.0]) + [
        Collective("broadcast", 150.0, 200.0, None, 0, "other", "nccl", 9),
        Collective("broadcast", 350.0, 400.0, None, 0, "other", "nccl", 10)]
    other = [Collective(c.kind, c.start_us + 70.0, c.end_us + 70.0, c.nbytes, c.step, c.phase,
                        c.source, c.seq) for c in _synthetic([100.0, 300.0])]
    found = {3: list(reference), 2: list(reference), 5: other}
    offsets = clock_offsets(found, {2: "a", 3: "a", 5: "b"})
    assert offsets == {2: 0.0, 3: 0.0, 5: pytest.approx(-70.0)}


def test_a_rank_with_nothing_to_match_keeps_zero_and_says_so():
    found = {0: _synthetic([10.0, 20.0]), 1: []}
    detail = clock_alignment(found, {0: "a", 1: "b"})[1]
    assert (detail.offset_us, detail.matched, detail.spread_us) == (0.0, 0, None)
