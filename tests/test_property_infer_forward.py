"""Forward inference on unmarked traces: linear in the ops, and the same answer as the original
per-op definition (kept here as the specification) on any steps, ops and phase intervals."""
import bisect
import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gapscope.analysis.events import intervals
from gapscope.analysis.results.breakdown import breakdown_from_trace
from gapscope.analysis.events.phase_rules import PhaseOrigin
from gapscope.analysis.events.timeline import _forward_limits, _infer_forward, _marked
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, STEP, Event, Trace


def _reference(ops, steps, by_phase):
    """The original definition: for each op, clip every data-load interval to its step."""
    starts = [s.start_us for s in steps]
    data = by_phase.get("data_load", [])
    backward_starts = [s for s, _ in by_phase["backward"]]
    found = []
    for op in ops:
        i = bisect.bisect_right(starts, op.start_us) - 1
        if i < 0 or op.start_us >= steps[i].end_us:
            continue
        lo, hi = steps[i].start_us, steps[i].end_us
        first_backward = next((b for b in backward_starts[bisect.bisect_left(backward_starts, lo):]
                               if b < hi), None)
        data_end = max((e for s, e in intervals.clip(data, lo, hi)), default=lo)
        if first_backward is not None and data_end <= op.start_us < first_backward:
            found.append((op.start_us, min(op.end_us, first_backward)))
    marked = intervals.merge([i for phase in by_phase.values() for i in phase])
    return intervals.subtract(intervals.merge(found), marked)


_span = st.tuples(st.integers(0, 400), st.integers(0, 60)).map(lambda t: (float(t[0]), float(t[0] + t[1])))


@settings(max_examples=300, deadline=None)
@given(step_spans=st.lists(_span, min_size=1, max_size=6), op_spans=st.lists(_span, max_size=30),
       data=st.lists(_span, max_size=8), backward=st.lists(_span, min_size=1, max_size=8),
       optimizer=st.lists(_span, max_size=4), in_order=st.booleans())
def test_same_answer_as_the_per_op_definition(step_spans, op_spans, data, backward, optimizer, in_order):
    """Ops in any order, and in start order (a trace's mostly are: each step's first op is then
    found once)."""
    if in_order:
        op_spans = sorted(op_spans)
    steps = sorted((Event(f"ProfilerStep#{i}", STEP, s, e - s, "host/1/1", i)
                    for i, (s, e) in enumerate(step_spans)), key=lambda e: e.start_us)
    ops = [Event("aten::mm", HOST_OP, s, e - s, "host/1/1") for s, e in op_spans]
    by_phase = {"backward": intervals.merge(backward)}
    if data:
        by_phase["data_load"] = intervals.merge(data)
    if optimizer:
        by_phase["optimizer"] = intervals.merge(optimizer)
    starts = np.array([op.start_us for op in ops], float)
    ends = np.array([op.end_us for op in ops], float)
    assert _infer_forward(starts, ends, _forward_limits(steps, by_phase), _marked(by_phase)) \
        == _reference(ops, steps, by_phase)


def test_foreign_trace_with_many_steps_is_broken_down_in_linear_time():
    # 20,000 steps of 10 ops: the per-op definition clips 20,000 data intervals for each of
    # 200,000 ops (hours); one pass over the steps and one over the ops takes well under a second.
    events = []
    for n in range(20_000):
        t = n * 100.0
        events.append(Event(f"ProfilerStep#{n}", STEP, t, 100.0, "host/1/1", n))
        events.append(Event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                            ANNOTATION, t, 10.0, "host/1/1"))
        events += [Event("aten::mm", HOST_OP, t + 10 + 5 * k, 5.0, "host/1/1") for k in range(8)]
        events.append(Event("autograd::engine::evaluate_function: MmBackward0", ANNOTATION,
                            t + 50, 30.0, "host/1/2"))
        events.append(Event("Optimizer.step#SGD.step", ANNOTATION, t + 80, 20.0, "host/1/1"))
    # CPU time, not wall time: a loaded machine stretches the wall clock (22 s at load 10 with
    # four busy processes) but not the work done; quadratic work would take hours either way.
    started = time.process_time()
    result = breakdown_from_trace(Trace("torch", "synthetic", events))
    assert time.process_time() - started < 60
    assert result.phase_sources["forward"] == PhaseOrigin.INFERRED
    assert result.steps[0].phase_ms["forward"] == 0.040  # 8 ops of 5 µs before the backward
