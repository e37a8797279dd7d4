"""A job's collectives reduced as its ranks stream in, never gathered whole: each rank's are cut
to a digest in its worker (kind, order, start, end: numbers, not objects), and the driver keeps
only the reference rank's ends (for the clock offsets) and, per collective sequence, who
arrived last so far: a few numbers per collective, not per collective and rank."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gapscope.analysis.measures.clock_align import offset_from_ends


@dataclass
class Digest:
    """One rank's collectives per kind, in its order of issue (seq)."""

    seq: dict[str, np.ndarray] = field(default_factory=dict)
    start_us: dict[str, np.ndarray] = field(default_factory=dict)
    end_us: dict[str, np.ndarray] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return any(len(v) for v in self.seq.values())

    def ends(self) -> dict[str, list[float]]:
        return {kind: [float(e) for e in ends] for kind, ends in self.end_us.items()}


def digest(collectives) -> Digest:
    """Collectives (analysis.measures.collectives.Collective) as a Digest; a Digest as it is."""
    if isinstance(collectives, Digest):
        return collectives
    out = Digest()
    by_kind: dict[str, list] = {}
    for c in sorted(collectives, key=lambda c: c.seq):
        by_kind.setdefault(c.kind, []).append(c)
    for kind, items in by_kind.items():
        out.seq[kind] = np.array([c.seq for c in items], np.int64)
        out.start_us[kind] = np.array([c.start_us for c in items], float)
        out.end_us[kind] = np.array([c.end_us for c in items], float)
    return out


class CollectiveReduction:
    """Clock offsets between hosts and the share of collectives each rank reached last, fed one
    rank at a time in any order; the same figures as from every rank's collectives at once."""

    def __init__(self, hosts: dict[int, str | None]) -> None:
        self.hosts = dict(hosts)
        self.known = {h for h in self.hosts.values() if h}
        self.reference = min(self.hosts) if self.hosts else None
        self._ref_ends: dict[str, list[float]] | None = None
        self._waiting: dict[int, Digest] = {}  # other hosts' ranks in before the reference
        self._offsets: dict[int, float] = {}
        self._ranks: set[int] = set()
        self._empty: set[int] = set()
        self._reference_failed = False
        self._last: dict[tuple[str, int], list] = {}  # (kind, seq) -> [latest arrival, its rank, ranks]

    def add(self, rank: int, collectives) -> None:
        found = digest(collectives)
        self._ranks.add(rank)
        if not found:
            self._empty.add(rank)
        if rank == self.reference:
            self._ref_ends = found.ends()
            self._fold(rank, found, 0.0)
            for waiting, held in sorted(self._waiting.items()):
                self._place(waiting, held)
            self._waiting.clear()
        elif self._ref_ends is None and self._needs_reference(rank):
            self._waiting[rank] = found
        else:
            self._place(rank, found)

    def drop(self, rank: int) -> None:
        """A rank that failed: a missing rank, so nothing is said of who arrived last; without
        the reference rank no offset can be measured."""
        self.hosts.pop(rank, None)
        self._waiting.pop(rank, None)
        self._reference_failed |= rank == self.reference

    def _needs_reference(self, rank: int) -> bool:
        host = self.hosts.get(rank)
        return len(self.known) > 1 and not (host is not None and host == self.hosts.get(self.reference))

    def _place(self, rank: int, found: Digest) -> None:
        offset = 0.0
        if self._needs_reference(rank):
            offset = offset_from_ends(rank, self._ref_ends or {}, found.ends()).offset_us
        self._fold(rank, found, offset)

    def _fold(self, rank: int, found: Digest, offset: float) -> None:
        self._offsets[rank] = offset
        for kind, seqs in found.seq.items():
            for seq, start in zip(seqs.tolist(), found.start_us[kind].tolist()):
                arrival = start + offset
                entry = self._last.get((kind, seq))
                if entry is None:
                    self._last[(kind, seq)] = [arrival, rank, 1]
                    continue
                entry[2] += 1
                # The latest arrival; of equal ones the lowest rank, as the ranks in order would say.
                if arrival > entry[0] or (arrival == entry[0] and rank < entry[1]):
                    entry[0], entry[1] = arrival, rank

    def clocks(self) -> tuple[dict[int, float], str | None]:
        """Offsets per rank present (µs to add) and what the clocks line says (None: one host)."""
        zeros = {r: 0.0 for r in self.hosts}
        known = {h for h in self.hosts.values() if h}  # of the ranks present
        if len(known) > 1:
            if self._reference_failed:
                return zeros, (f"{len(known)} hosts; the reference rank {self.reference} "
                               "failed: clocks not aligned")
            if self._empty & set(self.hosts) or not all(r in self._ranks for r in self.hosts):
                return zeros, f"{len(known)} hosts, no collectives in the traces: clocks not aligned"
            return ({r: float(self._offsets.get(r, 0.0)) for r in sorted(self.hosts)},
                    f"{len(known)} hosts: offsets estimated from matching collective "
                    "completions, applied")
        return zeros, None if known else "hosts unknown: clocks taken as one"

    def last_arrival(self) -> dict[int, float]:
        """Per rank, the share of the collectives every rank issued that it reached last."""
        ranks = self._ranks & set(self.hosts) if self.hosts else self._ranks
        matched = [e for e in self._last.values() if e[2] == len(ranks)]
        if not matched or len(ranks) < 2:
            return {}
        counts = {r: 0 for r in sorted(ranks)}
        for _, rank, _ in matched:
            counts[rank] += 1
        return {r: n / len(matched) for r, n in counts.items()}
