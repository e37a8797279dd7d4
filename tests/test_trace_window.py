"""Which steps a run's profiler records, on literal step counts."""
from gapscope.profilers.trace_window import TraceWindow


def test_after_warmup_starts_right_after_the_warm_up():
    assert TraceWindow.after_warmup(5, 10, 60) == TraceWindow(5, 10)
    assert TraceWindow.after_warmup(0, 10, 60) == TraceWindow(1, 10)  # step 0 is kineto's warm-up
    assert TraceWindow.after_warmup(5, 10, 12) == TraceWindow(5, 7)   # cut to the steps there are


def test_at_end_records_the_last_steps():
    window = TraceWindow.at_end(5, 10, 60)
    assert (window.first, window.last) == (50, 59)
    # Steps 5..48 are timed before the profiler's own warm-up step (49) ever ran.
    assert all(step not in window for step in range(5, 50))


def test_at_end_never_reaches_into_the_warm_up():
    assert TraceWindow.at_end(5, 10, 15) == TraceWindow(5, 10)
    assert TraceWindow.at_end(5, 10, 12) == TraceWindow(5, 7)
    assert TraceWindow.at_end(0, 3, 3) == TraceWindow(1, 2)
