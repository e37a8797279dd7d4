"""The units of work a step executes (device kernels, or on the CPU the ops and XLA thunks that
stand for them), each placed in a step and a phase, and their counts, fusion and durations."""
from __future__ import annotations

import enum
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np

from gapscope.analysis.events import intervals
from gapscope.analysis.events.columns import NONE, code
from gapscope.analysis.events.hlo_metadata import HloModules, MIXED, UNATTRIBUTED
from gapscope.analysis.events.kernel_names import demangled
from gapscope.analysis.events.phase_rules import framework_phase, gapscope_phase
from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.measures import fusion, fusion_table
from gapscope.analysis.measures.runtime_calls import COPY, LAUNCH, call_kind
from gapscope.analysis.readers.torch_trace import RANGE_PROFILER
from gapscope.analysis.events.trace import HOST_OP, KERNEL, MEMCPY, MEMSET, RUNTIME, Event, Trace
from gapscope.profilers.phases import PHASES

class WorkSource(enum.StrEnum):
    """What a run's units of work are."""

    DEVICE_KERNELS = "device kernels"
    HOST_OPS = "host ops"          # CPU torch / TF: each executed op stands for a kernel
    XLA_THUNKS = "XLA thunks"      # CPU XLA: each thunk runs one compiled kernel
    # A GPU run whose device side was not traced (ProfilerActivity.CPU alone, a range
    # profiler): its host ops are no kernels, and it has host figures only.
    NOT_TRACED = "no device activity traced"


DEVICE_KERNELS, HOST_OPS, XLA_THUNKS, NOT_TRACED = WorkSource


# Which kernels and ops are fused (Inductor, XLA, TF's graph optimizer, oneDNN, cuBLASLt, cuDNN):
# fusion_table. Inductor's CPU kernels, itemised or not, decide how a compiled graph is counted.
INDUCTOR_KERNEL = re.compile(r"cpp_fused|triton_")
# TF op events read "<scope path>:<OpType>"; IteratorGetNext hands over the batch (data_load).
_TF_OP = re.compile(r"^[\w.\-/]+:[A-Z_][A-Za-z0-9_]*$")
_TF_KERNEL_OPS = frozenset({"IteratorGetNextOp::DoCompute"})
# A compiled Inductor graph whose CPU kernels were not recorded one by one.
COMPILED_GRAPH = "## Call CompiledFxGraph"
# Ops that only make views, metadata or empty allocations: no kernel runs for them.
_NO_KERNEL = frozenset(f"aten::{n}" for n in (
    "empty", "empty_strided", "empty_like", "empty_permuted", "view", "_unsafe_view", "as_strided",
    "expand", "t", "transpose", "permute", "reshape", "_reshape_alias", "detach", "detach_",
    "alias", "resolve_conj", "resolve_neg", "lift_fresh", "unsqueeze", "squeeze", "slice",
    "select", "split", "chunk", "narrow", "unbind", "set_", "expand_as", "view_as", "flatten",
    "unflatten", "contiguous", "result_type", "promote_types", "is_nonzero", "item",
    "_local_scalar_dense", "size", "stride", "numel", "new_empty", "new_empty_strided"))
# An op that spends most of its time in child ops only dispatches them (aten::linear around
# aten::addmm); one that spends most in itself runs the kernel (aten::addmm around a copy_).
_SELF_SHARE = 0.5


@dataclass
class WorkItem:
    """One executed kernel (or stand-in), with the time it kept the device (or core) busy."""

    name: str
    start_us: float
    busy: list[tuple[float, float]]  # merged; a CPU op's own time, without its child ops
    step: int                        # index into the timeline's steps
    phase: str                       # a phase, "mixed" (XLA fusion of two phases) or "unattributed"
    fused: bool
    kind: str = KERNEL               # KERNEL, MEMCPY or MEMSET
    nbytes: int | None = None
    launch: Event | None = None      # the host runtime call that launched it (GPU)
    phases: tuple[str, ...] = ()     # XLA: every phase its HLO op was built from
    fusion: fusion_table.Fused | None = None  # what it fused, where it is a fused op
    op: Event | None = None          # CPU: the host op that is this unit of work

    @property
    def busy_us(self) -> float:
        return intervals.total(self.busy)


@dataclass
class Work:
    """All work items of a trace's steps and how they were found."""

    items: list[WorkItem]
    source: str
    steps: int
    launches: list[Event] = field(default_factory=list)  # runtime calls inside the steps (GPU)
    notes: list[str] = field(default_factory=list)

    def kernels(self) -> list[WorkItem]:
        return [w for w in self.items if w.kind == KERNEL]

    def transfers(self) -> list[WorkItem]:
        return [w for w in self.items if w.kind != KERNEL]


