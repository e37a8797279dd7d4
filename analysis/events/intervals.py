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
    """merge_arrays' disjoint intervals, sorted, as two arrays (no tuple per interval): sorted,
    and a new interval begins where a start passes every end so far."""
    nonempty = ends > starts
    starts, ends = starts[nonempty], ends[nonempty]
    if not len(starts):
        return starts, ends
    order = np.lexsort((ends, starts))
    starts, reach = starts[order], np.maximum.accumulate(ends[order])
    del order
    begins = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]])
    last = np.r_[begins[1:] - 1, len(starts) - 1]
    return starts[begins], reach[last]


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
