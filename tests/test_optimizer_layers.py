"""The optimizer's update per layer on hand-made steps: one Optimizer.step range whose ops fall
in one like group per parameter tensor, in the model's order; and the lines said where not."""
from __future__ import annotations

import pytest

from gapscope.analysis.events.timeline import phase_timeline
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, STEP, Event, Trace
from gapscope.analysis.measures.optimizer_layers import OptimizerLayers, optimizer_layers

SPECS = [{"name": "dense1", "kind": "dense"}, {"name": "logits", "kind": "dense"},
         {"name": "loss", "kind": "loss"}]


def _op(name, start, end, kind=HOST_OP):
    return Event(name, kind, start, end - start, "host/1/1")


def _trace(ops_per_tensor=("aten::mul_", "aten::addcdiv_"), tensors=4, dropped=0):
    """A 100 µs step; its Optimizer.step range 40-90 µs: 2 µs of bookkeeping, then per tensor
    (dense1 weight and bias, logits weight and bias) its ops 3 µs apart, each 2 µs long."""
    events = [Event("ProfilerStep#1", STEP, 0, 100, "host/1/1", step_num=1),
              _op("gapscope/optimizer", 40, 95, ANNOTATION),
              _op("Optimizer.step#RMSprop.step", 40, 90, ANNOTATION)]
    t = 42
    for tensor in range(tensors):
        for name in ops_per_tensor:
            events.append(_op(name, t, t + 2))
            events.append(_op("aten::copy_", t + 0.5, t + 1.5))  # nested: not a group's op
            t += 3
    return Trace("torch", "hand-made", events[:len(events) - dropped])


def test_each_tensors_ops_are_its_layers_time():
    found = optimizer_layers(t := _trace(), phase_timeline(t), SPECS)
    assert isinstance(found, OptimizerLayers)
    # Each tensor: from its first op to the next tensor's first op (6 µs), the last to its last
    # op's end (5 µs); dense1 = 6 + 6, logits = 6 + 5; the rest of the 50 µs range is outside.
    assert found.layers == pytest.approx({"dense1": 0.012, "logits": 0.011})
    assert found.outside_ms == pytest.approx(0.050 - 0.023)
    assert found.source == "Optimizer.step#RMSprop.step"


def test_ops_that_do_not_fall_in_like_groups_are_not_split():
    trace = _trace(ops_per_tensor=("aten::_foreach_mul_",), tensors=1)  # one op for all tensors
    why = optimizer_layers(trace, phase_timeline(trace), SPECS)
    assert why == ("optimizer per layer: Optimizer.step#RMSprop.step's 1 ops do not fall in 4 like "
                   "groups, one per parameter tensor (a foreach or fused optimizer updates them all "
                   "at once): not split by layer")
    assert optimizer_layers(_trace(), phase_timeline(_trace()), None).startswith("optimizer per layer: only")
