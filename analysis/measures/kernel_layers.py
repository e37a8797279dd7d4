"""Which layer each kernel of a torch trace's forward and backward ran for, from what launched it:
a layer range, an autograd node linked to a layer's forward op, the forward ops' order against the
model's layers, or the ATen ops a compiled (Inductor) kernel's name lists; where those fit no
single layer, the kernel is *mixed*, never split by guess."""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.phase_rules import BACKWARD_NODE
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, OTHER, RUNTIME, Event, Trace
from gapscope.analysis.measures.kernels import (COMPILED_GRAPH, DEVICE_KERNELS, HOST_OPS, INDUCTOR_KERNEL, Work,
                                       find_work)
from gapscope.analysis.measures.layer_times import LAYER_PHASES, layer_name, layer_ranges
from gapscope.analysis.readers.torch_trace import LAYER_RANGE_PREFIXES, SEQUENCE, is_layer_range

MIXED = "mixed"      # a kernel whose ops fit several layers, or no single one
OUTSIDE = "outside"  # a kernel no layer op launched: glue, the loss's seed, gradient accumulation
# How a kernel was placed, surest first.
PLACED_BY = ("range", "autograd", "order", "name", MIXED, OUTSIDE)

_BACKWARD_SUFFIX = re.compile(r"Backward\d*$")
_GRAPH_MARKS = (COMPILED_GRAPH, "CompiledFunction", "Torch-Compiled Region")
# Inductor's kernels: triton_poi_fused_addmm_relu_0 on a GPU, graph_0_cpp_fused_relu_1 on the CPU.
_INDUCTOR = re.compile(r"^(?:graph_\d+_)?(?:triton_(poi|red|per|tem)_|cpp_)fused_(\w+?)(?:_\d+)?$")

# Which kinds of layer (workloads.layer_specs) an ATen op can belong to, by its name without
# underscores, lower case: aten::max_pool2d_with_indices, MaxPool2DWithIndicesBackward0 and a
# kernel name's max_pool2d_with_indices all read `maxpool2dwithindices`. An op absent here (view,
# t, sum, mul, copy) fits any layer: it constrains nothing.
_KINDS = {
    **dict.fromkeys(("addmm", "mm", "linear", "matmul", "bmm", "baddbmm"), ("dense", "lstm")),
    **dict.fromkeys(("convolution", "convolutionbackward", "conv2d", "cudnnconvolution",
                     "mkldnnconvolution", "convolutionpointwise"), ("conv2d",)),
    **dict.fromkeys(("relu", "thresholdbackward"), ("relu",)),
    **dict.fromkeys(("maxpool2d", "maxpool2dwithindices", "maxpool2dwithindicesbackward",
                     "lowmemorymaxpool2dwithoffsets"), ("maxpool2d",)),
    **dict.fromkeys(("batchnorm", "nativebatchnorm", "nativebatchnormbackward", "batchnormimplindex",
                     "nativebatchnormlegit", "nativebatchnormlegitnotraining", "cudnnbatchnorm",
                     "cudnnbatchnormbackward", "nativebatchnormlegitfunctional"), ("batchnorm",)),
    **dict.fromkeys(("dropout", "nativedropout", "nativedropoutbackward", "bernoulli",
                     "featuredropout"), ("dropout",)),
    **dict.fromkeys(("lstm", "cudnnrnn", "cudnnrnnbackward", "mkldnnrnnlayer",
                     "mkldnnrnnlayerbackward", "thnnfusedlstmcell", "sigmoid", "sigmoidbackward",
                     "tanh", "tanhbackward"), ("lstm",)),
    **dict.fromkeys(("crossentropyloss", "logsoftmax", "logsoftmaxbackwarddata", "nllloss",
                     "nlllossnd", "nlllossforward", "nlllossbackward", "nllloss2d", "mseloss",
                     "mselossbackward", "softmax", "softmaxbackwarddata"), ("loss",)),
}
# An op that does a layer's main computation once per forward (a GEMM, a convolution, an LSTM;
# a ReLU, once per layer with one): the n-th of a kind in a forward is the model's n-th layer
# of that kind (for ReLU: with a ReLU).
_ANCHORS = frozenset(("addmm", "mm", "linear", "matmul", "convolution", "conv2d",
                      "cudnnconvolution", "mkldnnconvolution", "lstm", "cudnnrnn", "mkldnnrnnlayer",
                      "relu"))
_LONGEST_OP = max(len(op.split("_")) for op in ("max_pool2d_with_indices_backward",
                                                "native_batch_norm_legit_no_training"))


