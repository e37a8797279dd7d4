"""The report's per-layer plot: each layer's forward and backward ms per traced step, one bar per
run side by side, from the layers panels' figures."""
from __future__ import annotations

from gapscope.analysis.renderers.plots import RUN_COLOURS, _figure


def layer_bars(panels: list[dict]):
    """`panels`: one run's layer panel each (analysis.results.panels.layer_panel); runs without
    layers are left out. Per layer a group of bars, one per run: forward solid, backward
    lighter on top, so each bar is the layer's forward + backward."""
    shown = [p for p in panels if p["rows"]]
    names = []
    for p in shown:
        names += [r["name"] for r in p["rows"] if r["name"] not in names]
    fig, ax = _figure(height=1.6 + 0.45 * len(names) * max(1, len(shown)) ** 0.5)
    height = 0.8 / max(len(shown), 1)
    for i, p in enumerate(shown):
        by_name = {r["name"]: r["sides"][0] for r in p["rows"]}
        y = [len(names) - 1 - k + (len(shown) / 2 - i - 0.5) * height for k in range(len(names))]
        forward = [by_name[n]["forward_ms"] if n in by_name else 0.0 for n in names]
        # An unmeasured backward (inference) is null: no bar.
        backward = [(by_name[n]["backward_ms"] or 0.0) if n in by_name else 0.0 for n in names]
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        ax.barh(y, forward, height=height * 0.9, color=colour, label=f"{p['runs'][0]} forward")
        ax.barh(y, backward, left=forward, height=height * 0.9, color=colour, alpha=0.45,
                label=f"{p['runs'][0]} backward")
    ax.set_yticks(range(len(names)), names[::-1])
    ax.set_xlabel("ms per traced step (forward, then backward lighter)")
    ax.set_title("Time per layer")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2,
               frameon=False, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return fig
