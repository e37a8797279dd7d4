"""The process's resident memory per step (steps.csv `rss_mb`): its level and creep over the steady steps."""
from __future__ import annotations

from gapscope.analysis.measures.memory.creep import creep
from gapscope.analysis.readers import step_rows

RSS_COLUMN = "rss_mb"


def rss_rows(rows: list[dict] | None, warmup_steps: int) -> tuple[list[dict], bool]:
    """Steady steps that recorded RSS, and whether they ran without the profiler: the
    unprofiled ones where there are any, since the profiler's own buffers grow the process
    while it records (that growth is no creep of the loop's)."""
    if not rows:
        return [], False
    steady = [r for r in step_rows.steady(rows, warmup_steps) if r.get(RSS_COLUMN) is not None]
    unprofiled = [r for r in steady if not r.get("traced")]
    return (unprofiled, True) if unprofiled else (steady, False)


def rss_figures(rows: list[dict] | None, warmup_steps: int) -> dict | None:
    """{"mean_mb", "peak_mb", "first_mb", "last_mb", "steps", "creep"} or None without the
    column; creep only over unprofiled steps."""
    chosen, unprofiled = rss_rows(rows, warmup_steps)
    if not chosen:
        return None
    values = [float(r[RSS_COLUMN]) for r in chosen]
    return {"mean_mb": sum(values) / len(values), "peak_mb": max(values), "first_mb": values[0],
            "last_mb": values[-1], "steps": len(values),
            "creep": creep([float(r["step"]) for r in chosen], values) if unprofiled else None}

