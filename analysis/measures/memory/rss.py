"""The process's resident memory per step (steps.csv `rss_mb`): its level and creep over the steady steps."""
from __future__ import annotations

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
    steady = [r for r in step_rows.steady(rows, warmup_steps) if r.get(RSS_COLUMN) is not None]
    unprofiled = [r for r in steady if not r.get("traced")]
    return (unprofiled, True) if unprofiled else (steady, False)


def outside_window(rows: list[dict], warmup_steps: int) -> list[list[dict]]:
    """The unprofiled steady stretches with RSS, before and after the traced window (a traced
    step or a missing one ends a stretch), each at least _MIN_STRETCH long. The window's
    profiler buffers move the level between them; inside one, nothing of the profiler's runs."""
    found, current = [], []
    for row in sorted(step_rows.steady(rows or [], warmup_steps), key=lambda r: r["step"]):
        gap = current and row["step"] != current[-1]["step"] + 1
        if row.get("traced") or row.get(RSS_COLUMN) is None or gap:
            found.append(current)
            current = []
        if not row.get("traced") and row.get(RSS_COLUMN) is not None:
            current.append(row)
    found.append(current)
    return [s for s in found if len(s) >= _MIN_STRETCH]


def rss_figures(rows: list[dict] | None, warmup_steps: int) -> dict | None:
    """{"mean_mb", "peak_mb", "first_mb", "last_mb", "steps", "creep", "level_change",
    "trend_steps", "trend_unknown"} or None without the column. The trend is fitted on the
    unprofiled stretches outside the traced window only, a level each (creep.trend), and told
    apart from a one-off level change; "trend_unknown" says why none is told."""
    chosen, _ = rss_rows(rows, warmup_steps)
    if not chosen:
        return None
    values = [float(r[RSS_COLUMN]) for r in chosen]
    stretches = outside_window(rows, warmup_steps)
    used = [r for s in stretches for r in s]
    found, change = None, None
    if len(used) >= MIN_TREND_STEPS:
        found, change = trend([float(r["step"]) for r in used], [float(r[RSS_COLUMN]) for r in used],
                              [i for i, s in enumerate(stretches) for _ in s], NEGLIGIBLE_RSS_MB)
    return {"mean_mb": sum(values) / len(values), "peak_mb": max(values), "first_mb": values[0],
            "last_mb": values[-1], "steps": len(values), "creep": found, "level_change": change,
            "trend_steps": len(used),
            "trend_unknown": None if len(used) >= MIN_TREND_STEPS else f"{TOO_FEW} ({len(used)} steps)"}
