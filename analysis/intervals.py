"""Interval algebra on sorted lists of (start, end) pairs, kept tiny so it is easy to test."""
from __future__ import annotations

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


def clip(intervals: list[Interval], lo: float, hi: float) -> list[Interval]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi]


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
