"""`other` split by what the host did meanwhile: a hand-made step with a known answer, and a
real Keras run whose parts add up to its `other` exactly in every format."""
from __future__ import annotations

import csv
import io
import json

import pytest

from gapscope.analysis.results.breakdown import breakdown, breakdown_from_trace
from gapscope.analysis.measures.other_split import OtherPart, other_shares, split_other
from gapscope.analysis.renderers import registry
from gapscope.analysis.model.run import load_run
from gapscope.analysis.events.timeline import phase_timeline
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, KERNEL, OTHER, RUNTIME, STEP, Event, Trace


def _e(name, start, end, kind, track="host/1/1"):
    return Event(name, kind, start, end - start, track)


def _step():
    """A 100 µs step: forward 0-30, backward 30-60, so other is 60-100 (40 µs). Over it:
    an op 62-66 (ops 4), the framework's runtime 60-80 (dispatch 20 - 4 = 16), a synchronise
    85-90 (wait 5), a user's annotation 92-96 and nothing at all (loop 80-85 + 90-100 = 15).
    A kernel on the device over all of it counts for nothing: host time is split."""
    return Trace("torch", "hand-made", [
        Event("ProfilerStep#1", STEP, 0, 100, "host/1/1", step_num=1),
        _e("gapscope/forward", 0, 30, ANNOTATION), _e("gapscope/backward", 30, 60, ANNOTATION),
        _e("aten::add_", 62, 66, HOST_OP),
        _e("EagerExecute", 60, 80, OTHER, track="host/1/2"),
        _e("cudaDeviceSynchronize", 85, 90, RUNTIME),
        _e("my_logging", 92, 96, ANNOTATION),
        _e("volta_sgemm", 60, 100, KERNEL, track="gpu/0/7"),
    ])


def test_other_is_split_by_the_most_specific_event_over_each_instant():
    trace = _step()
    shares = other_shares(trace, phase_timeline(trace))
    assert shares == pytest.approx({OtherPart.OPS: 4 / 40, OtherPart.DISPATCH: 16 / 40,
                                    OtherPart.DEVICE_WAIT: 5 / 40, OtherPart.LOOP: 15 / 40})
    doc = breakdown_from_trace(trace).to_json_dict()
    assert doc["phases"]["other"]["ms"] == pytest.approx(0.040)
    assert doc["phases"]["other"]["parts"] == pytest.approx(
        {"ops in no phase": 0.004, "framework dispatch": 0.016, "device wait": 0.005,
         "loop and callbacks": 0.015})


def test_parts_add_up_exactly_after_rounding():
    parts = split_other(1.0, {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, digits=3)
    assert sum(parts.values()) == 1.0 and sorted(parts.values()) == [0.333, 0.333, 0.334]
    assert split_other(1.0, {}) == {}


def test_keras_run_other_parts_in_every_format(keras_run):
    result = breakdown(load_run(keras_run))
    doc = result.to_json_dict()
    parts = doc["phases"]["other"]["parts"]
    assert parts and set(parts) <= {str(p) for p in OtherPart}
    assert all(v >= 0 for v in parts.values())
    assert sum(parts.values()) == pytest.approx(doc["phases"]["other"]["ms"], abs=1e-6)
    # Keras runs its step inside a tf.function call: the framework's dispatch is visible.
    assert parts.get(str(OtherPart.DISPATCH), 0) > 0
    table = registry.BREAKDOWN["table"].render([result])
    markdown = registry.BREAKDOWN["markdown"].render([result])
    for part, ms in parts.items():
        assert f"· {part}" in table and f"| · {part} | {ms:.3f} |" in markdown
    rows = [r for r in csv.DictReader(io.StringIO(registry.BREAKDOWN["csv"].render([result])))
            if r["phase"].startswith("other: ")]
    assert {r["phase"][len("other: "):]: float(r["time(ms)"]) for r in rows} == pytest.approx(parts)
    assert json.loads(registry.BREAKDOWN["json"].render([result]))
