"""A comparison as Markdown tables and an evidence list, for reports and issues."""
from __future__ import annotations

from gapscope.analysis.results.compare import Comparison
from gapscope.analysis.renderers import compare_columns as cols


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def render(comparison: Comparison) -> str:
    # The verdicts bold; what qualifies them (pair ratios, one process each, the method) not.
    lines = [f"**warning: {w}**" for w in comparison.headline]
    lines += [f"_{line.strip()}_" if line.startswith("  ") or line.startswith("intervals:")
              else f"**{line}**" for line in cols.verdict_lines(comparison)] + [""]
    lines += _table(cols.header(comparison), cols.phase_rows(comparison))
    lines += ["", f"_{cols.UNIT_FOOTER}_", "", f"**{cols.DEVICE_TITLE}**", ""]
    lines += _table(*cols.phase_device_rows(comparison))
    lines += ["", f"_{cols.DEVICE_FOOTER}_"]
    lines += ["", f"**{cols.FACTS_TITLE}**", ""]
    lines += _table(*cols.fact_rows(comparison))
    lines += [""]
    for line in cols.evidence_lines(comparison):
        lines.append(line if line.startswith("  - ") else f"**{line}**")
    lines = [line[2:] if line.startswith("  - ") else line for line in lines]
    lines += [f"- warning: {w}" for w in comparison.warnings if w not in comparison.headline]
    return "\n".join(lines) + "\n"