def find_work(trace: Trace, timeline: PhaseTimeline, hlo: HloModules | None = None) -> Work:
    if any(e.kind in (KERNEL, MEMCPY, MEMSET) and e.track.startswith("device") for e in trace.events):
        return _device_work(trace, timeline, hlo)
    untraced = device_not_traced(trace)
    if untraced:
        return Work([], NOT_TRACED, len(timeline.steps), notes=[untraced])
    host = _host_op_work(trace, timeline)
    if any(e.hlo_op for e in trace.events):
        # The compiled step's thunks, plus the TF ops around it (IteratorGetNext: data_load).
        xla = _xla_work(trace, timeline, hlo)
        return Work(xla.items + host.items, xla.source, xla.steps, notes=xla.notes + host.notes)
    return host


def _device_work(trace: Trace, timeline: PhaseTimeline, hlo: HloModules | None = None) -> Work:
    """GPU: a kernel belongs to the step and phase of the host call that launched it (same
    correlation id), however late it runs; one with no launch found is unattributed. Under
    XLA one launch runs the whole compiled step: there the kernel's HLO op names its phase."""
    launches = {}
    in_steps = []
    for e in trace.events:
        if e.kind == RUNTIME and e.correlation is not None:
            launches[e.correlation] = e
            if timeline.step_at(e.start_us) is not None:
                in_steps.append(e)
    items, orphans = [], 0
    for e in trace.events:
        if e.kind not in (KERNEL, MEMCPY, MEMSET) or not e.track.startswith("device"):
            continue
        launch = launches.get(e.correlation)
        if launch is None:
            # No launch to follow: placed by its own time, and its phase stays unknown.
            step, phase = timeline.step_at(e.start_us), UNATTRIBUTED
            orphans += step is not None
        else:
            step, phase = timeline.locate(launch.start_us)
        if step is None:
            continue
        phases = ()
        if e.hlo_op:
            op = hlo.find(e.hlo_module, e.hlo_op) if hlo else None
            phase, phases = (op.phase, op.phases) if op else (UNATTRIBUTED, ())
        fused = fusion_table.classify(e.hlo_op or e.name) if e.kind == KERNEL else None
        items.append(WorkItem(e.name, e.start_us, [(e.start_us, e.end_us)], step, phase,
                              fused is not None, e.kind, e.nbytes, launch, phases, fused))
    notes = [f"{orphans} device events had no launching host call (correlation): unattributed"] if orphans else []
    notes += _past_the_host(trace)
    return Work(items, DEVICE_KERNELS, len(timeline.steps), in_steps, notes)


def device_not_traced(trace: Trace) -> str | None:
    """Why a trace without a single device event is still a GPU run's, where it is: its host
    called the CUDA/HIP runtime to queue work, or a range profiler counted the device. Its host
    ops then stand for no kernel (they only launched them), so it gets host figures only. A
    trace with deviceProperties and no runtime call is a CPU model's on a GPU machine."""
    # From the columns: this runs for every breakdown, where a big trace's events are never
    # made objects.
    columns = trace.columns
    kinds = columns.kind_codes()
    if (np.isin(kinds, [code(k) for k in (KERNEL, MEMCPY, MEMSET)]) & ~columns.on_host()).any():
        return None
    ids, counts = np.unique(columns.name[kinds == code(RUNTIME)], return_counts=True)
    calls = int(counts.sum())
    work = int(sum(n for i, n in zip(ids.tolist(), counts.tolist())
                   if call_kind(columns.names[i]) in (LAUNCH, COPY)))
    ranges = RANGE_PROFILER in (trace.metadata.get("categories") or ())
    if not work and not ranges:
        return None
    said = [f"{calls:,} runtime calls, {work:,} of them queuing device work"] if work else []
    said += [f"{RANGE_PROFILER} ranges (a range profiler's counters)"] if ranges else []
    return (f"no device activity was traced: {' and '.join(said)}, but no kernel, copy or set "
            "event (recorded with ProfilerActivity.CPU alone, or by a range profiler): host "
            "figures only")


def _past_the_host(trace: Trace) -> list[str]:
    found = past_the_host(trace)
    return [found.note] if found else []


@dataclass
class PastTheHost:
    """Device work that runs on after the host's last event (a serving engine's graph replay:
    one launch queues hundreds of kernels, and the host's side ends long before they do)."""

    events: int
    ms: float                       # device time after the host's last event, streams apart
    launches: Counter               # launching runtime call's name -> late events it queued
    # The call that queued most of them, where each call queued many (a graph launch):
    # (name, calls, events).
    graph: tuple[str, int, int] | None

    @property
    def note(self) -> str:
        one = "" if not self.graph else (
            f" ({self.graph[2]:,} of them queued by "
            + (f"one {self.graph[0]}" if self.graph[1] == 1 else f"{self.graph[1]:,} {self.graph[0]} calls")
            + ")")
        return (f"{self.events:,} device event(s) run past the last host event: {self.ms:.3f} ms of "
                f"device time after it{one}; counted to the launch that queued them, outside the "
                "host's step time (the host queued ahead, or its side of the window was cut)")


