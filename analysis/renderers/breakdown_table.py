"""Breakdown tables for the terminal (rich), one column pair per run, side by side."""
from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from analysis.renderers.columns import origin_legend, side_by_side, unit_footer
from analysis.results import Breakdown


def render(breakdowns: list[Breakdown]) -> str:
    table = Table(title="gapscope breakdown", caption=unit_footer(breakdowns), caption_justify="left")
    table.add_column("phase")
    for b in breakdowns:
        table.add_column(f"{b.name}\nms", justify="right")
        table.add_column("%", justify="right")
        table.add_column("src")
    for phase, cells in side_by_side(breakdowns):
        table.add_row(phase, *cells, end_section=phase in ("other", "step"))
    table.add_row("steps", *[c for b in breakdowns for c in (str(len(b.step_times_ms)), "", "")])
    console = Console(file=io.StringIO(), width=max(80, 22 + 32 * len(breakdowns)), record=True)
    console.print(table)
    for b in breakdowns:
        for note in b.notes:
            console.print(f"{b.run_id}: {note}", soft_wrap=True, markup=False)
    legend = origin_legend(breakdowns)
    if legend:
        console.print(legend, markup=False)
    return console.export_text()

