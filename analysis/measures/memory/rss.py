"""The process's resident memory per step (steps.csv `rss_mb`): its level and creep over the steady steps."""
from __future__ import annotations

import numpy as np

from gapscope.analysis.measures.memory.creep import trend
from gapscope.analysis.readers import step_rows

RSS_COLUMN = "rss_mb"
# A stretch of unprofiled steps shorter than this tells nothing of a slope beside its own level.
_MIN_STRETCH = 3
# Steps outside the traced window (in such stretches) below which no trend is told: a slope
# and a level a stretch leave too few degrees of freedom, and one page fault reads as a slope.
MIN_TREND_STEPS = 8
TOO_FEW = "too few steps outside the traced window to tell"
# Resident memory grows by the allocator's arenas and pages as a process warms up (the demo's
# Keras MLP: +0.02 MB a step over 44 steps): below this a step, no creep is said from RSS.
NEGLIGIBLE_RSS_MB = 0.1


def rss_rows(rows: list[dict] | None, warmup_steps: int) -> tuple[list[dict], bool]:
    """Steady steps that recorded RSS, and whether they ran without the profiler: the
    unprofiled ones where there are any, since the profiler's own buffers grow the process
    while it records (that growth is no creep of the loop's)."""
    if not rows:
        return [], False
    steady = step_rows.steady(rows, warmup_steps)
    recorded = ~np.isnan(step_rows.column(steady, RSS_COLUMN))
    unprofiled = recorded & ~step_rows.flagged(steady, "traced")
    return (step_rows.where(steady, unprofiled), True) if unprofiled.any() \
        else (step_rows.where(steady, recorded), False)


def outside_window(rows: list[dict], warmup_steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The unprofiled steady stretches with RSS, before and after the traced window (a traced
    step or a missing one ends a stretch), each at least _MIN_STRETCH long, as their steps,
    RSS and stretch (0, 1, ...) in step order. The window's profiler buffers move the level
    between them; inside one, nothing of the profiler's runs."""
    steady = step_rows.steady(rows or [], warmup_steps)
    order = np.argsort(step_rows.column(steady, "step"), kind="stable")
    steps, rss = step_rows.column(steady, "step")[order], step_rows.column(steady, RSS_COLUMN)[order]
    kept = (~step_rows.flagged(steady, "traced") & ~np.isnan(step_rows.column(steady, RSS_COLUMN)))[order]
    # A stretch begins at a kept step whose step before is not kept or not the step before it.
    begins = kept & np.r_[True, ~kept[:-1] | (steps[1:] != steps[:-1] + 1)]
    stretch = np.cumsum(begins) - 1
    long_enough = np.bincount(stretch[kept], minlength=int(begins.sum())) >= _MIN_STRETCH
    used = kept & long_enough[np.maximum(stretch, 0)] if len(long_enough) else kept & False
    renumbered = np.cumsum(long_enough) - 1
    return steps[used], rss[used], renumbered[stretch[used]]


def rss_figures(rows: list[dict] | None, warmup_steps: int) -> dict | None:
    """{"mean_mb", "peak_mb", "first_mb", "last_mb", "steps", "creep", "level_change",
    "trend_steps", "trend_unknown"} or None without the column. The trend is fitted on the
    unprofiled stretches outside the traced window only, a level each (creep.trend), and told
    apart from a one-off level change; "trend_unknown" says why none is told."""
    chosen, _ = rss_rows(rows, warmup_steps)
    if not chosen:
        return None
    values = step_rows.column(chosen, RSS_COLUMN).tolist()
    steps, levels, stretches = outside_window(rows, warmup_steps)
    found, change = None, None
    if len(steps) >= MIN_TREND_STEPS:
        found, change = trend(steps.tolist(), levels.tolist(), stretches, NEGLIGIBLE_RSS_MB)
    return {"mean_mb": sum(values) / len(values), "peak_mb": max(values), "first_mb": values[0],
            "last_mb": values[-1], "steps": len(values), "creep": found, "level_change": change,
            "trend_steps": len(steps),
            "trend_unknown": None if len(steps) >= MIN_TREND_STEPS else f"{TOO_FEW} ({len(steps)} steps)"}