@dataclass
class KernelGroup:
    """The kernels of one layer (or the mixed, or the outside) in one phase, per traced step."""

    count: float = 0.0   # kernels a step
    ms: float = 0.0      # their device busy ms a step
    names: dict[str, tuple[str, ...]] = field(default_factory=dict)  # mixed: kernel -> layers it fits


@dataclass
class KernelLayers:
    """Each layer's kernels by phase, the mixed and the outside ones; all of a phase's kernels
    are in exactly one group, so the groups add up to the phase's kernel time."""

    layers: dict[str, dict[str, KernelGroup]]   # layer -> phase -> group
    mixed: dict[str, KernelGroup]               # phase -> group
    outside: dict[str, KernelGroup]             # phase -> group
    steps: int
    placed_by: dict[str, int]                   # how kernels were placed: "range", "order", ... -> count
    source: str = DEVICE_KERNELS                # or HOST_OPS: a CPU model's ops (scripted, compiled)
    notes: list[str] = field(default_factory=list)

    def phase_ms(self, phase: str) -> float:
        groups = [g[phase] for g in self.layers.values()] + [self.mixed[phase], self.outside[phase]]
        return sum(g.ms for g in groups)

    def to_json_dict(self) -> dict:
        def group(g: KernelGroup) -> dict:
            return {"kernels": round(g.count, 3), "ms": round(g.ms, 6)}

        return {"steps": self.steps, "source": str(self.source),
                "phase_ms": {p: round(self.phase_ms(p), 6) for p in LAYER_PHASES},
                "layers": [{"name": name, **{p: group(g) for p, g in phases.items()}}
                           for name, phases in self.layers.items()],
                "mixed": {p: {**group(g), "fits": {k: list(v) for k, v in g.names.items()}}
                          for p, g in self.mixed.items()},
                "outside": {p: group(g) for p, g in self.outside.items()},
                "placed_by": self.placed_by, "notes": self.notes}


def kernel_layers(trace: Trace, timeline: PhaseTimeline, specs: list[dict] | None,
                  work: Work | None = None, depth: int | None = None) -> KernelLayers | None:
    """None where the trace is no torch trace with device kernels (or, on the CPU, with a
    compiled graph's kernels recorded one by one), or neither names layers (no layer ranges)
    nor comes with its model's layers (`specs`, the manifest's `layers`). `work`: the trace's
    find_work, where the caller has it already. `depth`: which with_modules ranges are layers,
    as layer_times takes them."""
    if trace.source_format != "torch" or not timeline.steps:
        return None
    work = work or find_work(trace, timeline)
    if work.source == DEVICE_KERNELS:
        items = [(w, w.launch) for w in work.kernels() if w.launch is not None and w.phase in LAYER_PHASES]
    elif work.source == HOST_OPS and (any(INDUCTOR_KERNEL.search(w.name) for w in work.items)
                                      or not any(is_layer_range(e.name) for e in trace.events)):
        # CPU without layer ranges (a compiled graph whose kernels were recorded, a TorchScript
        # module): each op that runs a kernel is its own unit of work. An eager run's ranges
        # give its layers' whole time instead (layer_times).
        items = [(w, w.op) for w in work.items if w.op is not None and w.phase in LAYER_PHASES]
    else:
        return None
    if not items:
        return None
    stacks, ops = _stacks(trace, {id(at) for _, at in items})
    ranges, _ = layer_ranges(trace, depth)
    kept = {(track, start, end) for track, spans in ranges.items() for start, end, _ in spans}

    def stack_of(at: Event) -> list[Event]:
        # A launch's enclosing ops (GPU); a CPU op's and itself (its own name says what it is).
        return stacks.get(id(at), []) + ([at] if work.source == HOST_OPS else [])

    ranged = any(_range_layer(stack_of(at), kept) for _, at in items)
    if not ranged and not specs:
        return None
    places = _Places(specs or [], timeline, stacks, ops, kept)
    steps = len(timeline.steps)
    layers = {s["name"]: {p: KernelGroup() for p in LAYER_PHASES} for s in specs or []}
    mixed = {p: KernelGroup() for p in LAYER_PHASES}
    outside = {p: KernelGroup() for p in LAYER_PHASES}
    placed_by: dict[str, int] = defaultdict(int)
    for w, at in items:
        layer, fits, how = places.place(stack_of(at), w.phase)
        if layer is None:
            group = mixed[w.phase] if fits else outside[w.phase]
            if fits:
                group.names.setdefault(w.name, fits)
        else:
            group = layers.setdefault(layer, {p: KernelGroup() for p in LAYER_PHASES})[w.phase]
        placed_by[how] += 1
        group.count += 1 / steps
        group.ms += w.busy_us / 1000.0 / steps
    return KernelLayers(layers, mixed, outside, steps, dict(placed_by), work.source, places.notes)


