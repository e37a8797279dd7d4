"""Why a torch.compile run costs what it does: its compile time by stage against the measured
warm-up excess, the graphs Dynamo built, each graph break with its reason and line, and each
recompile with the guard that failed (from the run's compile.json)."""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field

from gapscope.analysis.readers.compile_records import steps_compiling_after

# Disjoint stages from Dynamo's nested per-compile timers (workloads.runners.dynamo_records.TIMER_FIELDS).
STAGES = ("dynamo", "aot_autograd", "inductor", "codegen_and_kernel_compile")
STAGE_NAMES = {"dynamo": "Dynamo", "aot_autograd": "AOT autograd", "inductor": "Inductor",
               "codegen_and_kernel_compile": "codegen+C++/Triton compile",
               "tf_trace": "tf.function trace (Python)", "jax_trace": "JAX trace (Python)",
               "lower": "lowering to MLIR", "xla_compile": "XLA compile"}
# JAX's own compile stages (workloads.runners.jax_compiles.STAGE_EVENTS), in the order they run.
JAX_STAGES = ("jax_trace", "lower", "xla_compile")
# Dynamo's per-compile counts of graphs its caches served (kept in compile.json), by cache.
CACHE_FIELDS = {"fx_graph": "inductor_fx_local_cache_hit_count",
                "aot_autograd": "aotautograd_local_cache_hit_count"}
CACHE_NAMES = {"fx_graph": "Inductor's FX graph cache", "aot_autograd": "AOT autograd's cache"}
# Reasons Dynamo gives for any unsupported call: the explanation under them says which call.
_GENERIC_REASON = re.compile(r"^Encountered graph break when attempting to trace")
_REASON_CHARS = 90


@dataclass
class GraphBreak:
    file: str | None
    line: int | None
    reason: str
    explanation: str | None
    times_logged: int     # Dynamo logs a break again at each compile of the frame around it
    first_step: int

    @property
    def place(self) -> str:
        return f"{os.path.basename(self.file)}:{self.line}" if self.file else "unknown line"


@dataclass
class Recompile:
    function: str | None
    file: str | None
    line: int | None
    guard: str            # the guard that failed, as Dynamo words it
    step: int


@dataclass
class Retrace:
    function: str
    step: int
    reason: str           # "new input signature: …" or "Python value changed: …"


@dataclass
class CompiledGraph:
    compile_id: str | None
    function: str | None
    file: str | None
    line: int | None
    ops: int | None
    step: int


