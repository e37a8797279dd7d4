"""The renderer contract: per result type, each output format's name, file extension and render."""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Renderer:
    name: str          # the --format value
    extension: str     # the suffix of a file holding this format
    module: str        # imported on first use, so that `--help` stays fast
    function: str = "render"

    def render(self, result, **options) -> str:
        """`options` go to the format's function (e.g. compare's table takes `verbose`). Markdown
        of every result holds no markup from a run (breakdown's emitted a manifest's <img
        onerror=...> raw)."""
        text = getattr(importlib.import_module(self.module), self.function)(result, **options)
        return text_only(text) if self.name == "markdown" else text


def text_only(markdown: str) -> str:
    """`markdown` with <, > and & as entities. Its text comes from runs (variant, device, error,
    file names) and Markdown viewers (GitHub, editors) pass raw HTML through: `<img onerror=...>`
    in a manifest must stay text. gapscope writes no HTML of its own, and renderers show the
    entities as the characters."""
    return markdown.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _by_name(*renderers: Renderer) -> dict[str, Renderer]:
    return {r.name: r for r in renderers}


_PKG = "gapscope.analysis.renderers"
BREAKDOWN = _by_name(Renderer("table", ".txt", f"{_PKG}.breakdown_table"),
                     Renderer("json", ".json", f"{_PKG}.breakdown_json"),
                     Renderer("csv", ".csv", f"{_PKG}.breakdown_csv"),
                     Renderer("markdown", ".md", f"{_PKG}.breakdown_markdown"))
COMPARE = _by_name(Renderer("table", ".txt", f"{_PKG}.compare_table"),
                   Renderer("json", ".json", f"{_PKG}.compare_json"),
                   Renderer("markdown", ".md", f"{_PKG}.compare_markdown"))
# Layers beside a breakdown or a comparison (their JSON sits inside those documents).
LAYERS = _by_name(Renderer("table", ".txt", f"{_PKG}.layers_render", "render_table"),
                  Renderer("markdown", ".md", f"{_PKG}.layers_render", "render_markdown"),
                  Renderer("json", ".json", f"{_PKG}.breakdown_json"))
LAYERS_COMPARE = _by_name(
    Renderer("table", ".txt", f"{_PKG}.layers_render", "render_compare_table"),
    Renderer("markdown", ".md", f"{_PKG}.layers_render", "render_compare_markdown"))
JOB_BREAKDOWN = _by_name(Renderer("table", ".txt", f"{_PKG}.job_render", "render_table"),
                         Renderer("json", ".json", f"{_PKG}.job_render", "render_json"),
                         Renderer("csv", ".csv", f"{_PKG}.job_render", "render_csv"),
                         Renderer("markdown", ".md", f"{_PKG}.job_render", "render_markdown"))
SCALING = _by_name(Renderer("table", ".txt", f"{_PKG}.scaling_render", "render_table"),
                   Renderer("json", ".json", f"{_PKG}.scaling_render", "render_json"),
                   Renderer("markdown", ".md", f"{_PKG}.scaling_render", "render_markdown"))
MATRIX = _by_name(Renderer("table", ".txt", f"{_PKG}.matrix_render", "render_table"),
                  Renderer("json", ".json", f"{_PKG}.matrix_render", "render_json"),
                  Renderer("csv", ".csv", f"{_PKG}.matrix_render", "render_csv"),
                  Renderer("markdown", ".md", f"{_PKG}.matrix_render", "render_markdown"))
SWEEP = _by_name(Renderer("table", ".txt", f"{_PKG}.sweep_render", "render_table"),
                 Renderer("json", ".json", f"{_PKG}.sweep_render", "render_json"),
                 Renderer("markdown", ".md", f"{_PKG}.sweep_render", "render_markdown"))
