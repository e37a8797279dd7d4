"""Time per layer inside the forward and backward phases of the traced steps: from layer ranges
and autograd sequence numbers in a torch trace, from the layer scopes of op names in an XSpace."""
from __future__ import annotations

import bisect
import re
from collections import defaultdict
from dataclasses import dataclass, field

from gapscope.analysis.events import intervals
from gapscope.analysis.events.hlo_metadata import HloModules
from gapscope.analysis.events.module_depth import DEFAULT_DEPTH, at_depth
from gapscope.analysis.events.phase_rules import BACKWARD_NODE, JAX_PROGRAMS, MODULE_RANGE_PREFIX
from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, OTHER, Trace
from gapscope.analysis.measures.fusion_table import classify
from gapscope.analysis.readers.torch_trace import LAYER_RANGE_PREFIXES, SEQUENCE
from gapscope.profilers.phases import LOSS_SCOPE

LAYER_PHASES = ("forward", "backward")
_ACCUMULATE_NODE = BACKWARD_NODE + "torch::autograd::AccumulateGrad"
_TF_FORWARD = "gapscope_forward/"
_TF_BACKWARD = "gradient_tape/"
_TF_LOSS_SCOPES = ("compile_loss", LOSS_SCOPE)  # Keras' train_step, gapscope's raw TF loop
_SCOPE_SUFFIX = re.compile(r"(_\d+)+$")  # TF makes a reused scope unique: conv1 -> conv1_1
_VARIABLE_READ = "ReadVariableOp"  # the op type that ends a TF op event's name (`…:ReadVariableOp`)
# A JAX name stack's scope made by a transformation: `transpose(jvp(conv1))`, `jvp(conv1)`.
_JAX_TRANSFORMED = re.compile(r"^((?:\w+\()+)([^()]*)\)+$")


@dataclass
class LayerTimes:
    """Mean ms per traced step: each layer's time in each phase, and the phases' own time."""

    layers: dict[str, dict[str, float]]   # layer -> phase -> ms
    phase_ms: dict[str, float]            # phase -> ms (the timeline's exclusive segments)
    steps: int
    notes: list[str] = field(default_factory=list)

    def outside_ms(self, phase: str) -> float:
        """The phase's time that no layer claims: Python between layers, glue ops, hooks."""
        return self.phase_ms[phase] - sum(times[phase] for times in self.layers.values())


def layer_times(trace: Trace, timeline: PhaseTimeline, names: list[str] | None = None,
                hlo: HloModules | None = None, depth: int | None = None) -> LayerTimes | None:
    """None where the trace carries no layer: no layer ranges, no layer scopes. `hlo`: the
    run's HLO metadata, through which an XLA-compiled op finds the layers it was made from.
    `depth`: which with_modules ranges are layers (module_depth; None the default)."""
    found = _found(trace, timeline, names, hlo, depth)
    if found is None:
        return None
    layers, notes = found
    order = {phase: _inner_first(layers, phase) for phase in LAYER_PHASES}
    totals = {name: dict.fromkeys(LAYER_PHASES, 0.0) for name in layers}
    phase_ms = dict.fromkeys(LAYER_PHASES, 0.0)
    for step in range(len(timeline.steps)):
        for phase in LAYER_PHASES:
            segments, parts = _attributed(layers, order[phase], timeline, step, phase)
            phase_ms[phase] += intervals.total(segments) / 1000.0
            for name, own in parts:
                totals[name][phase] += intervals.total(own) / 1000.0
    n = len(timeline.steps)
    ordered = names or list(layers)
    return LayerTimes({name: {p: totals[name][p] / n for p in LAYER_PHASES}
                       for name in ordered if name in totals},
                      {p: ms / n for p, ms in phase_ms.items()}, n, notes)