@dataclass
class CompileWhy:
    measured_ms: float | None           # the warm-up steps beyond a steady step (step timers)
    stages_ms: dict[str, float]         # compiles during the warm-up, by stage
    later_compile_ms: float             # compiles in steps after the warm-up (recompiles)
    graphs: list[CompiledGraph]
    graph_breaks: list[GraphBreak]
    recompiles: list[Recompile]
    unseen: list[str] = field(default_factory=list)   # one line per stage or record not seen
    torch_version: str | None = None
    # tf.function: traces by function (the framework's own count where it gave one), retraces.
    tf_traces: dict[str, int] = field(default_factory=dict)
    retraces: list[Retrace] = field(default_factory=list)
    # Steps after the warm-up that compiled or retraced, with what: left out of the steady steps.
    steady_events: dict[int, str] = field(default_factory=dict)
    # Graphs torch's caches kept between processes served, not compiled: by cache.
    cache_hits: dict[str, int] = field(default_factory=dict)

    @property
    def attributed_ms(self) -> float:
        return sum(self.stages_ms.values())

    @property
    def unattributed_ms(self) -> float | None:
        return None if self.measured_ms is None else self.measured_ms - self.attributed_ms

    def line(self) -> str:
        """"compile 8.8 s once: Dynamo 1.2 s, …; 2 graphs, 1 graph break (…), 0 recompiles"."""
        total = self.measured_ms if self.measured_ms is not None else self.attributed_ms
        stages = [f"{STAGE_NAMES[s]} {_s(ms)}" for s, ms in self.stages_ms.items() if ms > 0]
        if self.unattributed_ms is not None:
            stages.append(f"unattributed {_s(self.unattributed_ms)}")
        if self._cached():  # beside the stages: such graphs had no code generation to time
            stages.append(self._cached())
        breaks = ", ".join(f"{short_reason(b)} at {b.place}" for b in self.graph_breaks)
        guards = ", ".join(f"{r.guard} in {r.function}" for r in self.recompiles[:3]) + \
            (", …" if len(self.recompiles) > 3 else "")
        if self.tf_traces:
            traced = ", ".join(f"{name} traced {_count(n, 'time')}" for name, n in self.tf_traces.items())
            retraces = "; ".join(f"retrace of {r.function} at step {r.step}: {r.reason}"
                                 for r in self.retraces[:3])
            return (f"compile {_s(total)} once: {', '.join(stages) or 'no stage recorded'}; {traced}"
                    + (f" ({retraces})" if retraces else ", no retrace") + self._left_out())
        return (f"compile {_s(total)} once: {', '.join(stages) or 'no stage recorded'}; "
                f"{_count(len(self.graphs), 'graph')}, "
                f"{_count(len(self.graph_breaks), 'graph break')}{f' ({breaks})' if breaks else ''}, "
                f"{_count(len(self.recompiles), 'recompile')}{f' ({guards})' if guards else ''}"
                + (f"; {_s(self.later_compile_ms)} more compiling after the warm-up"
                   if self.later_compile_ms else "") + self._left_out())

    def _cached(self) -> str:
        """"3 graphs from Inductor's FX graph cache and 1 graph from AOT autograd's cache (no code
        generation timed)", or "" where the caches served none."""
        hits = {cache: n for cache, n in self.cache_hits.items() if n}
        if not hits:
            return ""
        return " and ".join(f"{_count(n, 'graph')} from {CACHE_NAMES[cache]}"
                            for cache, n in hits.items()) + " (no code generation timed)"

    def _left_out(self) -> str:
        steps = sorted(self.steady_events)
        if not steps:
            return ""
        return (f"; {_count(len(steps), 'step')} after the warm-up compiling "
                f"({', '.join(map(str, steps[:5]))}{', …' if len(steps) > 5 else ''}), "
                "left out of the steady steps")

    def to_json_dict(self) -> dict:
        return {"measured_ms": _round(self.measured_ms),
                "stages": {s: round(ms, 3) for s, ms in self.stages_ms.items()},
                "attributed_ms": round(self.attributed_ms, 3),
                "unattributed_ms": _round(self.unattributed_ms),
                "later_compile_ms": round(self.later_compile_ms, 3),
                "graphs": [asdict(g) for g in self.graphs],
                "graph_breaks": [{**asdict(b), "place": b.place} for b in self.graph_breaks],
                "recompiles": [asdict(r) for r in self.recompiles],
                "tf_traces": self.tf_traces, "retraces": [asdict(r) for r in self.retraces],
                "steady_events": [{"step": s, "what": w} for s, w in sorted(self.steady_events.items())],
                "cache_hits": self.cache_hits,
                "unseen": self.unseen, "torch": self.torch_version, "line": self.line()}


def run_compile_why(run, measured_ms: float | None) -> CompileWhy | None:
    """The run's compile record against its step timers' warm-up excess (breakdown.compile_ms);
    None when it kept none (not compiled)."""
    records = run.compile_records
    if records is None:
        return None
    return compile_why(records, measured_ms, run.warmup_steps)


def compile_why(records: dict, measured_ms: float | None, warmup_steps: int) -> CompileWhy:
    """`records`: read_compile_records' document; `measured_ms`: the warm-up excess of the run's
    step timers (breakdown.compile_ms), which the stages of the warm-up's compiles add up to."""
    if isinstance(records.get("tf_traces"), list):
        return _tf_why(records, measured_ms, warmup_steps)
    if isinstance(records.get("jax_events"), list):
        return _jax_why(records, measured_ms, warmup_steps)
    compiles = records["compiles"]
    stages = dict.fromkeys(STAGES, 0.0)
    later = 0.0
    for c in compiles:
        split = stage_split(c)
        if _int(c.get("step"), 0) < warmup_steps:
            for stage, ms in split.items():
                stages[stage] += ms
        else:
            later += sum(split.values())
    forward = [c for c in compiles if c.get("is_forward") is not False]
    graphs = [CompiledGraph(c.get("compile_id"), c.get("co_name"), c.get("co_filename"),
                            c.get("co_firstlineno"), c.get("graph_op_count"), _int(c.get("step"), 0))
              for c in forward if c.get("graph_op_count") is not None]
    recompiles = [Recompile(c.get("co_name"), c.get("co_filename"), c.get("co_firstlineno"),
                            failed_guard(c["recompile_reason"]), _int(c.get("step"), 0))
                  for c in forward if c.get("recompile_reason")]
    why = CompileWhy(measured_ms, stages, later, graphs, graph_breaks(records["graph_breaks"]),
                     recompiles, unseen_lines(compiles, records), records.get("torch"))
    why.cache_hits = {cache: sum(_int(c.get(field_name), 0) for c in compiles)
                      for cache, field_name in CACHE_FIELDS.items()}
    why.steady_events = steady_events(why, records, warmup_steps)
    return why


