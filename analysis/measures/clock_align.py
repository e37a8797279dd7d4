"""Offsets that put every rank's trace on the reference rank's clock, estimated from when matching collectives complete."""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from gapscope.analysis.measures.collectives import Collective


@dataclass(frozen=True)
class Offset:
    """Microseconds to add to a rank's times to read them on the reference rank's clock.

    spread_us: the median absolute deviation of the matched end differences around the
    offset (0.0 on the reference's own host, None where nothing matched): how far one
    collective's completion may sit from the estimate."""

    rank: int
    offset_us: float
    matched: int           # collectives whose ends were compared (0: same host, or none matched)
    spread_us: float | None
    same_host: bool


def clock_offsets(collectives_by_rank: dict[int, list[Collective]], hosts: dict[int, str]) -> dict[int, float]:
    """rank -> microseconds to ADD to its times to put them on the lowest rank's clock."""
    return {rank: found.offset_us for rank, found in clock_alignment(collectives_by_rank, hosts).items()}


def clock_alignment(collectives_by_rank: dict[int, list[Collective]],
                    hosts: dict[int, str]) -> dict[int, Offset]:
    """clock_offsets with how each was found and how well the ends agreed.

    Ranks on the reference's host share its clock (one host, one clock): exactly 0.0. For
    another host: a collective completes on every rank only once the last rank has arrived,
    so the n-th collective of a kind ends at nearly the same instant everywhere; the median
    of the end differences is the offset, unmoved by a few ends that a descheduled thread
    recorded late. A rank with no collective to match keeps 0.0 (matched 0, spread None)."""
    ranks = sorted(set(collectives_by_rank) | set(hosts))
    if not ranks:
        return {}
    reference = ranks[0]
    ref_ends = _ends_by_kind(collectives_by_rank.get(reference, []))
    found = {}
    for rank in ranks:
        if rank == reference or (hosts.get(rank) is not None and hosts.get(rank) == hosts.get(reference)):
            found[rank] = Offset(rank, 0.0, 0, 0.0, True)
            continue
        found[rank] = offset_from_ends(rank, ref_ends, _ends_by_kind(collectives_by_rank.get(rank, [])))
    return found


def offset_from_ends(rank: int, ref_ends: dict[str, list[float]],
                     ends: dict[str, list[float]]) -> Offset:
    """The offset of a rank on another host than the reference's, from both ranks' collective
    ends per kind in order of issue: what a job's ranks streaming in one by one are reduced to."""
    differences = [ref - own for kind, mine in ends.items()
                   for ref, own in zip(ref_ends.get(kind, []), mine)]
    if not differences:
        return Offset(rank, 0.0, 0, None, False)
    offset = statistics.median(differences)
    spread = statistics.median(abs(d - offset) for d in differences)
    return Offset(rank, offset, len(differences), spread, False)


def _ends_by_kind(collectives: list[Collective]) -> dict[str, list[float]]:
    """Per kind, the ends in the rank's own order of issue (seq)."""
    ends: dict[str, list[float]] = {}
    for c in sorted(collectives, key=lambda c: c.seq):
        ends.setdefault(c.kind, []).append(c.end_us)
    return ends
