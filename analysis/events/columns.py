"""A trace's events as numpy columns: a few bytes per event instead of an object, for the passes over every event of a large trace."""
from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass, field

import numpy as np

from gapscope.analysis.events import intervals
from gapscope.analysis.events.event import STEP, Event, EventKind

NONE = -(1 << 63)  # an absent correlation id (the smallest int64)
_KINDS = tuple(EventKind)


@dataclass
class EventColumns:
    """Row i is one complete event. Kind and track come as one id into `wheres` (events of a
    track share both); names as ids into `names`; the few step numbers and byte counts by row."""

    start_us: np.ndarray     # float64
    dur_us: np.ndarray       # float64
    where: np.ndarray        # int32 -> wheres
    name: np.ndarray         # int32 -> names
    correlation: np.ndarray  # int64, NONE where absent
    names: list[str]
    wheres: list[tuple[EventKind, str]]  # (kind, track)
    step_nums: dict[int, int | None]     # row -> step number, for every STEP row
    nbytes: dict[int, int]               # row -> bytes, for the copies and sets that say
    stats: dict[int, dict] = field(default_factory=dict)  # row -> Event.stats, for the few that keep any
    _made: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # _per_row's

    def __len__(self) -> int:
        return len(self.start_us)

    def kind_codes(self) -> np.ndarray:
        """Per row, the index of its kind in EventKind (compare with `code(kind)`); read-only."""
        return self._per_row("kind_codes", [code(kind) for kind, _ in self.wheres], np.uint8)

    def on_host(self) -> np.ndarray:
        """Per row, whether it is on a host track; read-only."""
        return self._per_row("on_host", [track.startswith("host") for _, track in self.wheres], bool)

    def union(self, selected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """intervals.union_of the rows `selected` (a mask), made once per selection: several
        figures ask for the host ops' union, each a sort of millions of rows; read-only."""
        key = hashlib.blake2b(np.packbits(selected).tobytes(), digest_size=16).digest()
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = intervals.union_of(self.start_us, self.dur_us, selected)
            for column in found:
                column.flags.writeable = False
        return found

    def _per_row(self, key: str, per_where: list, dtype) -> np.ndarray:
        # Made once: a breakdown asks for each a dozen times, each a pass over every row.
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = np.array(per_where, dtype)[self.where]
            found.flags.writeable = False
        return found

    def event(self, row: int) -> Event:
        kind, track = self.wheres[self.where[row]]
        correlation = int(self.correlation[row])
        return Event(self.names[self.name[row]], kind, float(self.start_us[row]),
                     float(self.dur_us[row]), track, self.step_nums.get(row),
                     None if correlation == NONE else correlation, self.nbytes.get(row),
                     stats=self.stats.get(row))

    def events(self) -> list[Event]:
        """Every row as an Event, for the analyzers that walk objects (kernels, compile)."""
        names, wheres, steps, nbytes, stats = (self.names, self.wheres, self.step_nums, self.nbytes,
                                               self.stats)
        rows = zip(self.start_us.tolist(), self.dur_us.tolist(), self.where.tolist(),
                   self.name.tolist(), self.correlation.tolist())
        found = []
        for row, (start, dur, where, name, correlation) in enumerate(rows):
            kind, track = wheres[where]
            found.append(Event(names[name], kind, start, dur, track, steps.get(row),
                               None if correlation == NONE else correlation, nbytes.get(row),
                               stats=stats.get(row)))
        return found

    def without(self, rows) -> "EventColumns":
        """These columns less the given rows (renumbering the rows of step_nums and nbytes)."""
        keep = np.ones(len(self), bool)
        keep[list(rows)] = False
        new_row = np.cumsum(keep) - 1
        return EventColumns(self.start_us[keep], self.dur_us[keep], self.where[keep],
                            self.name[keep], self.correlation[keep], self.names, self.wheres,
                            {int(new_row[r]): n for r, n in self.step_nums.items() if keep[r]},
                            {int(new_row[r]): n for r, n in self.nbytes.items() if keep[r]},
                            {int(new_row[r]): n for r, n in self.stats.items() if keep[r]})

    @classmethod
    def of_events(cls, events: list[Event]) -> "EventColumns":
        builder = ColumnsBuilder()
        for e in events:
            builder.add(e.name, e.kind, e.track, e.start_us, e.dur_us, e.correlation, e.step_num,
                        e.nbytes, e.stats)
        return builder.build()


def code(kind: EventKind) -> int:
    return _KINDS.index(kind)


class ColumnsBuilder:
    """Columns grown an event at a time by appends to typed arrays: no object per event, and
    the decoder's floats die with their chunk instead of living on in millions of Events."""

    def __init__(self):
        self.start_us, self.dur_us = array("d"), array("d")
        self.where, self.name, self.correlation = array("i"), array("i"), array("q")
        self.names: dict[str, int] = {}
        self.wheres: dict[tuple[EventKind, str], int] = {}
        self.step_nums: dict[int, int | None] = {}
        self.nbytes: dict[int, int] = {}
        self.stats: dict[int, dict] = {}

    def name_id(self, name: str) -> int:
        return self.names.setdefault(name, len(self.names))

    def where_id(self, kind: EventKind, track: str) -> int:
        return self.wheres.setdefault((kind, track), len(self.wheres))

    def add(self, name: str, kind: EventKind, track: str, start_us: float, dur_us: float,
            correlation: int | None = None, step_num: int | None = None,
            nbytes: int | None = None, stats: dict | None = None) -> None:
        """One event. The torch reader's hot loop does the same appends inline."""
        row = len(self.start_us)
        self.start_us.append(start_us)
        self.dur_us.append(dur_us)
        self.where.append(self.where_id(kind, track))
        self.name.append(self.name_id(name))
        self.add_correlation(correlation)
        if kind == STEP:
            self.step_nums[row] = step_num
        if nbytes is not None:
            self.nbytes[row] = nbytes
        if stats:
            self.stats[row] = stats

    def add_correlation(self, correlation: int | None) -> None:
        try:
            self.correlation.append(NONE if correlation is None else correlation)
        except OverflowError:  # an id past 64 bits is garbage: no link, rather than a crash
            self.correlation.append(NONE)

    def build(self) -> EventColumns:
        return EventColumns(np.frombuffer(self.start_us, np.float64),
                            np.frombuffer(self.dur_us, np.float64),
                            np.frombuffer(self.where, np.int32), np.frombuffer(self.name, np.int32),
                            np.frombuffer(self.correlation, np.int64), list(self.names),
                            list(self.wheres), self.step_nums, self.nbytes, self.stats)
