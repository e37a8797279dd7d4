"""Layers of a user's own torch model: `gapscope_layer/<qualified name>` ranges on its modules in
the traced window, and each layer's forward and backward FLOPs counted on one untimed step."""
from __future__ import annotations

from gapscope.analysis.measures.layer_flops import layer_flops
from gapscope.workloads.runners.layer_ranges import LayerRanges

# Modules that only hold others: their children are the layers, never they themselves.
_CONTAINERS = ("Sequential", "ModuleList", "ModuleDict")
_RECURRENT = ("LSTM", "GRU", "RNN")  # torch's FLOP counter may count 0 for them (fused kernels)
_COUNTED = ("forward", "backward")


def select_layers(model, depth: int = 1) -> dict[str, object]:
    """The layers at `depth`, by qualified module name (`block.0`, `head`), in the model's order.

    Depth 1: the model's children that hold parameters. Containers (Sequential, ModuleList,
    ModuleDict) and a module whose parameters all sit in one child (a LightningModule's
    `self.model`) are looked through, so a layer is a module that computes. Each further level
    adds every child of a layer that has children, parameter-free ones (GELU, Dropout) too; the
    layer itself stays, its row then holding its own time outside its children."""
    if depth < 1:
        raise ValueError(f"layer_depth must be 1 or more, got {depth}")
    found: dict[str, object] = {}
    seen: set[int] = set()  # a module reachable under two names is one layer, its first name

    def holds_parameters(module) -> bool:
        return next(module.parameters(), None) is not None

    def children(module, prefix: str):
        """(name, child) below `module`, containers and single-holder wrappers looked through."""
        for name, child in module.named_children():
            qualified = prefix + name
            if type(child).__name__ in _CONTAINERS:
                yield from children(child, qualified + ".")
            else:
                yield qualified, child

    def root_children(module, prefix: str):
        holders = [(n, c) for n, c in children(module, prefix) if holds_parameters(c)]
        own = next(module.parameters(recurse=False), None) is not None
        if len(holders) == 1 and not own and any(True for _ in holders[0][1].children()):
            return root_children(holders[0][1], holders[0][0] + ".")
        return holders

    def add(name: str, module, level: int) -> None:
        if id(module) in seen:
            return
        seen.add(id(module))
        found[name] = module
        if level < depth:
            for child_name, child in children(module, name + "."):
                add(child_name, child, level + 1)

    for name, child in root_children(model, ""):
        add(name, child, 1)
    return found


def own_layers(model, depth: int | None, window) -> "ModelLayers | None":
    """The model's layers over a capture; None without a model, a depth or a traced window.
    A compiled model is refused: hooks added to it in the window would make Dynamo recompile
    it and break its graph at each range."""
    if model is None or depth is None or window is None or window.steps <= 0:
        return None
    if not hasattr(model, "named_children"):
        raise ValueError(f"model= takes a torch.nn.Module, got {type(model).__name__}")
    if hasattr(model, "_orig_mod"):
        raise ValueError("model= takes an eager model: layer ranges on a torch.compile'd one "
                         "would make it recompile and break its graph; leave model= out")
    return ModelLayers(model, depth, window)


