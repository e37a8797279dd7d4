"""Breakdowns as a Markdown table, for reports, issues and TensorBoard's Text dashboard."""
from __future__ import annotations

from gapscope.analysis.renderers.columns import origin_legend, run_names, side_by_side, unit_footer
from gapscope.analysis.results.records import Breakdown


def render(breakdowns: list[Breakdown]) -> str:
    names = run_names(breakdowns)
    header = ["phase"] + [h for name in names for h in (f"{name} ms", "%", "source")]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|---:|---|" * len(breakdowns)]
    for phase, cells in side_by_side(breakdowns):
        name = f"**{phase}**" if phase == "step" else phase
        lines.append("| " + " | ".join([name, *cells]) + " |")
    lines += ["", f"_{unit_footer(breakdowns)}_"]
    legend = origin_legend(breakdowns)
    if legend:
        lines.append(f"_{legend}_")
    lines += [f"- {name}: {note}" for b, name in zip(breakdowns, names) for note in b.notes]
    return "\n".join(lines) + "\n"
