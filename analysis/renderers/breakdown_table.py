"""Breakdown tables for the terminal (rich): one column triple per run, side by side where they
fit the width, else in blocks of as many runs as fit."""
from __future__ import annotations

from gapscope.analysis.renderers.columns import origin_legend, run_names, side_by_side, unit_footer
from gapscope.analysis.renderers.fit import Grid, Page
from gapscope.analysis.renderers.memory import peak_column
from gapscope.analysis.results.records import Breakdown


def render(breakdowns: list[Breakdown], legend: bool = True) -> str:
    """`legend` False leaves out the footer that says what the columns and marks mean (for
    one who has read it: `--no-legend`); the runs' notes stay."""
    names = run_names(breakdowns)
    head = ["phase"] + [h for name in names for h in (f"{name}\nms", "%", "src")]
    rows = [[phase, *cells] for phase, cells in side_by_side(breakdowns)]
    rows.append(["steps", *[c for b in breakdowns for c in (str(len(b.step_times_ms)), "", "")]])
    per_run = 3
    if peak_column.has_memory(breakdowns):  # each phase's memory high-water mark beside its time
        head, rows, per_run = peak_column.with_peak(head, rows, breakdowns)
    # A rule under `other` (after its parts) and under the step.
    ends = frozenset(i for i, row in enumerate(rows)
                     if row[0] == "step" or i + 1 < len(rows) and rows[i + 1][0] == "step")
    sources = frozenset(3 + per_run * i for i in range(len(breakdowns)))
    page = Page()
    page.table(Grid("gapscope breakdown", head, rows, [per_run] * len(breakdowns), left=sources | {0}, ends=ends))
    if legend:
        page.line(unit_footer(breakdowns))
        if per_run > 3:
            page.line(peak_column.LEGEND)
    for b, name in zip(breakdowns, names):
        for note in b.notes:
            page.line(f"{name}: {note}")
    marks = origin_legend(breakdowns)
    if legend and marks:
        page.line(marks)
    return page.text()