def past_the_host(trace: Trace) -> PastTheHost | None:
    """Where device work runs on after the host's last event, and which launches queued it
    (by correlation id): the host queued far ahead (or the host side of the window was cut),
    so the device's time there lies outside every host window, and a host-side busy figure
    leaves it out."""
    columns = trace.columns
    host = columns.on_host()
    if not host.any() or host.all():
        return None
    ends = columns.start_us + columns.dur_us
    host_end = float(ends[host].max())
    late = ~host & (ends > host_end)
    if not late.any():
        return None
    past_ms = float((ends[late] - np.maximum(columns.start_us[late], host_end)).sum()) / 1000
    rows = np.flatnonzero(late)
    correlations = Counter(int(c) for c in columns.correlation[rows])
    correlations.pop(NONE, None)  # device events with no correlation id: no launch to find
    # The launching calls, from the columns (a big trace's events are never made objects here).
    calling = np.flatnonzero((columns.kind_codes() == code(RUNTIME))
                             & np.isin(columns.correlation, np.fromiter(correlations, np.int64)))
    launches: Counter = Counter()
    calls: Counter = Counter()
    for name_id, correlation in zip(columns.name[calling].tolist(), columns.correlation[calling].tolist()):
        name = columns.names[name_id]
        launches[name] += correlations[correlation]
        calls[name] += 1
    top = launches.most_common(1)
    # Named where one kind of call queued most of them, many each: a graph's launches, not a
    # string of kernel launches.
    graph = None
    if top and 2 * top[0][1] > len(rows) and top[0][1] >= 2 * calls[top[0][0]]:
        graph = (top[0][0], calls[top[0][0]], top[0][1])
    return PastTheHost(len(rows), past_ms, launches, graph)


def _xla_work(trace: Trace, timeline: PhaseTimeline, hlo: HloModules | None) -> Work:
    """CPU XLA: each thunk's phase comes from the framework op names its HLO op was built from."""
    items, unknown = [], set()
    for e in trace.events:
        if not e.hlo_op or e.kind != HOST_OP:
            continue
        step = timeline.step_at(e.start_us)
        if step is None:
            continue
        op = hlo.find(e.hlo_module, e.hlo_op) if hlo else None
        if op is None:
            unknown.add(e.hlo_op)
        phase = op.phase if op else UNATTRIBUTED
        fused = fusion_table.classify(e.hlo_op)
        items.append(WorkItem(e.hlo_op, e.start_us, [(e.start_us, e.end_us)], step, phase,
                              fused is not None, phases=op.phases if op else (), fusion=fused))
    notes = []
    if not hlo:
        notes.append("no HLO metadata (profile HloProto or xla_dump/): XLA ops not mapped to phases")
    elif unknown:
        notes.append(f"{len(unknown)} HLO ops not found in the HLO metadata: unattributed")
    return Work(items, XLA_THUNKS, len(timeline.steps), notes=notes)


def _host_op_work(trace: Trace, timeline: PhaseTimeline) -> Work:
    """CPU torch / TF: ops that run a kernel, with their own time (children taken out)."""
    by_track = defaultdict(list)
    for e in trace.events:
        if e.kind == HOST_OP and e.track.startswith("host") and not e.hlo_op:
            by_track[e.track].append(e)
    # Without Inductor's kernel profiling a compiled graph's kernels are invisible: its own
    # time then stands for them; with it, the graph call is only a wrapper.
    itemised = any(INDUCTOR_KERNEL.search(op.name) for ops in by_track.values() for op in ops)
    items, opaque_graphs = [], 0
    for ops in by_track.values():
        for op, own in _own_time(ops):
            opaque = not itemised and op.name.startswith(COMPILED_GRAPH)
            if not (opaque or _runs_kernel(op)):
                continue
            if not opaque and intervals.total(own) < _SELF_SHARE * op.dur_us:
                continue
            step, phase = timeline.locate(op.start_us)
            if step is None:
                continue
            name = op.name
            if opaque:
                opaque_graphs += 1
                name = f"inductor graph {op.name.split()[3][:8]} (kernels not itemised)"
            if _TF_OP.match(op.name):  # TF ops carry their phase in their name, whichever thread ran them
                phase = gapscope_phase(op.name) or framework_phase(op.name) or phase
            fused = fusion_table.compiled_graph() if opaque else fusion_table.classify(op.name)
            items.append(WorkItem(name, op.start_us, own, step, phase, fused is not None,
                                  fusion=fused, op=op))
    notes = []
    if opaque_graphs:
        notes.append("Inductor's CPU kernels were not recorded one by one (set "
                     "TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1 when compiling): each compiled "
                     "graph's own time counts as one fused kernel")
    return Work(items, HOST_OPS, len(timeline.steps), notes=notes)


