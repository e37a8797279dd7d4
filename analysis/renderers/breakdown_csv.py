"""Breakdowns as CSV: one row per run and phase, units in the column names."""
from __future__ import annotations

import csv
import io

from gapscope.analysis.renderers.columns import phase_rows
from gapscope.analysis.results.records import Breakdown

COLUMNS = ("run_id", "workload", "framework", "variant", "device", "source", "steps", "phase",
           "time(ms)", "ci95_low(ms)", "ci95_high(ms)", "share", "measured_by", "phase_source",
           "compile(ms)")


def render(breakdowns: list[Breakdown]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for b in breakdowns:
        for phase, ms, share in phase_rows(b, parts=True):
            figure = b.phases.get(phase)
            part = phase.startswith("other: ")  # other in the trace's proportions: no interval
            interval = None if part else b.step_ci95 if figure is None else figure.ci95
            low, high = ("", "") if interval is None else (f"{interval[0]:.6f}", f"{interval[1]:.6f}")
            writer.writerow([b.run_id, b.workload, b.framework, b.variant, b.device, b.source,
                             len(b.step_times_ms), phase, f"{ms:.6f}", low, high, f"{share:.6f}",
                             "trace proportions" if part else "" if figure is None else figure.source,
                             b.phase_sources.get(phase, ""),
                             "" if b.compile_ms is None else f"{b.compile_ms:.3f}"])
    return out.getvalue()
