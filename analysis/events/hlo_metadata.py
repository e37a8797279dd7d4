"""What each executed HLO op was compiled from: framework op names, and so the phase, per XLA instruction."""
from __future__ import annotations

from dataclasses import dataclass, replace

from gapscope.analysis.events.phase_rules import JAX_PROGRAMS, framework_phase, gapscope_phase, placed_name
from gapscope.profilers.phases import MARKED_PHASES

# A fused instruction's ops come from one phase, from several (a finding), or from none we know.
MIXED = "mixed"
UNATTRIBUTED = "unattributed"


@dataclass(frozen=True)
class HloOp:
    """One instruction of a module's entry computation: what XLA executes as a thunk."""

    name: str
    opcode: str
    # Framework op names (metadata op_name) of the instruction and, for a fusion, of every
    # instruction fused into it; parameters and constants without metadata add none.
    op_names: tuple[str, ...]
    # The instruction's own metadata: the framework op XLA says it stands for (for a fusion,
    # its root op), as XProf names it.
    op_name: str = ""
    op_type: str = ""
    # In a JAX program, the phase the op's place gives where its names say none: a name without
    # a transformation (`jit(train_step)/sub`), an op without a name of the program (`dot.5`),
    # an op a loop runs (_jax_order, _loop_bodies). None elsewhere.
    by_order: str | None = None

    @property
    def framework_op(self) -> str | None:
        """`<op_name>:<op_type>`, the form TF op events have, or None without metadata. A JAX op
        goes by its first name where it has no own one (by its instruction's name where it has
        none at all), marked where its place gave its phase (_jax_order)."""
        name = self.op_name or next((n for n in self.op_names if n.startswith(JAX_PROGRAMS)), "")
        if not name and self.by_order:
            name = self.name
        if not name:
            return None
        if self.by_order and not op_name_phase(name):
            return placed_name(name, self.by_order)
        return f"{name}:{self.op_type}" if self.op_type else name

    @property
    def is_fusion(self) -> bool:
        return self.opcode == "fusion"

    @property
    def named_phases(self) -> tuple[str, ...]:
        """Phases of the op names, sorted; an op name outside every phase scope adds nothing."""
        return tuple(sorted({p for p in map(op_name_phase, self.op_names) if p}))

    @property
    def phases(self) -> tuple[str, ...]:
        """The op names' phases, and the one its place in a JAX program gives its names that
        say none: a fusion of a gradient and the update it feeds is mixed."""
        named = self.named_phases
        return tuple(sorted({*named, self.by_order})) if self.by_order else named

    @property
    def phase(self) -> str:
        phases = self.phases
        if not phases:
            return UNATTRIBUTED
        return phases[0] if len(phases) == 1 else MIXED


def op_name_phase(op_name: str) -> str | None:
    """Phase of an HLO metadata op_name such as `gradient_tape/gapscope_forward/dense/MatMul`."""
    return gapscope_phase(op_name) or framework_phase(op_name + ":")


@dataclass
class HloModules:
    """Per module name, its entry instructions by name: the lookup a thunk's hlo_op needs."""

    modules: dict[str, dict[str, HloOp]]
    source: str  # "profile" (HloProto inside the .xplane.pb) or "dump" (XLA text dump)

    def find(self, module: str | None, op: str) -> HloOp | None:
        if module is not None and module in self.modules:
            return self.modules[module].get(op)
        # Thunks without a module name: unique op names across modules still identify them.
        hits = [ops[op] for ops in self.modules.values() if op in ops]
        return hits[0] if len(hits) == 1 else None

    def __bool__(self) -> bool:
        return bool(self.modules)


