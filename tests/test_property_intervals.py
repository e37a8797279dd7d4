"""Interval algebra against its meaning: on whole-number intervals every operation must give the
same set of unit cells [k, k+1) as the set operation it stands for."""
import bisect

from hypothesis import given, settings
from hypothesis import strategies as st

from gapscope.analysis.events import intervals

_interval = st.tuples(st.integers(0, 60), st.integers(0, 15)).map(lambda t: (t[0], t[0] + t[1]))
_lists = st.lists(_interval, max_size=12)


def _cells(items) -> set[int]:
    return {k for s, e in items for k in range(s, e)}


def _is_merged(items) -> bool:
    """Sorted, no empty interval, and a gap between neighbours (touching ones are joined)."""
    return all(s < e for s, e in items) and all(a[1] < b[0] for a, b in zip(items, items[1:]))


@settings(max_examples=300)
@given(_lists)
def test_merge_is_the_union_in_canonical_form(items):
    merged = intervals.merge(items)
    assert _cells(merged) == _cells(items) and _is_merged(merged)
    assert intervals.total(merged) == len(_cells(items))


@settings(max_examples=300)
@given(_lists, st.integers(0, 80), st.integers(0, 30))
def test_clip_is_the_intersection_with_the_window(items, lo, width):
    hi = lo + width
    assert _cells(intervals.clip(items, lo, hi)) == _cells(items) & set(range(lo, hi))


@settings(max_examples=300)
@given(_lists, st.integers(0, 80), st.integers(0, 30))
def test_clip_merged_equals_clip_on_a_merged_list(items, lo, width):
    merged = intervals.merge(items)
    assert intervals.clip_merged(merged, lo, lo + width) == intervals.clip(merged, lo, lo + width)


@settings(max_examples=300)
@given(_lists, _lists)
def test_subtract_is_the_difference(items, taken):
    result = intervals.subtract(intervals.merge(items), intervals.merge(taken))
    assert _cells(result) == _cells(items) - _cells(taken)
    assert all(s < e for s, e in result)


@settings(max_examples=300)
@given(_lists, st.booleans())
def test_merge_arrays_equals_merge(items, in_order):
    """Given in any order, and sorted by start (a trace's rows mostly are: no sort then)."""
    import numpy as np
    if in_order:
        items = sorted(items, key=lambda i: i[0])
    starts = np.array([s for s, _ in items], float)
    ends = np.array([e for _, e in items], float)
    assert intervals.merge_arrays(starts, ends) == intervals.merge(items)
    assert starts.tolist() == [s for s, _ in items] and ends.tolist() == [e for _, e in items]  # left as given


@settings(max_examples=150)
@given(_lists, st.integers(1, 4), st.lists(st.booleans(), min_size=40, max_size=40))
def test_union_of_blocks_equals_merge_of_the_selected(items, block, chosen):
    """The union taken a block of events at a time, then merged, is the union of them all."""
    import numpy as np
    starts = np.array([s for s, _ in items], float)
    durs = np.array([e - s for s, e in items], float)
    selected = np.array(chosen[:len(items)], bool)
    found = intervals.union_of(starts, durs, selected, block)
    assert list(zip(found[0].tolist(), found[1].tolist())) == intervals.merge(
        [(s, s + d) for s, d, keep in zip(starts.tolist(), durs.tolist(), selected) if keep])


def _walk_back(spans, t):
    """latest_covering's reference, the walk it replaced: back from the last span begun at or
    before t to the first that has not ended (quadratic where t lies outside every span)."""
    i = bisect.bisect_right([s[0] for s in spans], t) - 1
    while i >= 0:
        if t < spans[i][1]:
            return i
        i -= 1
    return None


@settings(max_examples=300, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 30)), max_size=15),
       times=st.lists(st.integers(-5, 100), max_size=25))
def test_latest_covering_is_the_walk_back(spans, times):
    # Nested, overlapping, empty and equal-start spans, sorted as the callers sort theirs.
    ordered = sorted((float(s), float(s + d), f"s{k}") for k, (s, d) in enumerate(spans))
    at = sorted(float(t) for t in times)
    assert intervals.latest_covering(ordered, at) == [_walk_back(ordered, t) for t in at]