def layer_spans(trace: Trace, timeline: PhaseTimeline, names: list[str] | None = None,
                hlo: HloModules | None = None, depth: int | None = None) -> list[tuple[float, float, str, str, int]]:
    """Each stretch of time a layer was given in the traced steps, as layer_times counts it:
    (start µs, end µs, layer, phase, step index), in time order; [] where the trace names none."""
    found = _found(trace, timeline, names, hlo, depth)
    if found is None:
        return []
    spans, order = [], {phase: _inner_first(found[0], phase) for phase in LAYER_PHASES}
    for step in range(len(timeline.steps)):
        for phase in LAYER_PHASES:
            for name, own in _attributed(found[0], order[phase], timeline, step, phase)[1]:
                spans += [(start, end, name, phase, step) for start, end in own]
    return sorted(spans)


def _found(trace: Trace, timeline: PhaseTimeline, names: list[str] | None,
           hlo: HloModules | None, depth: int | None = None) -> tuple[dict, list[str]] | None:
    """Each layer's intervals by phase (the spec's layers only, where names are given), and notes."""
    if not timeline.steps:
        return None
    if trace.source_format == "torch":
        found, notes = _torch_layers(trace, depth)
    else:
        found, notes = _scoped_layers(trace, names, hlo)
    if names:
        found = {name: found[name] for name in names if name in found}
    return (found, notes) if found else None


def _inner_first(found: dict, phase: str) -> list[str]:
    """Where layers overlap (nested module ranges, ops on parallel threads), an instant goes to
    the layer with less time in the phase: the inner of two nested ranges, so it is served
    first. Per phase: a parent module's backward holds only its own glue ops, so over both
    phases a child whose backward dominates would outweigh the parent and lose its forward."""
    return sorted(found, key=lambda name: intervals.total(found[name].get(phase, [])))


def _attributed(found: dict, order: list[str], timeline: PhaseTimeline, step: int,
                phase: str) -> tuple[list, list]:
    """The phase's segments in the step, and each layer's own time inside them, `order` served
    first (each instant counts once)."""
    window = timeline.steps[step]
    segments = [(s, e) for s, e, p in timeline.segments[step] if p == phase]
    outside = intervals.subtract([(window.start_us, window.end_us)], segments)
    taken: list = []
    parts = []
    for name in order:
        own = intervals.clip_merged(found[name].get(phase, []), window.start_us, window.end_us)
        own = intervals.subtract(intervals.subtract(own, outside), taken)
        parts.append((name, own))
        taken = intervals.merge(taken + own)
    return segments, parts


def _torch_layers(trace: Trace, depth: int | None = None) -> tuple[dict, list[str]]:
    """Forward: each layer range. Backward: each autograd node whose sequence number is that of
    a forward op inside a layer range (innermost range on the op's thread), and each
    AccumulateGrad node (it has no sequence number) with the node that ran just before it on
    its thread: the engine runs AccumulateGrad first of all ready nodes (highest priority), so
    right after the node that made the parameter's gradient."""
    columns = trace.columns
    found: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    ranges, notes = layer_ranges(trace, depth)
    if not ranges:
        return {}, []
    for track in ranges.values():
        for start, end, name in track:
            found[name]["forward"].append((start, end))
    accumulate = [e for e in trace.events if e.name == _ACCUMULATE_NODE]
    made_by: dict[int, str] = {}
    backward_nodes = []
    forward_ops = []  # (sequence, op) of the ops that may have made a backward node
    for row, stats in columns.stats.items():
        sequence = stats.get(SEQUENCE)
        if sequence is None:
            continue
        e = columns.event(row)
        if e.name.startswith(BACKWARD_NODE):
            backward_nodes.append((sequence, e))
        elif e.kind == HOST_OP and e.track in ranges:
            forward_ops.append((sequence, e))
    for (sequence, _), layer in zip(forward_ops, innermost(ranges, [e for _, e in forward_ops])):
        if layer is not None and sequence not in made_by:
            made_by[sequence] = layer
    unlinked = 0
    ran: dict[str, list[tuple[float, str | None]]] = defaultdict(list)  # track -> (start, layer)
    for sequence, e in backward_nodes:
        layer = made_by.get(sequence)
        ran[e.track].append((e.start_us, layer))
        if layer is None:
            unlinked += 1
            continue
        found[layer]["backward"].append((e.start_us, e.end_us))
    for track in ran.values():
        track.sort()
    for e in accumulate:
        before = ran.get(e.track, [])
        i = bisect.bisect_left(before, (e.start_us,)) - 1
        if i >= 0 and before[i][1] is not None:
            found[before[i][1]]["backward"].append((e.start_us, e.end_us))
    if backward_nodes and unlinked == len(backward_nodes):
        notes.append("no backward node links to a layer's forward op (no autograd sequence "
                     "numbers inside layer ranges): backward per layer unknown")
    return {name: {p: intervals.merge(v) for p, v in phases.items()} for name, phases in found.items()}, notes