class ModelLayers:
    """One model's layers over one capture: ranges in the traced window (hooks attached at its
    first step, removed after its last, so other steps run no hook), and FLOPs counted by
    `torch.utils.flop_counter.FlopCounterMode` over the profiler's warm-up step, the step before
    the window (a real training step, left out of the steady state as traced; nothing is run
    twice, so the training's state is the loop's own)."""

    def __init__(self, model, depth: int, window):
        self.model, self.depth, self.window = model, depth, window
        self.layers = select_layers(model, depth)
        self._ranges = LayerRanges(self.layers)
        self.count_step = window.first - 1
        self.counting = False
        self._counter = None
        self._last: dict[str, int] = {}
        self._phase: str | None = None
        self._flops: dict[str, dict[str, int]] = {p: {} for p in _COUNTED}
        self._calls: dict[str, int] = {}
        self._recurrent: list[tuple[str, dict]] = []
        self._count_hooks: list = []
        self._counted = False
        self._split = False  # the loop marked a backward phase in the counted step

    # -- the loop's steps -----------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        if step == self.count_step and not self._counted:
            self._start_count()
        if step == self.window.first:
            self._ranges.attach()

    def phase(self, name: str | None) -> None:
        """The counted step entered phase `name` (None: it left its phase)."""
        self._settle()
        self._phase = name
        self._split = self._split or name == "backward"

    def end_step(self, step: int) -> None:
        if self.counting:
            self._stop_count()
        if step == self.window.last:
            self._ranges.detach()

    def close(self) -> None:
        """Ends what is open: the loop ended or failed inside the counted step or the window."""
        if self.counting:
            self._stop_count()
        self._ranges.detach()

    # -- counting -------------------------------------------------------------------------
    def _start_count(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._counter = FlopCounterMode(display=False)
        self._counter.__enter__()
        self.counting, self._last, self._phase = True, {}, None
        for name, module in self.layers.items():
            self._count_hooks.append(module.register_forward_pre_hook(self._called(name)))
        for name, module in self.model.named_modules():
            if type(module).__name__ in _RECURRENT:
                self._count_hooks.append(module.register_forward_hook(self._recurrent_shape(name)))

    def _stop_count(self) -> None:
        self._settle()
        self.counting, self._counted = False, True
        for handle in self._count_hooks:
            handle.remove()
        self._count_hooks = []
        counter, self._counter = self._counter, None
        counter.__exit__(None, None, None)

    def _settle(self) -> None:
        """The FLOPs counted since the last phase change, given to the phase that was open."""
        if not self.counting:
            return
        now = {name: sum(ops.values()) for name, ops in self._counter.get_flop_counts().items()}
        if self._phase in _COUNTED:
            into = self._flops[self._phase]
            for name, flop in now.items():
                into[name] = into.get(name, 0) + flop - self._last.get(name, 0)
        self._last = now

    def _called(self, name: str):
        def count_call(module, args):
            self._calls[name] = self._calls.get(name, 0) + 1
        return count_call

    def _recurrent_shape(self, name: str):
        def record(module, args, output):
            x = args[0] if args else None
            if hasattr(x, "dim") and x.dim() == 3:
                batch_axis = 0 if module.batch_first else 1
                self._recurrent.append((name, {
                    "kind": type(module).__name__, "batch": x.shape[batch_axis],
                    "steps": x.shape[1 - batch_axis], "inputs": module.input_size,
                    "units": module.hidden_size, "layers": module.num_layers,
                    "directions": 2 if module.bidirectional else 1,
                    "input_grad": bool(x.requires_grad)}))
        return record

    # -- what the run directory keeps ------------------------------------------------------
    def manifest_fields(self) -> dict:
        """`layers` (name, kind "module", counted FLOPs per step, parameters, calls) and
        `layer_notes`, for the run's manifest."""
        notes: list[str] = []
        flops = self._layer_flops(notes) if self._counted else None
        if not self._counted:
            notes.append("no FLOPs: the loop ended before the step they are counted on "
                         f"(step {self.count_step}, the one before the traced window)")
        elif not self._split:
            notes.append("no FLOPs: the counted step marked no backward phase, so forward "
                         "and backward could not be told apart")
            flops = None
        tensors = self._tensors()
        layers = []
        for name, module in self.layers.items():
            counted = flops.get(name, {}) if flops else {}
            layers.append({"name": name, "kind": "module", "dims": {
                "module": type(module).__name__,
                "forward_flop": counted.get("forward"), "backward_flop": counted.get("backward"),
                "params": sum(p.numel() for p in module.parameters()),
                "tensors": tensors.get(name) if tensors else None,
                "calls": self._calls.get(name, 0) if self._counted else None}})
        for name in self.layers:
            calls = self._calls.get(name, 0)
            if calls > 1:
                notes.append(f"{name} ran {calls} times in the counted step (one module called "
                             "again): its row holds every call, each instant and FLOP once")
        return {"layers": layers, "layer_notes": notes, "layer_depth": self.depth}

    def _tensors(self) -> dict[str, int] | None:
        """Each layer's own parameter tensors (those in no child layer), where the layers in
        their order hold the model's tensors in its order, as an optimizer built from
        `model.parameters()` updates them one by one (analysis.measures.optimizer_layers);
        else None."""
        owner: dict[int, str] = {}
        for name, module in self.layers.items():  # parents first: a child layer's overwrite them
            for parameter in module.parameters():
                owner[id(parameter)] = name
        order = [owner.get(id(p)) for p in self.model.parameters()]
        counts: dict[str, int] = {}
        for name in order:
            if name is None or (counts and name != list(counts)[-1] and name in counts):
                return None
            counts[name] = counts.get(name, 0) + 1
        return counts if list(counts) == [n for n in self.layers if n in counts] else None

    def _layer_flops(self, notes: list[str]) -> dict[str, dict[str, int]]:
        """Each layer's own FLOPs by phase: the counter's module total (keyed by the path from
        the outermost module it saw run) less those of its child layers, plus the LSTM rule for
        an nn.LSTM the counter counts as 0 (its fused kernel: mkldnn on the CPU, cuDNN)."""
        inclusive = {name: {p: self._counted_of(name, p) for p in _COUNTED} for name in self.layers}
        for name, shape in self._recurrent:  # each call: a module called twice counts twice
            if self._counted_of(name, "forward"):
                continue  # counted (GRU and RNN decompose into GEMMs on the CPU)
            if shape["kind"] != "LSTM":
                note = (f"{name}: torch's FLOP counter counts 0 for this nn.{shape['kind']} and "
                        "gapscope has no rule for it: its FLOPs are left out")
                notes += [note] if note not in notes else []
                continue
            extra = _lstm_flops(shape)
            for layer in self.layers:
                if name == layer or name.startswith(layer + "."):
                    for p in _COUNTED:
                        inclusive[layer][p] += extra[p]
        own = {}
        for name, phases in inclusive.items():
            children = [c for c in self.layers if c.startswith(name + ".")
                        and not any(c.startswith(m + ".") for m in self.layers
                                    if m.startswith(name + ".") and m != c)]
            own[name] = {p: phases[p] - sum(inclusive[c][p] for c in children) for p in _COUNTED}
        return own

    def _counted_of(self, name: str, phase: str) -> int:
        """The counter keys a module by its path below the outermost module that ran (its type
        name): `Net.block.0` for `block.0` of a model called as a whole, `Sequential.0` for
        `net.0` of a LightningModule whose training_step calls `self.net`, and a path through
        the wrappers (`DistributedDataParallel.module._forward_module.net.0`) under DDP. So:
        the model's path from each of its modules down, else the shortest key ending in the
        layer's name; no key, no FLOPs counted in it."""
        keys = self._flops["forward"].keys() | self._flops["backward"].keys()
        parts, module = name.split("."), self.model
        for i in range(len(parts)):
            key = ".".join([type(module).__name__] + parts[i:])
            if key in keys:
                return self._flops[phase].get(key, 0)
            module = getattr(module, parts[i])
        ending = sorted((k for k in keys if k.endswith("." + name)), key=len)
        return self._flops[phase].get(ending[0], 0) if ending else 0


def _lstm_flops(shape: dict) -> dict[str, int]:
    """The hand rules of analysis.measures.layer_flops, per stacked layer and direction."""
    total = dict.fromkeys(_COUNTED, 0)
    for index in range(shape["layers"]):
        inputs = shape["inputs"] if index == 0 else shape["units"] * shape["directions"]
        spec = {"kind": "lstm", "dims": {"inputs": inputs, "units": shape["units"],
                                         "steps": shape["steps"]},
                "input_grad": shape["input_grad"] or index > 0}
        counted = layer_flops(spec, shape["batch"])
        for p in _COUNTED:
            total[p] += getattr(counted, p) * shape["directions"]
    return total


COMPILED_NOTE = ("no layer ranges: the model trains compiled, and hooks on its modules would make "
                 "it recompile and break its graph")
