"""One-time and per-step costs of building graphs: Dynamo/Inductor compiles and guard checks,
tf.function tracing, XLA programs, and the first step against the steady state."""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from gapscope.analysis.events import intervals
from gapscope.analysis.readers import step_rows
from gapscope.analysis.results.breakdown import compile_ms as warmup_excess_ms
from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.trace import Trace

# Dynamo/Inductor compile work (dynamo_timed spans); nested ones are merged, never summed twice.
_COMPILE_SPAN = re.compile(r"^(entire_frame_compile|entire_backward_compile|_compile\.compile_inner|"
                           r"backend_compile|inductor_compile|compile_fx_inner|compile_file)")
_GUARD = "TorchDynamo Cache Lookup"
_COMPILED_REGION = "Torch-Compiled Region"


@dataclass
class CompileStats:
    first_step_ms: float | None
    steady_median_ms: float | None
    warmup_excess_ms: float | None      # what the warm-up steps took beyond steady steps
    compile_in_window_ms: float         # Dynamo/Inductor compile spans inside the traced steps (recompiles)
    compiled_calls_per_step: float      # Torch-Compiled Region entries
    guard_ms_per_step: float            # TorchDynamo Cache Lookup (guard evaluation)
    tf_function_calls_per_step: float
    tf_traced_calls: int                # calls in the window that traced (built) a graph
    tf_tracing_count: int | None        # tracing_count the framework reports (retraces + 1)
    xla_modules: list[str] = field(default_factory=list)   # compiled XLA programs that ran
    notes: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in self.__dict__.items()}


def compile_stats(trace: Trace, timeline: PhaseTimeline, rows: list[dict] | None,
                  warmup_steps: int, updates: int | None = None) -> CompileStats:
    """`updates`: optimizer updates in the traced steps, when a traced call runs several."""
    n = max(updates or len(timeline.steps), 1)
    lo = timeline.steps[0].start_us if timeline.steps else 0.0
    hi = timeline.steps[-1].end_us if timeline.steps else 0.0
    spans, guards, regions, calls, traced, counts, modules = [], 0.0, 0, 0, 0, [], set()
    for e in trace.events:
        if e.hlo_module and lo <= e.start_us < hi:
            modules.add(e.hlo_module)
        if not (lo <= e.start_us < hi):
            continue
        if _COMPILE_SPAN.match(e.name):
            spans.append((e.start_us, e.end_us))
        elif e.name == _GUARD:
            guards += e.dur_us
        elif e.name.startswith(_COMPILED_REGION):
            regions += 1
        elif e.stats and "tf_function_call" in e.stats:
            calls += 1
            traced += str(e.stats["tf_function_call"]).startswith("traced")
            if "tracing_count" in e.stats:
                counts.append(int(e.stats["tracing_count"]))
    first, median = _first_and_median(rows, warmup_steps)
    notes = []
    recompile_ms = intervals.total(intervals.merge(spans)) / 1000.0
    if recompile_ms:
        notes.append(f"Dynamo/Inductor compiled inside the traced steps: {recompile_ms:.1f} ms (recompiles)")
    if traced:
        notes.append(f"tf.function traced {traced} times inside the traced steps (retracing)")
    return CompileStats(
        first_step_ms=first, steady_median_ms=median,
        warmup_excess_ms=warmup_excess_ms(rows, warmup_steps) if rows else None,
        compile_in_window_ms=recompile_ms,
        compiled_calls_per_step=regions / n, guard_ms_per_step=guards / n / 1000.0,
        tf_function_calls_per_step=calls / n, tf_traced_calls=traced,
        tf_tracing_count=max(counts) if counts else None,
        xla_modules=sorted(modules), notes=notes)


def _first_and_median(rows: list[dict] | None, warmup_steps: int):
    if not rows:
        return None, None
    steady = [r["step_ms"] for r in step_rows.steady(rows, warmup_steps) if not r.get("traced")] or \
             [r["step_ms"] for r in step_rows.steady(rows, warmup_steps)]
    return rows[0]["step_ms"], statistics.median(steady) if steady else None