def layer_ranges(trace: Trace, depth: int | None = None) -> tuple[dict, list[str]]:
    """Each host track's layer ranges (start, end, layer) in start order, and a
    note on the module depth taken. with_modules' ranges nest down to every Linear: the modules
    at one depth are the layers (module_depth); gapscope's own ranges are all layers."""
    ranges: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    modules: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for e in trace.events:
        # gapscope_layer/… are annotations; with_modules writes `nn.Module: …` as python_function.
        if e.kind in (ANNOTATION, OTHER) and e.track.startswith("host") \
                and e.name.startswith(LAYER_RANGE_PREFIXES):
            into = modules if e.name.startswith(MODULE_RANGE_PREFIX) else ranges
            into[e.track].append((e.start_us, e.end_us, layer_name(e.name)))
    notes = []
    if modules:
        kept, taken = at_depth(modules, depth)
        for track, spans in kept.items():
            ranges[track] += spans
        notes.append(f"layers: with_modules' module ranges at depth {taken} "
                     f"({DEFAULT_DEPTH if depth is None else 'as asked'}; 0 is the model itself, "
                     "--layer-depth N for another)")
    for track in ranges.values():
        track.sort()
    return ranges, notes


def layer_fused(trace: Trace, names: list[str] | None = None,
                depth: int | None = None) -> dict[str, dict[str, list[str]]]:
    """What each layer's fused ops fused (fusion_table), by phase: {"dense1": {"forward":
    ["dense+bias+ReLU"]}}. TF ops by their layer scope; torch host ops inside a layer's range
    (forward: torch's backward nodes are no fused ops). Layers without one are left out."""
    found: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    known = set(names or ())
    kinds: dict[str, object] = {}

    def add(layer: str, phase: str, op_name: str) -> None:
        if op_name not in kinds:
            kinds[op_name] = classify(op_name)
        fused = kinds[op_name]
        if fused is not None and fused.fuses not in found[layer][phase] and (not known or layer in known):
            found[layer][phase].append(fused.fuses)

    if trace.source_format == "torch":
        ranges, _ = layer_ranges(trace, depth)
        ops = [e for e in trace.events if e.kind == HOST_OP and e.track in ranges]
        for e, layer in zip(ops, innermost(ranges, ops)):
            if layer is not None:
                add(layer, "forward", e.name)
    else:
        scopes: dict[str, tuple[str, str] | None] = {}
        resolved = scope_names(trace, names)
        for e in trace.events:
            if e.kind != HOST_OP or not e.track.startswith("host"):
                continue
            if e.name not in scopes:
                scopes[e.name] = scope_layer(e.name, known, resolved)
            if scopes[e.name] is not None:
                add(*scopes[e.name], e.name)
    return {layer: dict(phases) for layer, phases in found.items() if any(phases.values())}


def layer_name(range_name: str) -> str:
    for prefix in LAYER_RANGE_PREFIXES:
        if range_name.startswith(prefix):
            return range_name[len(prefix):]
    return range_name