def _runs_kernel(op: Event) -> bool:
    name = op.name
    if name.startswith(("aten::", "prims::")):
        return name not in _NO_KERNEL
    return bool(INDUCTOR_KERNEL.search(name) or _TF_OP.match(name)) or name in _TF_KERNEL_OPS


def _own_time(ops: list[Event]):
    """(op, own intervals) for ops on one serial track: each op's span minus its nested ops."""
    ops = sorted(ops, key=lambda e: (e.start_us, -e.dur_us))
    children: dict[int, list] = defaultdict(list)
    stack: list[int] = []
    for i, op in enumerate(ops):
        while stack and ops[stack[-1]].end_us <= op.start_us:
            stack.pop()
        if stack:
            children[stack[-1]].append((op.start_us, op.end_us))
        stack.append(i)
    for i, op in enumerate(ops):
        span = [(op.start_us, op.end_us)]
        yield op, intervals.subtract(span, intervals.merge(children[i])) if children[i] else span


@dataclass
class KernelStats:
    """Counts, fusion and durations of the kernels of one trace, per steady-state step."""

    source: str
    steps: int
    per_step: float
    per_phase: dict[str, float]         # kernels per step, by phase (+ mixed / unattributed)
    time_ms_per_step: float             # busy time of all kernels (own time on the CPU)
    time_ms_per_phase: dict[str, float]
    mean_us: float | None
    fused_share: float | None           # of the kernel count
    fused_time_share: float | None
    top: list[dict]
    mixed_ops: list[dict]               # XLA fusions built from ops of two phases
    notes: list[str]
    fusion_by_phase: dict[str, dict] = field(default_factory=dict)  # fusion.by_phase

    def to_json_dict(self) -> dict:
        return {k: _round(v) for k, v in self.__dict__.items()}


def kernel_stats(work: Work, top_n: int = 10) -> KernelStats:
    kernels = work.kernels()
    steps = max(work.steps, 1)
    count = len(kernels)
    total_us = sum(k.busy_us for k in kernels)
    fused = [k for k in kernels if k.fused]
    by_phase_count = Counter(k.phase for k in kernels)
    by_phase_us = defaultdict(float)
    for k in kernels:
        by_phase_us[k.phase] += k.busy_us
    buckets = [p for p in PHASES] + [b for b in (MIXED, UNATTRIBUTED) if by_phase_count[b]]
    return KernelStats(
        source=work.source, steps=work.steps,
        per_step=count / steps,
        per_phase={p: by_phase_count[p] / steps for p in buckets},
        time_ms_per_step=total_us / steps / 1000.0,
        time_ms_per_phase={p: by_phase_us[p] / steps / 1000.0 for p in buckets},
        mean_us=total_us / count if count else None,
        fused_share=len(fused) / count if count else None,
        fused_time_share=sum(k.busy_us for k in fused) / total_us if total_us else None,
        top=_top(kernels, steps, top_n),
        mixed_ops=_mixed(kernels, steps),
        notes=list(work.notes),
        fusion_by_phase=fusion.by_phase(kernels, steps),
    )


def _top(kernels: list[WorkItem], steps: int, top_n: int) -> list[dict]:
    by_name = defaultdict(list)
    for k in kernels:
        by_name[k.name].append(k)
    rows = []
    for name, group in by_name.items():
        total = sum(k.busy_us for k in group)
        phases = Counter(k.phase for k in group)
        rows.append({"name": demangled(name), "calls_per_step": len(group) / steps,
                     "ms_per_step": total / steps / 1000.0, "mean_us": total / len(group),
                     "fused": group[0].fused, "phase": phases.most_common(1)[0][0]})
    rows.sort(key=lambda r: (-r["ms_per_step"], r["name"]))
    return rows[:top_n]


def _mixed(kernels: list[WorkItem], steps: int) -> list[dict]:
    mixed = Counter((k.name, k.phases) for k in kernels if k.phase == MIXED)
    return [{"name": demangled(n), "phases": list(p), "calls_per_step": c / steps}
            for (n, p), c in sorted(mixed.items())]


def _round(value, digits: int = 6):
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: _round(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [_round(v, digits) for v in value]
    return value
