"""Markdown that holds no markup from a run: <, > and & as entities, for every Markdown gapscope writes."""
from __future__ import annotations


def text_only(markdown: str) -> str:
    """`markdown` with <, > and & as entities. Its text comes from runs (variant, device, error,
    file names) and Markdown viewers (GitHub, editors) pass raw HTML through: `<img onerror=...>`
    in a manifest must stay text. gapscope writes no HTML of its own, and renderers show the
    entities as the characters."""
    return markdown.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