def _tf_why(records: dict, measured_ms: float | None, warmup_steps: int) -> CompileWhy:
    """tf.function: the Python trace of each trace timed; what follows it (graph optimisation,
    XLA) is in the unattributed rest."""
    traces = [t for t in records["tf_traces"] if isinstance(t, dict)]
    early = [t for t in traces if _int(t.get("step"), 0) < warmup_steps]
    later = [t for t in traces if _int(t.get("step"), 0) >= warmup_steps]
    counts: dict[str, int] = {}
    for t in traces:
        counts[str(t.get("function"))] = counts.get(str(t.get("function")), 0) + 1
    own = records.get("tf_tracing_counts") or {}
    unseen = list(records.get("unavailable") or [])
    for name, n in own.items():
        if isinstance(n, int) and n != counts.get(name, 0):
            unseen.append(f"{name}: TensorFlow counts {n} traces, gapscope saw {counts.get(name, 0)}")
    why = CompileWhy(measured_ms, {"tf_trace": sum(float(t.get("trace_ms") or 0.0) for t in early)},
                     sum(float(t.get("trace_ms") or 0.0) for t in later), [], [], [], unseen,
                     tf_traces=counts, retraces=retraces(traces))
    why.steady_events = steady_events(why, records, warmup_steps)
    return why


def _jax_why(records: dict, measured_ms: float | None, warmup_steps: int) -> CompileWhy:
    """JAX: each jitted function's trace, lowering and XLA compile, timed by JAX itself; a
    function traced again is a retrace, with JAX's own explanation of the cache miss. Compiles
    between steps (step None: fit's set-up, Keras' metrics at its end) cost no step's time:
    counted as traces, left out of the stages."""
    events = [e for e in records["jax_events"] if isinstance(e, dict) and e.get("stage") in JAX_STAGES]
    stages = dict.fromkeys(JAX_STAGES, 0.0)
    later = 0.0
    counts: dict[str, int] = {}
    for e in events:
        step, ms = e.get("step"), float(e.get("ms") or 0.0)
        if e["stage"] == "jax_trace":
            counts[str(e.get("function"))] = counts.get(str(e.get("function")), 0) + 1
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        if step < warmup_steps:
            stages[e["stage"]] += ms
        else:
            later += ms
    retraced = [Retrace(str(m.get("function")), _int(m.get("step"), 0), str(m.get("reason") or "no reason given"))
                for m in records.get("jax_cache_misses") or []
                if isinstance(m, dict) and not m.get("first") and isinstance(m.get("step"), int)]
    why = CompileWhy(measured_ms, stages, later, [], [], [], list(records.get("unavailable") or []),
                     tf_traces=counts, retraces=retraced)
    why.steady_events = steady_events(why, records, warmup_steps)
    return why


def steady_events(why: CompileWhy, records: dict, warmup_steps: int) -> dict[int, str]:
    """What compiled in each step after the warm-up (steps_compiling_after, the steps the run's
    loader leaves out of the steady state): its recompiles' guards, retraces' reasons, else the
    frames that compiled for the first time."""
    events = {}
    for step in steps_compiling_after(records, warmup_steps):
        words = ([f"recompile of {r.function}: {r.guard}" for r in why.recompiles if r.step == step]
                 + [f"retrace of {r.function}: {r.reason}" for r in why.retraces if r.step == step])
        if not words:
            frames = sorted({str(c.get("co_name")) for c in records["compiles"]
                             if c.get("step") == step and c.get("co_name")})
            functions = sorted({str(t.get("function")) for t in [*(records.get("tf_traces") or []),
                                                                 *(records.get("jax_events") or [])]
                                if isinstance(t, dict) and t.get("step") == step})
            words = ([f"first compile of {', '.join(frames)}"] if frames else
                     [f"first trace of {', '.join(functions)}"] if functions else
                     ["a backward graph compiled"])
        events[step] = "; ".join(words)
    return events


def retraces(traces: list[dict]) -> list[Retrace]:
    """Each trace after a function's first, with what differs from the trace before it."""
    found, last, first_step = [], {}, {}
    for t in traces:
        name, step = str(t.get("function")), _int(t.get("step"), 0)
        signature = t.get("signature") or []
        if name in last:
            reason = retrace_reason(last[name], signature)
            first_retrace = not any(r.function == name for r in found)
            if step == first_step[name] and first_retrace and reason.startswith("same signature"):
                reason = ("traced twice in its first call with the same signature, as tf.function "
                          "does when its first trace creates variables")
            found.append(Retrace(name, step, reason))
        last[name] = signature
        first_step.setdefault(name, step)
    return found


