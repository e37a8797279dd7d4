"""Interval algebra on literal lists."""
from gapscope.analysis.events import intervals


def test_merge_joins_overlapping_and_touching_and_drops_empty():
    assert intervals.merge([(5, 7), (0, 2), (1, 3), (3, 4), (9, 9)]) == [(0, 4), (5, 7)]


def test_clip_keeps_only_the_window():
    assert intervals.clip([(0, 4), (5, 7), (8, 10)], 3, 9) == [(3, 4), (5, 7), (8, 9)]


def test_subtract_cuts_holes():
    assert intervals.subtract([(0, 10), (20, 30)], [(2, 3), (5, 25)]) == [(0, 2), (3, 5), (25, 30)]


def test_subtract_nothing_taken_and_everything_taken():
    assert intervals.subtract([(0, 1)], []) == [(0, 1)]
    assert intervals.subtract([(0, 1), (2, 3)], [(0, 5)]) == []


def test_total():
    assert intervals.total([(0, 1.5), (2, 4)]) == 3.5
