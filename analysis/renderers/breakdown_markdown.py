"""Breakdowns as a Markdown table, for reports, issues and TensorBoard's Text dashboard."""
from __future__ import annotations

from analysis.renderers.columns import origin_legend, side_by_side, unit_footer
from analysis.results import Breakdown


def render(breakdowns: list[Breakdown]) -> str:
    header = ["phase"] + [h for b in breakdowns for h in (f"{b.name} ms", "%", "source")]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|---:|---|" * len(breakdowns)]
    for phase, cells in side_by_side(breakdowns):
        name = f"**{phase}**" if phase == "step" else phase
        lines.append("| " + " | ".join([name, *cells]) + " |")
    lines += ["", f"_{unit_footer(breakdowns)}_"]
    legend = origin_legend(breakdowns)
    if legend:
        lines.append(f"_{legend}_")
    lines += [f"- `{b.run_id}`: {note}" for b in breakdowns for note in b.notes]
    return "\n".join(lines) + "\n"
