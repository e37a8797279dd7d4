"""Renderers: turn analyzer results into text; they never read files and never analyse."""
from __future__ import annotations

from analysis.renderers import breakdown_csv, breakdown_json, breakdown_markdown, breakdown_table

FORMATS = ("table", "json", "csv", "markdown")

_BREAKDOWN_RENDERERS = {
    "table": breakdown_table.render,
    "json": breakdown_json.render,
    "csv": breakdown_csv.render,
    "markdown": breakdown_markdown.render,
}


def render_breakdowns(breakdowns, fmt: str) -> str:
    return _BREAKDOWN_RENDERERS[fmt](breakdowns)
