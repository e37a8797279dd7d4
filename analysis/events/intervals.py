"""Interval algebra on sorted lists of (start, end) pairs, kept tiny so it is easy to test."""
from __future__ import annotations

import bisect

import numpy as np

Interval = tuple[float, float]


def merge(intervals: list[Interval]) -> list[Interval]:
    """Sort and join overlapping or touching intervals; drop empty ones."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def merge_arrays(starts, ends) -> list[Interval]:
    """merge for intervals given as two numpy arrays, vectorised for the millions an unmarked
    trace can hold."""
    starts, ends = merged_arrays(starts, ends)
    return list(zip(starts.tolist(), ends.tolist()))


def merged_arrays(starts, ends) -> tuple[np.ndarray, np.ndarray]:
    """merge_arrays' disjoint intervals, sorted, as two arrays (no tuple per interval): sorted
    by start, and a new interval begins where a start passes every end so far. Sorted by start
    alone (the order of equal starts changes no union) and the running end kept in place: a
    1 GB trace's millions of host ops made this a few hundred MB of temporaries."""
    nonempty = ends > starts
    if not nonempty.all():
        starts, ends = starts[nonempty], ends[nonempty]
    del nonempty
    if not len(starts):
        return starts, ends
    if in_start_order(starts):  # a trace's rows mostly are: no sort, no gather
        reach = ends.copy()
    else:
        order = np.argsort(starts)  # 8x a stable sort's speed: the order of equal starts is no matter
        starts, reach = starts[order], ends[order]
        del order
    np.maximum.accumulate(reach, out=reach)
    begins = np.flatnonzero(starts[1:] > reach[:-1]) + 1
    return np.concatenate((starts[:1], starts[begins])), np.concatenate((reach[begins - 1], reach[-1:]))


def in_start_order(starts: np.ndarray) -> bool:
    """Whether the starts never go back: a trace's rows, as written, mostly do not."""
    return bool((starts[1:] >= starts[:-1]).all())


def union_of(start_us: np.ndarray, dur_us: np.ndarray, selected: np.ndarray,
             block: int = 1 << 20) -> tuple[np.ndarray, np.ndarray]:
    """merged_arrays of the events `selected` (a mask over the columns `start_us`, `dur_us`),
    a block of events at a time, then the blocks' unions merged (the same union): a 1 GB
    trace's millions of ops at once made every temporary tens of MB."""
    found_starts, found_ends = [], []
    for first in range(0, len(start_us), block):
        rows = np.flatnonzero(selected[first:first + block]) + first
        starts = start_us[rows]
        union = merged_arrays(starts, starts + dur_us[rows])
        found_starts.append(union[0])
        found_ends.append(union[1])
    if len(found_starts) == 1:
        return found_starts[0], found_ends[0]
    return merged_arrays(np.concatenate(found_starts or [start_us[:0]]),
                         np.concatenate(found_ends or [start_us[:0]]))


def overlaps(pieces: tuple[np.ndarray, np.ndarray, np.ndarray], starts: np.ndarray,
             ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each piece (three arrays: a label, such as its step's index, its start and end)
    meets the sorted, disjoint intervals `starts`-`ends`: one piece per meeting of positive
    length, with its piece's label, in the pieces' order."""
    label, lo, hi = pieces
    first = np.searchsorted(ends, lo, side="right")   # the first interval ending after the piece starts
    stop = np.searchsorted(starts, hi, side="left")   # past the last one starting before it ends
    count = np.maximum(stop - first, 0)
    which = np.repeat(np.arange(len(lo)), count)
    other = first[which] + np.arange(len(which)) - np.repeat(np.cumsum(count) - count, count)
    return label[which], np.maximum(lo[which], starts[other]), np.minimum(hi[which], ends[other])


def latest_covering(spans: list[tuple], times: list[float]) -> list[int | None]:
    """For each of `times` (ascending), the index in `spans` ((start, end, ...), sorted by
    start) of the last one begun at or before it that has not ended, else None: of spans that
    nest, the innermost. One sweep with a stack of the spans begun: a span leaves it once a
    later time or span start is past its end, when it can cover no later time."""
    found, stack, following = [], [], 0
    for t in times:
        while following < len(spans) and spans[following][0] <= t:
            while stack and spans[stack[-1]][1] <= spans[following][0]:
                stack.pop()
            stack.append(following)
            following += 1
        while stack and spans[stack[-1]][1] <= t:
            stack.pop()
        found.append(stack[-1] if stack else None)
    return found


def covered_within(starts: np.ndarray, ends: np.ndarray, windows: list[Interval]) -> float:
    """Time of merged_arrays' intervals inside the disjoint `windows` (merged)."""
    found = 0.0
    for lo, hi in windows:
        first, stop = np.searchsorted(ends, lo, "right"), np.searchsorted(starts, hi, "left")
        if stop > first:
            found += float((np.minimum(ends[first:stop], hi) - np.maximum(starts[first:stop], lo)).sum())
    return found


def clip(intervals: list[Interval], lo: float, hi: float) -> list[Interval]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


def clip_merged(intervals: list[Interval], lo: float, hi: float) -> list[Interval]:
    """clip for a merged list (sorted, disjoint, so its ends ascend too): only the intervals
    that can meet [lo, hi) are looked at, found by bisection, so clipping every step of a
    long trace stays linear instead of scanning the whole list per step."""
    first = bisect.bisect_right(intervals, lo, key=_end)
    last = bisect.bisect_left(intervals, hi, lo=first, key=_start)
    return clip(intervals[first:last], lo, hi)


def _start(interval: Interval) -> float:
    return interval[0]


def _end(interval: Interval) -> float:
    return interval[1]


def subtract(intervals: list[Interval], taken: list[Interval]) -> list[Interval]:
    """Parts of merged `intervals` not covered by merged `taken`."""
    result: list[Interval] = []
    j = 0
    for start, end in intervals:
        cursor = start
        while j < len(taken) and taken[j][1] <= cursor:
            j += 1
        k = j
        while k < len(taken) and taken[k][0] < end:
            if taken[k][0] > cursor:
                result.append((cursor, taken[k][0]))
            cursor = max(cursor, taken[k][1])
            k += 1
        if cursor < end:
            result.append((cursor, end))
    return result


def total(intervals: list[Interval]) -> float:
    return sum(e - s for s, e in intervals)
