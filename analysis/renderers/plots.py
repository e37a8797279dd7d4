"""Report plots with matplotlib's Agg canvas (no pyplot, no display): phases per run as stacked
bars, step time over each run, and the speed of each run against a baseline."""
from __future__ import annotations

import io
from dataclasses import dataclass

from gapscope.analysis.renderers.columns import workload_references
from gapscope.analysis.results.records import Breakdown
from gapscope.profilers.phases import PHASES

# One colour per phase in every plot, colour-blind safe (Okabe-Ito); `other` stays grey.
PHASE_COLOURS = {"data_load": "#56B4E9", "forward": "#E69F00", "backward": "#009E73",
                 "optimizer": "#CC79A7", "other": "#BBBBBB"}
RUN_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
               "#F0E442")
WIDTH_IN = 9.0
DPI = 120


@dataclass
class StepSeries:
    """One run's step timers: every step, warm-up included."""

    label: str
    steps: list[int]
    step_ms: list[float]
    warmup_steps: int
    traced: list[bool]


# A bar under this fraction of the longest is too thin to read: the chart shows shares instead.
_VANISHING = 20


def phase_bars(labels: list[str], breakdowns: list[Breakdown]):
    """A horizontal stacked bar per run: its five phases in ms per steady-state step. Where one
    run's step is under 1/20 of another's its bar would vanish at that scale: then each bar is
    its own step (100 %), its step time written at its end."""
    fig, ax = _figure(height=1.4 + 0.55 * len(breakdowns))
    means = [b.to_json_dict() for b in breakdowns]
    y = list(range(len(breakdowns)))[::-1]
    steps = [d["step_ms"]["mean"] for d in means]
    widest = max(steps) or 1.0
    shares = min(steps) < widest / _VANISHING
    scales = [100.0 / (step or 1.0) if shares else 1.0 for step in steps]
    full = 100.0 if shares else widest
    for phase in PHASES:
        left = [k * sum(max(0.0, d["phases"][p]["ms"]) for p in PHASES[:PHASES.index(phase)])
                for d, k in zip(means, scales)]
        width = [k * max(0.0, d["phases"][phase]["ms"]) for d, k in zip(means, scales)]
        ax.barh(y, width, left=left, color=PHASE_COLOURS[phase], label=phase, height=0.6,
                edgecolor="white", linewidth=0.5)
        for yi, lo, w, d in zip(y, left, width, means):
            share = d["phases"][phase]["share"]
            if w / full > 0.07:  # label only segments wide enough to hold it
                ax.text(lo + w / 2, yi, f"{100 * share:.0f}%", ha="center", va="center", fontsize=8)
    for yi, step, k in zip(y, steps, scales):
        ax.text(step * k + full * 0.01, yi, f"{step:.3g} ms", va="center", fontsize=9)
    ax.set_yticks(y, labels)
    ax.set_xlim(0, full * 1.15)
    ax.set_xlabel(f"% of each run's step (steps {widest / (min(steps) or 1.0):.0f}x apart: to scale, "
                  "the shortest would not show)" if shares
                  else "ms per steady-state step (mean); phases add up to the step")
    ax.set_title("Where each step's time goes")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=5,
               frameon=False, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return fig


def step_times(series: list[StepSeries]):
    """Step time of every step of each run, so compile and warm-up stand out from the steady
    state; a log scale where the first steps are far slower than the rest."""
    fig, ax = _figure(height=4.2)
    all_ms = [ms for s in series for ms in s.step_ms if ms > 0]
    steady = sorted(ms for s in series for ms in s.step_ms[s.warmup_steps:] if ms > 0) or all_ms
    log = bool(all_ms) and max(all_ms) > 20 * steady[len(steady) // 2]
    warmup = max((s.warmup_steps for s in series), default=0)
    if warmup:
        ax.axvspan(-0.5, warmup - 0.5, color="#999999", alpha=0.15, lw=0,
                   label="warm-up (compile, first-step costs)")
    for i, s in enumerate(series):
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        ax.plot(s.steps, s.step_ms, color=colour, lw=1.2, label=s.label)
        traced = [(n, ms) for n, ms, t in zip(s.steps, s.step_ms, s.traced) if t]
        if traced:
            ax.plot(*zip(*traced), "o", color=colour, ms=3,
                    label="traced by the profiler" if i == 0 else None)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("step time (ms)" + (", log scale" if log else ""))
    ax.set_title("Step time over the run")
    ax.grid(alpha=0.3, which="both" if log else "major")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)),
               frameon=False, fontsize=8)
    return fig


_RATIO_TICKS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 5, 10, 20, 50, 100)


def speed_ratio(labels: list[str], breakdowns: list[Breakdown], baseline: int = 0):
    """Step time of each run over the baseline of its workload's (> 1 slower): the convention
    of `compare`, so the plot never points the other way from the table under it. The axis is
    logarithmic and the bars grow from 1: 2x slower and 2x faster are bars of one length."""
    fig, ax = _figure(height=1.4 + 0.45 * len(breakdowns))
    steps = [b.step_stats()["mean"] for b in breakdowns]
    references = workload_references(breakdowns, baseline)
    ratios = [ms / steps[ref] if steps[ref] and ms else None for ref, ms in zip(references, steps)]
    shown = [r for r in ratios if r is not None] + [1.0]
    low, high = min(shown) / 1.25, max(shown) * 1.8  # room for the labels right of the bars
    y = list(range(len(ratios)))[::-1]
    for i, (yi, r, ms) in enumerate(zip(y, ratios, steps)):
        if r is None:  # a run without a step time has no ratio to draw
            ax.text(1.0, yi, "  no step time", va="center", fontsize=9)
            continue
        colour = "#777777" if i in references else "#0072B2" if r <= 1 else "#D55E00"
        ax.barh(yi, r - 1.0, left=1.0, color=colour, height=0.6)
        ax.text(max(r, 1.0) * 1.02, yi, f"{r:.2f}x  ({ms:.3g} ms/step)", va="center", fontsize=9)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlim(low, high)
    ticks = [t for t in _RATIO_TICKS if low <= t <= high]
    ax.set_xticks(ticks, [f"{t:g}x" for t in ticks])
    ax.set_xticks([], minor=True)
    ax.set_yticks(y, labels)
    others = "" if len(set(references)) == 1 else ", other workloads against their first run"
    ax.set_xlabel(f"step time relative to {labels[baseline]}{others} (run / baseline, log "
                  "scale; > 1 slower)")
    ax.set_title("Step-time ratio (run / baseline)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return fig


def png_bytes(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return buffer.getvalue()


def svg_bytes(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    return buffer.getvalue()


def _figure(height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, max(2.5, min(height, 30.0))), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()
