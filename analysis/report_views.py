"""The report's layers and compile sections: the panels' figures (the TensorBoard tab's) of each
run and each compared pair, the per-layer plot, and their Markdown."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from gapscope.analysis.renderers.panels.layer_plot import layer_bars
from gapscope.analysis.renderers.panels.report_sections import compile_markdown, layers_markdown
from gapscope.analysis.results.layers import layer_breakdown
from gapscope.analysis.results.panels.compile_panel import compile_panel
from gapscope.analysis.results.panels.layer_panel import layer_panel
from gapscope.analysis.results.panels.pair_panels import pair_panels


@dataclass
class ReportViews:
    layers: list[dict]                      # one run's layer panel each (traced runs)
    pairs: list[dict]                       # each compared pair's panels
    compiles: list[tuple[str, dict]]        # (run label, compile panel)
    layers_figure: object | None = field(default=None, repr=False)

    def markdown(self, figure: str | None) -> list[str]:
        amortisations = [p["compile"]["amortisation"]["text"] for p in self.pairs
                         if p["compile"]["amortisation"]]
        return (layers_markdown(self.layers, [p["layers"] for p in self.pairs], figure)
                + compile_markdown(self.compiles, amortisations))


def _layers(run, report_run, explained: dict):
    found = explained.get(str(run.trace_file))
    if found is None:
        return layer_breakdown(run, report_run.label, len(report_run.breakdown.steps))
    return replace(found, label=report_run.label)


def report_views(complete: list, runs: list, comparison) -> ReportViews:
    """`complete`: the report's complete runs (ReportRun); `runs`: the Run each was read from;
    `comparison`: the report's comparison, or None."""
    # The compared runs' layers were found by explain already: taken, not computed again.
    explained = {e.trace_file: e.layers for e in comparison.runs} if comparison is not None else {}
    layers = [layer_panel(_layers(run, r, explained))
              for r, run in zip(complete, runs) if run is not None and run.trace is not None]
    pairs = pair_panels(comparison) if comparison is not None else []
    compiles = [(r.label, compile_panel(r.breakdown.compile_why)) for r in complete]
    figure = layer_bars(layers) if any(p["rows"] for p in layers) else None
    return ReportViews(layers, pairs, compiles, figure)