def innermost(ranges: dict[str, list[tuple[float, float, str]]], events: list) -> list[str | None]:
    """For each event, the layer of the latest-starting range on its track (layer_ranges) that
    holds its start: the innermost of nested ranges. One sweep a track (intervals.latest_covering):
    a walk back from each op over every range begun before it was quadratic where ops lie
    outside every layer (backward, optimizer: 37 s of a 200 MB record_shapes trace's 45)."""
    found: list[str | None] = [None] * len(events)
    by_track: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        by_track[e.track].append(i)
    for track, indices in by_track.items():
        spans = ranges[track]
        indices.sort(key=lambda i: events[i].start_us)
        for i, at in zip(indices, intervals.latest_covering(spans, [events[i].start_us for i in indices])):
            if at is not None:
                found[i] = spans[at][2]
    return found


def _scoped_layers(trace: Trace, names: list[str] | None, hlo: HloModules | None) -> tuple[dict, list[str]]:
    """TF ops by the Keras layer scope in their names: `…/gapscope_forward/<model>/<layer>/…`
    is that layer's forward, `…/gradient_tape/gapscope_forward/<model>/<layer>/…` its backward,
    the `compile_loss` scope is the loss. An XLA op (jit_compile) has no scope in its name
    (`fusion.3`): the HLO metadata's op names of what it was made from give its layer, where
    they are all of one layer and phase. Without the layers' names, a note where scopes that
    differ only by a suffix were read as one layer."""
    known = set(names or ())
    resolved = scope_names(trace, names)
    layer_of: dict[str, tuple[str, str] | None] = {}
    found: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    across, unknown = set(), set()
    scopes: dict[str, set[str]] = defaultdict(set)
    for e in trace.events:
        if e.kind != HOST_OP or not e.track.startswith("host"):
            continue
        if e.hlo_op:
            key = f"{e.hlo_module}/{e.hlo_op}"
            where = layer_of.get(key, False)
            if where is False:
                where = layer_of[key] = _xla_layer(hlo, e, known, across, unknown, resolved)
        else:
            where = layer_of.get(e.name, False)
            if where is False:
                where = layer_of[e.name] = scope_layer(e.name, known, resolved)
                if where is not None and not known:
                    scopes[where[0]].add(_raw_scope(e.name))
        if where is not None:
            found[where[0]][where[1]].append((e.start_us, e.end_us))
    notes = [f"layer scopes {', '.join(sorted(raw))} read as one layer {name!r}: TF suffixes a reused "
             f"scope, Keras a second layer of a kind (dense, dense_1), and without the model's layer "
             "names gapscope cannot tell which" for name, raw in scopes.items() if len(raw) > 1]
    if across:
        notes.append(f"{len(across)} XLA op(s) fuse ops of several layers ({', '.join(sorted(across)[:3])}"
                     f"{', …' if len(across) > 3 else ''}): their time is outside layers")
    if unknown:
        notes.append(f"{len(unknown)} XLA op(s) not in the HLO metadata: their time is outside layers")
    found = {name: {p: intervals.merge(v) for p, v in phases.items()} for name, phases in found.items()}
    return found, notes


def _xla_layer(hlo: HloModules | None, e, known: set[str], across: set, unknown: set, resolved: dict):
    """(layer, phase) of an XLA op from its HLO metadata, or None (several, or none known)."""
    op = hlo.find(e.hlo_module, e.hlo_op) if hlo else None
    if op is None:
        unknown.add(e.hlo_op)
        return None
    wheres = {w for w in (scope_layer(name, known, resolved) for name in op.op_names) if w is not None}
    if len(wheres) > 1:
        across.add(e.hlo_op)
    return next(iter(wheres)) if len(wheres) == 1 else None


def _raw_scope(op_name: str) -> str:
    """The layer scope of an op's name as TF wrote it (`dense_1_2`), before any suffix is cut."""
    parts = op_name.partition(_TF_FORWARD)[2].split("/")
    return parts[1] if len(parts) >= 3 else parts[0]