def retrace_reason(before: list[dict], after: list[dict]) -> str:
    """"new input signature: arg 0 shape [4, 3] → [6, 3]" / "Python value changed: arg 1 0.1 → 0.2"."""
    old = {a.get("arg"): a for a in before}
    shapes, values = [], []
    for a in after:
        b = old.get(a.get("arg"))
        if b is None or a.get("kind") != b.get("kind"):
            shapes.append(f"arg {a.get('arg')} new")
        elif a.get("kind") == "python" and a.get("value") != b.get("value"):
            values.append(f"arg {a.get('arg')} {b.get('value')} → {a.get('value')}")
        elif a.get("kind") == "tensor":
            for key in ("shape", "dtype"):
                if a.get(key) != b.get(key):
                    shapes.append(f"arg {a.get('arg')} {key} {b.get(key)} → {a.get(key)}")
    parts = ([f"Python value changed: {', '.join(values)}"] if values else []) + \
        ([f"new input signature: {', '.join(shapes)}"] if shapes else [])
    return "; ".join(parts) or "same signature as the trace before (a cache evicted, or a new tf.function)"


def stage_split(c: dict) -> dict[str, float]:
    """One compile's time (ms) by disjoint stage. A forward frame nests AOT autograd in Dynamo's
    time, Inductor in AOT's, code generation in Inductor's; a lazily compiled backward graph has
    AOT's backward time with Inductor inside it."""
    us = {k: float(c[k]) if isinstance(c.get(k), (int, float)) else None for k in (
        "dynamo_cumulative_compile_time_us", "aot_autograd_cumulative_compile_time_us",
        "inductor_cumulative_compile_time_us", "inductor_code_gen_cumulative_compile_time_us",
        "backward_cumulative_compile_time_us")}
    whole, aot, inductor, codegen, backward = us.values()
    if c.get("is_forward") is False:
        whole, aot = backward, backward
    if whole is None:
        return dict.fromkeys(STAGES, 0.0)
    aot = min(aot if aot is not None else 0.0, whole)
    inductor = min(inductor if inductor is not None else 0.0, aot)
    codegen = min(codegen if codegen is not None else 0.0, inductor)
    parts = {"dynamo": whole - aot, "aot_autograd": aot - inductor,
             "inductor": inductor - codegen, "codegen_and_kernel_compile": codegen}
    return {s: ms / 1000.0 for s, ms in parts.items()}


def failed_guard(reason: str) -> str:
    """The first failed guard without Dynamo's "0/0: " prefix and source comment."""
    first = str(reason).strip().splitlines()[0] if str(reason).strip() else "?"
    first = re.sub(r"^\d+/\d+:\s*", "", first)
    return re.sub(r"\s{2,}#.*$", "", first).strip()


def graph_breaks(logged: list[dict]) -> list[GraphBreak]:
    """One entry per break place and reason, in the order first logged."""
    found: dict[tuple, GraphBreak] = {}
    for b in logged:
        reason = b.get("reason") or "?"
        key = (b.get("file"), b.get("line"), reason, b.get("explanation"))
        if key in found:
            found[key].times_logged += 1
        else:
            found[key] = GraphBreak(b.get("file"), _int(b.get("line"), None), reason,
                                    b.get("explanation"), 1, _int(b.get("step"), 0))
    return list(found.values())


def unseen_lines(compiles: list[dict], records: dict) -> list[str]:
    lines = list(records.get("unavailable") or [])
    forward = [c for c in compiles if c.get("is_forward") is not False]
    hits = _cache_hits(compiles)
    if forward and not any(isinstance(c.get("inductor_cumulative_compile_time_us"), (int, float))
                           for c in compiles):
        lines.append("Inductor stages not recorded: the backend is not Inductor, or its graphs came "
                     f"from the FX graph cache ({hits} cache hits); their time is in AOT autograd")
    elif hits:
        # Some graphs compiled, some served from the cache kept between runs (a second run of
        # the same model): those had no code generation to time.
        lines.append(f"{hits} graph(s) came from Inductor's FX graph cache (kept between runs): no "
                     "code generation was timed for them")
    if any(isinstance(c.get("inductor_code_gen_cumulative_compile_time_us"), (int, float)) for c in compiles):
        lines.append("C++/Triton compile is not separable from Inductor's code generation: torch "
                     "times it inside code generation, so the two are one stage")
    return lines


def _cache_hits(compiles: list[dict]) -> int:
    return sum(_int(c.get("inductor_fx_local_cache_hit_count"), 0) for c in compiles)


def short_reason(b: GraphBreak) -> str:
    """The reason a break reads by: the explanation where the reason is Dynamo's generic one."""
    text = b.explanation if _GENERIC_REASON.match(b.reason) and b.explanation else b.reason
    text = text.split(". ")[0].rstrip(".")
    return text if len(text) <= _REASON_CHARS else text[:_REASON_CHARS - 1] + "…"


def _s(ms: float) -> str:
    return f"{ms / 1000:.1f} s" if abs(ms) >= 100 else f"{ms:.0f} ms"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _int(value, default):
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