def entry_ops(instructions_by_computation: dict[str, list], entry: str) -> dict[str, HloOp]:
    """HloOps of the entry computation from raw (name, opcode, op_name, op_type, called) tuples
    per computation; called computations (fusion bodies, reducers) lend their op names, recursively.
    In a JAX program, also the ops of the computations its loops run (_loop_bodies)."""
    names_cache: dict[str, tuple[str, ...]] = {}

    def computation_op_names(computation: str, seen: frozenset) -> tuple[str, ...]:
        if computation in names_cache:
            return names_cache[computation]
        found: list[str] = []
        for _, _, op_name, _, called in instructions_by_computation.get(computation, []):
            if op_name:
                found.append(op_name)
            for callee in called:
                if callee not in seen:
                    found.extend(computation_op_names(callee, seen | {callee}))
        names_cache[computation] = tuple(dict.fromkeys(found))
        return names_cache[computation]

    def make(name, opcode, op_name, op_type, called) -> HloOp:
        names = [op_name] if op_name else []
        for callee in called:
            names.extend(computation_op_names(callee, frozenset({callee})))
        return HloOp(name, opcode, tuple(dict.fromkeys(names)), op_name, op_type)

    raw = instructions_by_computation.get(entry, [])
    ops = _jax_order({r[0]: make(*r) for r in raw if r[1] not in _NO_THUNK})
    if _names_a_jax_program(ops):
        ops.update(_loop_bodies(raw, ops, instructions_by_computation, make, frozenset({entry})))
    return ops


# Instructions that run no thunk of their own.
_NO_THUNK = ("parameter", "constant", "tuple", "get-tuple-element")
# Instructions whose called computations run as thunks of their own (not fused, not a reducer).
_CONTROL_FLOW = ("while", "conditional", "call")


def _names_a_jax_program(ops: dict[str, HloOp]) -> bool:
    return any(n.startswith(JAX_PROGRAMS) for op in ops.values() for n in op.op_names)


def _loop_bodies(raw: list, callers: dict[str, HloOp], by_computation: dict[str, list], make,
                 seen: frozenset) -> dict[str, HloOp]:
    """The ops of the computations a JAX program's while, conditional or call runs (an LSTM's
    scan): XLA runs them as thunks of their own inside the caller's, named by their own
    instruction. Each takes its names' phase, else its caller's (a loop of the backward is
    backward all through, its body's unnamed copies too). Nested loops likewise."""
    found: dict[str, HloOp] = {}
    for name, opcode, _, _, called in raw:
        caller = callers.get(name) or found.get(name)
        if opcode not in _CONTROL_FLOW or caller is None:
            continue
        inherited = op_name_phase(caller.op_name) if caller.op_name else None
        inherited = inherited or caller.by_order or (caller.phase if caller.phase in MARKED_PHASES else None)
        for callee in called:
            if callee in seen:
                continue
            inner = by_computation.get(callee, [])
            for r in inner:
                if r[1] in _NO_THUNK:
                    continue
                op = make(*r)
                found[op.name] = replace(op, by_order=inherited) if inherited and not op.named_phases else op
            found.update(_loop_bodies(inner, {**callers, **found}, by_computation, make, seen | {callee}))
    return found


def _jax_order(ops: dict[str, HloOp]) -> dict[str, HloOp]:
    """Phases by place in a JAX program's entry order, which is XLA's schedule, where the names
    say none. A name of the program without a transformation (`jit(train_step)/sub`): forward
    before the first gradient op (the loss's mean, its scaling), the optimizer after it (the
    update, the step counter, the metrics). An op without a name of the program (XLA dropped
    its metadata in a layout pass: `dot.5`, a weight gradient; or it names a parameter only,
    `params['w2']`): forward before the first gradient op, backward up to the last one (where
    the gradients are made), unattributed after it (an output's copy, or an update: either)."""
    if not _names_a_jax_program(ops):
        return ops
    order = list(ops)
    gradients = [i for i, name in enumerate(order) if "backward" in ops[name].named_phases]
    first, last = (gradients[0], gradients[-1]) if gradients else (len(order), len(order))
    found = {}
    for i, name in enumerate(order):
        op = ops[name]
        if any(n.startswith(JAX_PROGRAMS) and not op_name_phase(n) for n in op.op_names):
            op = replace(op, by_order="forward" if i < first else "optimizer")
        elif not op.named_phases and not any(n.startswith(JAX_PROGRAMS) for n in op.op_names):
            placed = "forward" if i < first else "backward" if i < last else None
            op = replace(op, by_order=placed) if placed else op
        found[name] = op
    return found