def op_kinds(name: str) -> tuple[list[tuple[str, ...]], bool]:
    """(for each op of an op, autograd node or Inductor kernel name that constrains its layer, the
    kinds of layer it fits; whether it is an anchor op); [] where none constrains it."""
    inductor = _INDUCTOR.match(name)
    if inductor:
        ops = _fused_ops(inductor.group(2))
        # A template kernel (triton_tem_) is the GEMM itself, with its epilogue fused.
        return [_KINDS[op] for op in ops if op in _KINDS], inductor.group(1) == "tem"
    op = name.removeprefix(BACKWARD_NODE).rsplit("::", 1)[-1]
    op = _BACKWARD_SUFFIX.sub("", op).replace("_", "").lower()
    kinds = [_KINDS[op]] if op in _KINDS else []
    return kinds, op in _ANCHORS


def _fused_ops(listed: str) -> list[str]:
    """The ATen ops a kernel name lists (addmm_relu, _log_softmax_nll_loss_forward): the longest
    known op at each place, unknown words one by one."""
    words = [w for w in listed.split("_") if w]
    ops, i = [], 0
    while i < len(words):
        for n in range(min(_LONGEST_OP, len(words) - i), 0, -1):
            op = "".join(words[i:i + n]).lower()
            if op in _KINDS or n == 1:
                ops.append(op)
                i += n
                break
    return ops


def _range_layer(stack: list[Event], kept: set) -> str | None:
    """The innermost range of the stack that is a layer (`kept`: layer_ranges' (track, start,
    end), so with_modules' ranges at the chosen depth only)."""
    return next((layer_name(e.name) for e in reversed(stack)
                 if e.name.startswith(LAYER_RANGE_PREFIXES) and (e.track, e.start_us, e.end_us) in kept), None)


def _stacks(trace: Trace, wanted: set[int]) -> tuple[dict[int, list[Event]], dict[int, Event]]:
    """Each wanted launch's enclosing host events, outermost first, and every host op's (by id),
    and the host ops by id: a host track's events nest, so one pass in start order finds them."""
    by_track: dict[str, list[Event]] = defaultdict(list)
    for e in trace.events:
        if e.track.startswith("host") and e.kind in (HOST_OP, ANNOTATION, OTHER, RUNTIME):
            by_track[e.track].append(e)
    stacks: dict[int, list[Event]] = {}
    ops: dict[int, Event] = {}
    anchors: dict[str, bool] = {}
    for events in by_track.values():
        events.sort(key=lambda e: (e.start_us, -e.dur_us))
        open_: list[Event] = []
        for e in events:
            while open_ and open_[-1].end_us <= e.start_us:
                open_.pop()
            if e.kind == HOST_OP:
                if e.name not in anchors:
                    anchors[e.name] = op_kinds(e.name)[1]
                # Kept: the ops whose layer others inherit (anchors, ops with a sequence
                # number); a stack for each of millions of ops would cost more than the trace.
                if anchors[e.name] or SEQUENCE in (e.stats or {}):
                    ops[id(e)] = e
                    stacks[id(e)] = list(open_)
            if id(e) in wanted:
                stacks[id(e)] = list(open_)
            open_.append(e)
    return stacks, ops