def scope_names(trace: Trace, names: list[str] | None) -> dict[str, str]:
    """Which of the model's layers (`names`, in the model's order) each raw layer scope of the
    trace's forward ops is. TF makes a reused scope unique by suffixes, so the layer `dense` may
    run as `dense_1` and the layer `dense_1` as `dense_1_2`: a raw scope can read as two names.
    One that can be one layer only is that layer; the others, in the order the forward first
    runs them, are each the first layer they can be that no earlier scope is. {} without names."""
    if not names:
        return {}
    first: dict[str, float] = {}
    for e in trace.events:
        if e.kind != HOST_OP or not e.track.startswith("host"):
            continue
        head, marker, rest = e.name.partition(_TF_FORWARD)
        parts = rest.split("/")
        # A variable's read waits for nothing (TF runs the reads of every layer first): the
        # order is the ops' that compute.
        if e.name.endswith(_VARIABLE_READ):
            continue
        if marker and not head.endswith(_TF_BACKWARD) and len(parts) >= 3 \
                and not parts[0].startswith(_TF_LOSS_SCOPES) and e.start_us < first.get(parts[1], float("inf")):
            first[parts[1]] = e.start_us
    candidates = {raw: [n for n in names if raw == n or (raw.startswith(n + "_")
                                                           and _SCOPE_SUFFIX.fullmatch(raw[len(n):]))]
                  for raw in first}
    found = {raw: fits[0] for raw, fits in candidates.items() if len(fits) == 1}
    for raw in sorted((r for r, fits in candidates.items() if len(fits) > 1), key=first.get):
        taken = set(found.values())
        found[raw] = next((n for n in candidates[raw] if n not in taken), candidates[raw][0])
    return found


def scope_layer(op_name: str, known: set[str], resolved: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(layer, phase) an op's scope names, else None. `resolved`: scope_names' reading of the
    trace's raw scopes, where the model's layer names are known."""
    if op_name.startswith(JAX_PROGRAMS):
        return jax_scope_layer(op_name, known)
    head, marker, rest = op_name.partition(_TF_FORWARD)
    if not marker:
        return None
    phase = "backward" if head.endswith(_TF_BACKWARD) else "forward"
    parts = rest.split("/")
    if parts[0].startswith(_TF_LOSS_SCOPES):
        return "loss", phase
    if len(parts) < 3:  # model/op: an op of the model itself, in no layer
        return None
    if resolved and parts[1] in resolved:
        return resolved[parts[1]], phase
    layer = _SCOPE_SUFFIX.sub("", parts[1]) if parts[1] not in known else parts[1]
    if known and layer not in known:
        return None
    return layer, phase


def jax_scope_layer(op_name: str, known: set[str]) -> tuple[str, str] | None:
    """(layer, phase) of a JAX op by its name stack: Keras names each layer's scope, which JAX
    wraps in the transformation that made the op, `jit(train_step)/transpose(jvp(conv1))/…` (conv1,
    backward) and `…/jvp(conv1)/…` (forward); Keras' `compile_loss` scope is the loss. Under a
    model's own scope (`jvp(cnn)/conv1/…`) the layer is the first known name; in a program with
    no transformation (inference: `jit(predict_step)/dense1/…`), a known layer's forward."""
    scopes = op_name.split("/")
    for i, scope in enumerate(scopes):
        match = _JAX_TRANSFORMED.match(scope)
        if match is None or not match.group(1).endswith("jvp("):
            continue
        phase = "backward" if match.group(1).startswith("transpose(") else "forward"
        # The last part is the primitive; `jvp()` is code in no named scope (a loss by hand).
        inside = [name for name in (match.group(2), *scopes[i + 1:-1]) if name]
        if inside[:1] == ["compile_loss"]:
            return "loss", phase
        layer = next((name for name in inside if name in known), None) if known else \
            next(iter(inside), None)
        return (layer, phase) if layer else None
    # No transformation: a program that differentiates nothing (predict_step), whose layer
    # scopes are forward; only a known layer's name counts (an optimizer's scope is none).
    layer = next((name for name in scopes[1:-1] if name in known), None)
    return (layer, "forward") if layer else None
