"""The report's memory plot: each run's allocation curve through one traced step, over its phase bands."""
from __future__ import annotations

from gapscope.analysis.renderers.plots import PHASE_COLOURS, WIDTH_IN
from gapscope.analysis.results.records import Breakdown


def with_curves(labels: list[str], breakdowns: list[Breakdown]) -> list[tuple[str, dict]]:
    """(label, curve) of the runs whose memory figures hold a step's curve."""
    return [(label, b.memory.curve) for label, b in zip(labels, breakdowns)
            if b.memory is not None and b.memory.curve]


def memory_timeline(curves: list[tuple[str, dict]]):
    """One panel per run: the allocator's level (MB) against ms from the step's start, drawn
    as the staircase it is, the five phases as coloured bands behind it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, min(30.0, 1.0 + 2.2 * len(curves))), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(curves), 1, squeeze=False)[:, 0]
    shown = set()
    for ax, (label, curve) in zip(axes, curves):
        for start, end, phase in curve["phases"]:
            ax.axvspan(start, end, color=PHASE_COLOURS[phase], alpha=0.35, lw=0,
                       label=None if phase in shown else phase)
            shown.add(phase)
        ax.step(curve["t_ms"], curve["allocated_mb"], where="post", color="black", lw=1.2)
        ax.set_title(f"{label}: step {curve['step']}", fontsize=10)
        ax.set_ylabel("allocated MB")
        ax.set_xlim(0, curve["t_ms"][-1] or 1.0)
        ax.grid(axis="y", alpha=0.3)
    axes[-1].set_xlabel("ms from the step's start (one traced step, profiler cost inside)")
    fig.legend(*_legend(axes), loc="outside lower center", ncols=5, frameon=False, fontsize=9)
    return fig


def _legend(axes):
    handles, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    return handles, labels
