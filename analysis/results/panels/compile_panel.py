"""The compile view's figures: one run's compile time by stage against the measured warm-up
excess, its graph breaks, recompiles and retraces with reason and place; for a pair, where
compiling pays (the amortisation point)."""
from __future__ import annotations

import os

from gapscope.analysis.results.amortisation import amortisation_line
from gapscope.analysis.results.compile_why import STAGE_NAMES, CompileWhy, short_reason

NOT_COMPILED = "no compile record: this run compiled nothing gapscope records (torch.compile, tf.function)"


def compile_panel(why: CompileWhy | None) -> dict:
    """{"line", "measured_ms", "stages": [{"name", "ms", "share"}], "unattributed_ms",
    "graph_breaks", "recompiles", "retraces", "graphs", "tf_traces", "unseen"}; {"note"} alone
    for a run without a compile record."""
    if why is None:
        return {"note": NOT_COMPILED}
    measured = why.measured_ms
    stages = [{"name": STAGE_NAMES[s], "ms": round(ms, 3),
               "share": round(ms / measured, 4) if measured else None}
              for s, ms in why.stages_ms.items() if ms > 0]  # a stage not seen: `unseen` says why
    return {"note": None, "line": why.line(), "measured_ms": None if measured is None else round(measured, 3),
            "stages": stages,
            "unattributed_ms": None if why.unattributed_ms is None else round(why.unattributed_ms, 3),
            "later_compile_ms": round(why.later_compile_ms, 3),
            "graph_breaks": [{"reason": short_reason(b), "place": b.place, "times_logged": b.times_logged,
                              "first_step": b.first_step} for b in why.graph_breaks],
            "recompiles": [{"guard": r.guard, "function": r.function, "step": r.step,
                            "place": _place(r.file, r.line)} for r in why.recompiles],
            "retraces": [{"function": r.function, "step": r.step, "reason": r.reason} for r in why.retraces],
            "steady_events": [{"step": s, "what": w} for s, w in sorted(why.steady_events.items())],
            "graphs": len(why.graphs), "tf_traces": why.tf_traces, "unseen": why.unseen}


def pair_compile_panel(pays: dict | None) -> dict | None:
    """A pair's amortisation facts (amortisation.amortisation) and the line that says them; None
    where neither or both sides compile."""
    if pays is None:
        return None
    return {**pays, "text": amortisation_line(pays)}


def _place(file: str | None, line: int | None) -> str:
    return f"{os.path.basename(file)}:{line}" if file else "unknown line"
