"""A step's JSON row, written out by hand for speed, is what finite(asdict(step)) gave, for any figures."""
from __future__ import annotations

from dataclasses import asdict

from hypothesis import given, settings
from hypothesis import strategies as st

from gapscope.analysis.results.records import StepBreakdown
from gapscope.profilers.phases import PHASES
from gapscope.profilers.strict_json import finite

FIGURE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10**6), FIGURE, st.fixed_dictionaries({p: FIGURE for p in PHASES}),
       st.one_of(st.none(), FIGURE))
def test_step_row_is_the_finite_asdict(step, step_ms, phase_ms, loss):
    row = StepBreakdown(step, step_ms, phase_ms, loss)
    expected = finite(asdict(row))
    found = row.to_json_dict()
    assert repr(found) == repr(expected)  # repr: NaN-free both, None where not finite, same key order
    assert found["phase_ms"] is not row.phase_ms  # a copy, as asdict's
