"""A comparison for the terminal (rich): phase gap table, per-run evidence figures, evidence lines."""
from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from analysis.compare import Comparison
from analysis.renderers import compare_columns as cols


def render(comparison: Comparison) -> str:
    width = max(100, 24 + 46 * (len(comparison.runs) - 1))
    console = Console(file=io.StringIO(), width=width, record=True)
    gap = Table(title="gapscope compare: where the step-time gap goes", caption=cols.UNIT_FOOTER,
                caption_justify="left")
    for i, name in enumerate(cols.header(comparison)):
        gap.add_column(name, justify="left" if i == 0 else "right")
    for row in cols.phase_rows(comparison):
        gap.add_row(*row, end_section=row[0] in ("other", "step"))
    for line in cols.verdict_lines(comparison):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    console.print(gap)
    for title, (head, rows) in (("host vs device time per phase (ms per step)", cols.phase_device_rows(comparison)),
                                ("evidence per run", cols.fact_rows(comparison))):
        table = Table(title=title)
        for i, name in enumerate(head):
            table.add_column(name, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for line in cols.evidence_lines(comparison):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    for warning in comparison.warnings:
        console.print(f"warning: {warning}", soft_wrap=True, markup=False, highlight=False)
    for run in comparison.runs:
        for note in run.breakdown.notes + run.kernels.notes:
            console.print(f"{run.breakdown.run_id}: {note}", soft_wrap=True, markup=False, highlight=False)
    return console.export_text()
