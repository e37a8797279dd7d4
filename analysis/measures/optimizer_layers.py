"""The optimizer's update per layer, where a torch trace shows it one parameter at a time: the
ops of each `Optimizer.step#…` range fall in as many identical groups as the model has parameter
tensors, in the model's order (torch's single-tensor optimizers, the CPU default)."""
from __future__ import annotations

from dataclasses import dataclass, field

from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, Trace

STEP_RANGE = "Optimizer.step#"  # torch's optimizer hook names its step range so while profiling
# Parameter tensors per layer kind, as torch's modules hold them (nn.LSTM: weight_ih, weight_hh,
# bias_ih, bias_hh); a kind absent here has none.
TENSORS = {"conv2d": 2, "dense": 2, "lstm": 4, "batchnorm": 2}


@dataclass
class OptimizerLayers:
    """Mean ms per traced step of each layer's parameter updates, and of the step range's rest
    (the optimizer's own bookkeeping before, between and after them)."""

    layers: dict[str, float]
    outside_ms: float
    source: str                     # the step range's name
    notes: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict:
        return {"layers": {k: round(v, 6) for k, v in self.layers.items()},
                "outside_ms": round(self.outside_ms, 6), "source": self.source, "notes": self.notes}


def optimizer_layers(trace: Trace, timeline: PhaseTimeline,
                     specs: list[dict] | None) -> OptimizerLayers | str:
    """The split, or one line saying why there is none."""
    if trace.source_format != "torch" or not specs:
        return "optimizer per layer: only a torch trace with its model's layers shows it"
    owners = [s["name"] for s in specs for _ in range(_tensors(s))]
    if not owners:
        return "optimizer per layer: the layers' parameter tensors are not known in the optimizer's order"
    ranges = [e for e in trace.events if e.kind == ANNOTATION and e.name.startswith(STEP_RANGE)
              and e.track.startswith("host") and timeline.step_at(e.start_us) is not None]
    if not ranges:
        return "optimizer per layer: no Optimizer.step range in the traced steps"
    ops = _top_ops(trace, ranges)
    totals = dict.fromkeys(owners, 0.0)  # each layer once, in the model's order
    outside = 0.0
    for step_range, found in zip(ranges, ops):
        groups = _groups(found, len(owners))
        if groups is None:
            return (f"optimizer per layer: {step_range.name}'s {len(found)} ops do not fall in "
                    f"{len(owners)} like groups, one per parameter tensor (a foreach or fused "
                    "optimizer updates them all at once): not split by layer")
        for i, (owner, group) in enumerate(zip(owners, groups)):
            # A tensor's update lasts until the next one's starts: the Python between its ops too.
            end = groups[i + 1][0].start_us if i + 1 < len(groups) else group[-1].end_us
            totals[owner] += (end - group[0].start_us) / 1000.0
        outside += (step_range.dur_us - (groups[-1][-1].end_us - groups[0][0].start_us)) / 1000.0
    n = len(ranges)
    return OptimizerLayers({k: v / n for k, v in totals.items()}, outside / n, ranges[0].name)


def _tensors(spec: dict) -> int:
    """Parameter tensors a layer owns: by kind for a spec's layer; for a user's module, the count
    its capture kept where the layers hold the model's tensors in its order (else none)."""
    if spec.get("kind") == "module":
        count = (spec.get("dims") or {}).get("tensors")
        return count if isinstance(count, int) else 0
    return TENSORS.get(spec.get("kind"), 0)


def _top_ops(trace: Trace, ranges: list) -> list[list]:
    """Each step range's outermost host ops on its own thread, in start order."""
    found = [[] for _ in ranges]
    tracks = {r.track for r in ranges}
    for e in trace.events:
        if e.kind != HOST_OP or e.track not in tracks:
            continue
        for i, r in enumerate(ranges):
            if r.track == e.track and r.start_us <= e.start_us < r.end_us:
                found[i].append(e)
                break
    tops = []
    for events in found:
        events.sort(key=lambda e: (e.start_us, -e.dur_us))
        top, end = [], float("-inf")
        for e in events:
            if e.start_us >= end:
                top.append(e)
                end = e.end_us
        tops.append(top)
    return tops


def _groups(ops: list, tensors: int) -> list[list] | None:
    """The ops cut into `tensors` groups of equal length and equal op names, else None."""
    if not ops or len(ops) % tensors:
        return None
    size = len(ops) // tensors
    groups = [ops[i:i + size] for i in range(0, len(ops), size)]
    names = [e.name for e in groups[0]]
    return groups if all([e.name for e in g] == names for g in groups) else None
