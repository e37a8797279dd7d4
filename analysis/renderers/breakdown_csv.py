"""Breakdowns as CSV: one row per run and phase, units in the column names."""
from __future__ import annotations

import csv
import io

from analysis.renderers.columns import phase_rows
from analysis.results import Breakdown

COLUMNS = ("run_id", "workload", "framework", "variant", "device", "source", "steps", "phase",
           "time(ms)", "share", "phase_source", "compile(ms)")


def render(breakdowns: list[Breakdown]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for b in breakdowns:
        for phase, ms, share in phase_rows(b):
            writer.writerow([b.run_id, b.workload, b.framework, b.variant, b.device, b.source,
                             len(b.steps), phase, f"{ms:.6f}", f"{share:.6f}",
                             b.phase_sources.get(phase, ""),
                             "" if b.compile_ms is None else f"{b.compile_ms:.3f}"])
    return out.getvalue()
