"""A comparison for the terminal (rich): phase gap table, per-run evidence figures, evidence lines,
each table side by side where it fits the width, else in blocks of runs."""
from __future__ import annotations

from analysis.results.compare import Comparison
from analysis.renderers import compare_columns as cols
from analysis.renderers.fit import Grid, Page


def render(comparison: Comparison) -> str:
    others = len(comparison.runs) - 1
    page = Page()
    for line in cols.verdict_lines(comparison):
        page.line(line)
    rows = cols.phase_rows(comparison)
    page.table(Grid("gapscope compare: where the step-time gap goes", cols.header(comparison, "\n"),
                    rows, [4] * others, keys=2,
                    ends=frozenset(i for i, row in enumerate(rows) if row[0] in ("other", "step"))))
    page.line(cols.UNIT_FOOTER)
    head, rows = cols.phase_device_rows(comparison, "\n")
    page.table(Grid("host vs device time per phase (ms per step)", head, rows, [2] * (others + 1)))
    page.line(cols.DEVICE_FOOTER)
    head, rows = cols.fact_rows(comparison)
    page.table(Grid("evidence per run", head, rows, [1] * (others + 1)))
    for line in cols.evidence_lines(comparison):
        page.line(line)
    for warning in comparison.warnings:
        page.line(f"warning: {warning}")
    for run in comparison.runs:
        for note in run.breakdown.notes + run.kernels.notes:
            if note.removeprefix("warning: ") not in run.breakdown.reliability_warnings:
                page.line(f"{run.breakdown.name}: {note}")  # those are among the warnings above
    return page.text()
