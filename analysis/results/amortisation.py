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
    """A compiled variant, or a user's own loop whose compile record holds what compiled
    (gapscope.capture around a torch.compile'd model or a tf.function)."""
    why = b.compile_why
    return (any(part.startswith(_COMPILED_VARIANTS) for part in (b.variant or "").split(","))
            or (why is not None and bool(why.graphs or why.tf_traces)))


def payback(extra_ms: float, gain_ms: float, gain_ci95: tuple[float, float] | None) -> dict:
    """Steps after which `extra_ms` once is paid back by `gain_ms` a step, with the interval the
    gain's (`gain_ci95`, eager − compiled) gives: a gain of 6 ms whose interval holds 0 pays back
    after anything from a few steps to never, so no figure is given then. steps: the point
    estimate (None: never); steps_ci95: [fewest, most] steps; not_known: why no figure is given."""
    if extra_ms <= 0:
        return {"steps": 0, "steps_ci95": None, "not_known": None}
    steps = math.ceil(extra_ms / gain_ms) if gain_ms > 0 else None
    if gain_ci95 is None:   # one process a side and no steps to resample: the estimate alone
        return {"steps": steps, "steps_ci95": None, "not_known": None}
    low, high = gain_ci95
    if low > 0:
        return {"steps": steps, "steps_ci95": [math.ceil(extra_ms / high), math.ceil(extra_ms / low)],
                "not_known": None}
    if high < 0:
        return {"steps": None, "steps_ci95": None, "not_known": None}
    return {"steps": None, "steps_ci95": None, "not_known": "the step gap is within noise"}


def amortisation(a: Breakdown, b: Breakdown, guard_ms: tuple[float, float] = (0.0, 0.0),
                 gap_ci95: tuple[float, float] | None = None, untrusted: bool = False) -> dict | None:
    """Facts for a pair where one side compiles and the other does not; None otherwise.
    extra_ms: the compiled side's warm-up excess beyond the eager side's own; gain_ms: eager
    step − compiled step (means of the steady steps); steps: ceil(extra ÷ gain), None when the
    compiled step is not faster (never at this size) or where that is not known; steps_ci95:
    from the gap's interval (`gap_ci95`: b − a); not_known: why no figure is given (the gap
    within noise, or `untrusted`: a side's step time is no fact). `guard_ms`: each side's
    Dynamo guard time a step (compile_overhead), named where compiling does not pay."""
    if is_compiled(a) == is_compiled(b):
        return None
    eager, compiled = (b, a) if is_compiled(a) else (a, b)
    guards = guard_ms[0] if compiled is a else guard_ms[1]
    if compiled.compile_ms is None:
        return None
    # Rounded as printed before the payback is worked out from them: steps = ceil(extra ÷ gain)
    # from the figures shown (a gain of a few µs made the unrounded ones give one step more).
    extra = round(max(compiled.compile_ms - (eager.compile_ms or 0.0), 0.0), 3)
    gain = round(eager.step_stats()["mean"] - compiled.step_stats()["mean"], 6)
    # gain = a − b where b compiles: the gap's interval turned round.
    gain_ci95 = gap_ci95 and ((-gap_ci95[1], -gap_ci95[0]) if compiled is b else tuple(gap_ci95))
    found = payback(extra, gain, gain_ci95)
    if untrusted and extra > 0:
        found = {"steps": None, "steps_ci95": None, "not_known": "a side ran on a busy machine"}
    why = compiled.compile_why
    return {"compiled": compiled.name, "eager": eager.name, "extra_ms": extra,
            "gain_ms_per_step": gain, **found,
            "graph_breaks": [f"{b.reason} at {b.place}" for b in why.graph_breaks] if why else [],
            "graphs": len(why.graphs) if why else None,
            "recompiles": [f"{r.guard} in {r.function}" for r in why.recompiles] if why else [],
            "guard_ms_per_step": round(guards, 6)}


def amortisation_line(f: dict) -> str:
    """"compile: 144 s once; pays back after 2,250 [1,800, 3,000] steps (4.000 ms gained a
    step)", or "not known" with why, or "never at this size" with the graph breaks and
    recompiles of the compiled side: one line in compare's default output."""
    once = f"compile: {_seconds(f['extra_ms'])} once ({f['compiled']})"
    if f.get("not_known"):
        return f"{once}; pays back: not known: {f['not_known']}"
    if f["steps"] == 0:
        return f"{once}; nothing to pay back (no extra warm-up over {f['eager']})"
    if f["steps"] is not None:
        interval = f.get("steps_ci95")
        span = f" [{interval[0]:,}, {interval[1]:,}]" if interval else ""
        return (f"{once}; pays back after {f['steps']:,}{span} steps "
                f"({f['gain_ms_per_step']:.3f} ms gained a step)")
    text = (f"{once}; never at this size: {f['compiled']} is {-f['gain_ms_per_step']:.3f} ms a "
            f"step slower than {f['eager']}")
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


def _seconds(ms: float) -> str:
    """'144 s', '9.98 s': three figures."""
    return f"{ms / 1000:.3g} s"


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
