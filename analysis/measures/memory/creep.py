"""Creep: the trend of a per-step memory figure over a run, as a least-squares slope with its 95 % interval."""
from __future__ import annotations

import math
from dataclasses import dataclass

from gapscope.analysis.measures.stats import Interval, _t_quantile


@dataclass(frozen=True)
class Creep:
    per_step: float             # units of the figure a step (bytes, MB)
    ci95: Interval | None       # None with fewer than three steps
    steps: int

    @property
    def significant(self) -> bool:
        """The interval excludes zero: the figure grows (or shrinks) for real."""
        return self.ci95 is not None and (self.ci95[0] > 0 or self.ci95[1] < 0)


def creep(steps: list[float], values: list[float]) -> Creep | None:
    """Slope of `values` against `steps`; None for fewer than two points or one step number."""
    n = len(values)
    if n < 2 or n != len(steps):
        return None
    mean_x, mean_y = sum(steps) / n, sum(values) / n
    sxx = sum((x - mean_x) ** 2 for x in steps)
    if sxx == 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(steps, values)) / sxx
    if n < 3:
        return Creep(slope, None, n)
    intercept = mean_y - slope * mean_x
    residual = sum((y - intercept - slope * x) ** 2 for x, y in zip(steps, values))
    half = _t_quantile(n - 2) * math.sqrt(residual / (n - 2) / sxx)
    return Creep(slope, (slope - half, slope + half), n)