class _Places:
    """Where kernels go: the forward ops' layers first (ranges, else order against `specs`),
    which autograd nodes then inherit through their sequence numbers."""

    def __init__(self, specs: list[dict], timeline: PhaseTimeline, stacks: dict[int, list[Event]],
                 ops: dict[int, Event], kept: set):
        self.specs, self.timeline, self.stacks, self.ops, self.kept = specs, timeline, stacks, ops, kept
        # A user's model's layers (kind "module", gapscope.model_layers) have no kind an op's
        # name could fit: only ranges and autograd place kernels there, the rest is outside.
        self.kinded = any(s["kind"] != "module" for s in specs) or not specs
        self.notes: list[str] = []
        self.anchor_layer = self._ordered_anchors()
        self.by_sequence = self._sequence_layers()

    def _fits(self, kinds: tuple[str, ...]) -> set[str]:
        """The spec's layers of those kinds (relu: also a layer with ReLU as its activation)."""
        return {s["name"] for s in self.specs if s["kind"] in kinds
                or ("relu" in kinds and s.get("activation") == "relu")}

    def _anchor(self, stack: list[Event], phase: str) -> Event | None:
        """The outermost anchor of a stack. Forward: the op (aten::linear rather than the
        aten::addmm inside it; in a compiled graph its extern GEMM). Backward: the autograd node
        of an anchor op (AddmmBackward0), never an op inside a compiled graph's backward."""
        backward = phase == "backward"
        return next((e for e in stack if e.kind == HOST_OP and op_kinds(e.name)[1]
                     and e.name.startswith(BACKWARD_NODE) == backward), None)

    def _ordered_anchors(self) -> dict[int, str]:
        """The n-th outermost anchor of a kind in a step's forward is the spec's n-th layer of that
        kind, and in its backward the n-th from the last: the seed models are chains, whose
        forward runs the layers in order and whose backward runs them in reverse (each waits for
        the one before). Only where every traced step has as many as the spec has layers."""
        anchors: dict[tuple[str, str], dict[int, list[Event]]] = defaultdict(lambda: defaultdict(list))
        for e in self.ops.values():
            kinds, anchor = op_kinds(e.name)
            if not anchor:
                continue
            step, phase = self.timeline.locate(e.start_us)
            if phase in LAYER_PHASES and self._anchor(self.stacks.get(id(e), []) + [e], phase) is e:
                anchors[(kinds[0][0], phase)][step].append(e)
        found = {}
        for (kind, phase), by_step in anchors.items():
            fits = self._fits((kind,))
            layers = [s["name"] for s in self.specs if s["name"] in fits]
            counts = {len(ops) for ops in by_step.values()}
            if len(by_step) != len(self.timeline.steps) or counts != {len(layers)}:
                if layers:
                    self.notes.append(f"{kind} ops per {phase} ({', '.join(map(str, sorted(counts)))}) "
                                      f"differ from the model's {len(layers)} {kind} layer(s): "
                                      "not placed by order")
                continue
            for ops in by_step.values():
                ordered = sorted(ops, key=lambda e: e.start_us)
                for op, layer in zip(ordered, layers if phase == "forward" else layers[::-1]):
                    found[id(op)] = layer
        return found

    def _sequence_layers(self) -> dict[int, str]:
        """Each autograd sequence number of a forward op with a layer (traces with layer ranges
        keep them): a backward node with it computes that layer's gradients."""
        by_sequence: dict[int, str] = {}
        for e in self.ops.values():
            sequence = (e.stats or {}).get(SEQUENCE)
            if sequence is None or sequence in by_sequence or e.name.startswith(BACKWARD_NODE):
                continue
            if self.timeline.locate(e.start_us)[1] != "forward":
                continue
            layer, _, _ = self._layer(self.stacks.get(id(e), []) + [e], "forward")
            if layer is not None:
                by_sequence[sequence] = layer
        return by_sequence

    def place(self, stack: list[Event], phase: str) -> tuple[str | None, tuple[str, ...], str]:
        """(layer or None, the layers it fits where mixed, how it was placed) of a kernel whose
        launch (GPU), or whose op itself (CPU), has these enclosing host events."""
        return self._layer(stack, phase)

    def _layer(self, stack: list[Event], phase: str) -> tuple[str | None, tuple[str, ...], str]:
        layer = _range_layer(stack, self.kept)
        if layer is not None:
            return layer, (), "range"
        if phase == "backward":
            node = next((e for e in reversed(stack) if e.name.startswith(BACKWARD_NODE)), None)
            sequence = (node.stats or {}).get(SEQUENCE) if node is not None else None
            if sequence in self.by_sequence:
                return self.by_sequence[sequence], (), "autograd"
        anchor = self._anchor(stack, phase)
        if anchor is not None and id(anchor) in self.anchor_layer:
            return self.anchor_layer[id(anchor)], (), "order"
        if not self.kinded:
            return None, (), OUTSIDE
        everyone = [s["name"] for s in self.specs]
        for e in reversed(stack):
            kinds = op_kinds(e.name)[0]
            if not kinds:
                continue
            per_op = [self._fits(k) for k in kinds]
            common = set.intersection(*per_op)
            if len(common) == 1:
                return common.pop(), (), "name"
            # Several layers fit all its ops, or none fits them all (it spans layers).
            fits = common or set.union(*per_op)
            return None, tuple(n for n in everyone if n in fits) or tuple(everyone), MIXED
        if any(e.name.startswith(_GRAPH_MARKS) for e in stack):
            # A compiled graph runs the model's layers only: a kernel of it whose ops say
            # nothing (a bias gradient's sum) is one of them, which the trace cannot tell.
            return None, tuple(s["name"] for s in self.specs if s["kind"] != "loss"), MIXED
        return None, (), OUTSIDE
