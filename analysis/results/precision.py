"""When an A/B measurement has measured enough: each ratio's interval against a target precision, or the time spent."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gapscope.analysis.measures.stats import RepeatRatio, mean_variance, repeat_ratio

# Fewer rounds give a spread from two processes a side: one lucky pair would stop it early.
MIN_ROUNDS = 3


def half_width(result: RepeatRatio) -> float | None:
    """The interval's relative half-width (0.03 for ±3 %), on the log scale where it is symmetric."""
    if result.ci95 is None:
        return None
    low, high = result.ci95
    return math.expm1((math.log(high) - math.log(low)) / 2)


@dataclass(frozen=True)
class Progress:
    """Where an A/B measurement stands after a round: each configuration against the first."""

    ratios: dict[str, RepeatRatio]
    rounds: int
    elapsed_s: float

    def widest(self) -> float | None:
        widths = [half_width(r) for r in self.ratios.values()]
        return None if any(w is None for w in widths) else max(widths, default=None)

    def line(self, target: float) -> str:
        parts = []
        for label, r in self.ratios.items():
            interval = "" if r.ci95 is None else f" [{r.ci95[0]:.3f}, {r.ci95[1]:.3f}]"
            width = half_width(r)
            parts.append(f"{label} {r.ratio:.3f}x{interval}" + _width_text(width))
        return f"round {self.rounds}: {'; '.join(parts)} (target ±{100 * target:g} %)"


def _width_text(width: float | None) -> str:
    """' ±4.2 %'; an interval over 100x wide reads as such (±1287388.5 % was printed)."""
    if width is None:
        return ""
    return f" ±{100 * width:.1f} %" if width <= 1.0 else f" ±{width:.0f}x (far from the target)"


def stop_reason(progress: Progress, target: float, budget_s: float, max_rounds: int) -> str | None:
    """Why to stop now, or None to run another round. A round that would end past the budget
    is not started (rounds take about as long as the mean so far)."""
    widest = progress.widest()
    if progress.rounds >= MIN_ROUNDS and widest is not None and widest <= target:
        return f"precision reached: ±{100 * widest:.1f} % ≤ ±{100 * target:g} % after {progress.rounds} repeats"
    short = ("" if widest is None else f"; reached{_width_text(widest)}, target ±{100 * target:g} %"
             + _needed(progress, target))
    if progress.rounds >= max_rounds:
        return f"stopped at the most repeats asked for ({max_rounds}){short}"
    per_round = progress.elapsed_s / max(progress.rounds, 1)
    # The budget stops no measurement before MIN_ROUNDS: two repeats a side give no spread.
    if progress.rounds >= MIN_ROUNDS and progress.elapsed_s + per_round > budget_s:
        return f"time budget spent ({_minutes(progress.elapsed_s)} of {_minutes(budget_s)}){short}"
    return None


def _needed(progress: Progress, target: float) -> str:
    needed = [r.repeats_to_reach(target, progress.rounds) for r in progress.ratios.values()]
    if any(n is None for n in needed) or not needed:
        return ""
    # Not to be read beside "repeats to tell the gap from noise" as one figure: it is another
    # question (how many narrow the interval to the target), so it says which.
    return (f"; about {max(needed)} repeats a side would narrow it to ±{100 * target:g} % if the "
            "spread stays so")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def progress_of(runs: dict[str, list[Path]], elapsed_s: float) -> Progress:
    """The ratios so far from the unprofiled steady steps of each finished run (timers only:
    the traces are not read between rounds)."""
    from gapscope.analysis.results.breakdown import step_times_of
    times = {label: [step_times_of(path) for path in paths] for label, paths in runs.items()}
    labels = list(times)
    base = times[labels[0]]
    ratios = {}
    for label in labels[1:]:
        other = times[label][:len(base)]
        ratios[label] = repeat_ratio([_mean(t) for t in base[:len(other)]], [_mean(t) for t in other],
                                     [mean_variance(t) for t in base[:len(other)]],
                                     [mean_variance(t) for t in other])
    return Progress(ratios, min(len(v) for v in times.values()), elapsed_s)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
