"""When compiling pays: the compiled run's extra one-time cost ÷ its per-step gain over the eager
run (the amortisation point), or why it never does (its graph breaks and recompiles); and a slower
compiled run's breaks and recompiles, the line compare leads with."""
from __future__ import annotations

import math
import os

from gapscope.analysis.results.compile_why import short_reason
from gapscope.analysis.results.records import Breakdown

# Variants that compile the step (torch.compile, XLA for Keras and the raw TF loop, CUDA graphs,
# tf.function): the other side of the pair is the one it is held against.
_COMPILED_VARIANTS = ("compile", "jit", "cudagraphs", "tf-function", "tf-xla")


def is_compiled(b: Breakdown) -> bool:
    return any(part.startswith(_COMPILED_VARIANTS) for part in (b.variant or "").split(","))


def amortisation(a: Breakdown, b: Breakdown, guard_ms: tuple[float, float] = (0.0, 0.0)) -> dict | None:
    """Facts for a pair where one side compiles and the other does not; None otherwise.
    extra_ms: the compiled side's warm-up excess beyond the eager side's own; gain_ms: eager
    step − compiled step (means of the steady steps); steps: ceil(extra ÷ gain), None when the
    compiled step is not faster (never at this size). `guard_ms`: each side's Dynamo guard time
    a step (compile_overhead), named where compiling does not pay."""
    if is_compiled(a) == is_compiled(b):
        return None
    eager, compiled = (b, a) if is_compiled(a) else (a, b)
    guards = guard_ms[0] if compiled is a else guard_ms[1]
    if compiled.compile_ms is None:
        return None
    extra = max(compiled.compile_ms - (eager.compile_ms or 0.0), 0.0)
    gain = eager.step_stats()["mean"] - compiled.step_stats()["mean"]
    why = compiled.compile_why
    return {"compiled": compiled.name, "eager": eager.name, "extra_ms": round(extra, 3),
            "gain_ms_per_step": round(gain, 6),
            "steps": math.ceil(extra / gain) if gain > 0 else None,
            "graph_breaks": [f"{b.reason} at {b.place}" for b in why.graph_breaks] if why else [],
            "graphs": len(why.graphs) if why else None,
            "recompiles": [f"{r.guard} in {r.function}" for r in why.recompiles] if why else [],
            "guard_ms_per_step": round(guards, 6)}


def amortisation_line(f: dict) -> str:
    """"compile pays after 1,234 steps (9.98 s once ÷ 8.09 ms a step)", or "never at this size"
    with the graph breaks and recompiles of the compiled side."""
    once = f"{f['extra_ms'] / 1000:.2f} s once"
    if f["steps"] is not None:
        return (f"amortisation: {f['compiled']} pays for compiling after {f['steps']:,} steps "
                f"({once} ÷ {f['gain_ms_per_step']:.3f} ms gained a step)")
    text = (f"amortisation: never at this size: {f['compiled']} is {-f['gain_ms_per_step']:.3f} ms a "
            f"step slower than {f['eager']} ({once} never paid back)")
    reasons = []
    if f["graph_breaks"]:
        reasons.append(f"{len(f['graph_breaks'])} graph break{'s' if len(f['graph_breaks']) > 1 else ''} "
                       f"split it into {f['graphs']} graphs ({'; '.join(f['graph_breaks'][:3])})")
    if f["recompiles"]:
        reasons.append(f"{len(f['recompiles'])} recompile{'s' if len(f['recompiles']) > 1 else ''} "
                       f"({'; '.join(f['recompiles'][:3])})")
    if f.get("guard_ms_per_step"):
        reasons.append(f"Dynamo guards {f['guard_ms_per_step']:.3f} ms a step")
    return text + (": " + ", ".join(reasons) if reasons else "")


def compile_behind(a: Breakdown, b: Breakdown, gap_ms: float) -> dict | None:
    """Where the compiled side of an eager/compiled pair is the slower one (gap_ms: b − a, beyond
    noise) and its compile record holds graph breaks or recompiles: their counts and the first
    of each with its reason and source line, the first thing to fix; None otherwise."""
    if is_compiled(a) == is_compiled(b) or not gap_ms:
        return None
    compiled = a if is_compiled(a) else b
    if (gap_ms > 0) != (compiled is b):
        return None
    why = compiled.compile_why
    if why is None or not (why.graph_breaks or why.recompiles):
        return None
    first_break = why.graph_breaks[0] if why.graph_breaks else None
    first_recompile = why.recompiles[0] if why.recompiles else None
    return {"run": compiled.name, "graph_breaks": len(why.graph_breaks),
            "recompiles": len(why.recompiles), "graphs": len(why.graphs),
            "first_break": first_break and f"{short_reason(first_break)} at {first_break.place}",
            "first_recompile": first_recompile and (
                f"{first_recompile.guard} in {first_recompile.function}"
                + (f" at {os.path.basename(first_recompile.file)}:{first_recompile.line}"
                   if first_recompile.file else ""))}


def compile_behind_line(f: dict) -> str:
    """"mlp torch compile breaks its graph: 1 graph break (first: Data-dependent branching at
    dynamic.py:24), 0 recompiles": the one line the headline and the suggestions lead with."""
    parts = []
    for key, noun, first in (("graph_breaks", "graph break", "first_break"),
                             ("recompiles", "recompile", "first_recompile")):
        n = f[key]
        parts.append(f"{n} {noun}{'' if n == 1 else 's'}" + (f" (first: {f[first]})" if f[first] else ""))
    return f"{f['run']} is compiled and slower: " + ", ".join(parts)
