"""Creep: the trend of a per-step memory figure over a run, as a least-squares slope with its 95 % interval,
told apart from a one-off level change."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gapscope.analysis.measures.reliability import apart, change_point
from gapscope.analysis.measures.stats import Interval, _t_quantile


@dataclass(frozen=True)
class Creep:
    per_step: float             # units of the figure a step (bytes, MB)
    ci95: Interval | None       # None with too few steps for one
    steps: int

    @property
    def significant(self) -> bool:
        """The interval excludes zero: the figure grows (or shrinks) for real."""
        return self.ci95 is not None and (self.ci95[0] > 0 or self.ci95[1] < 0)


@dataclass(frozen=True)
class LevelChange:
    """The figure stepped once to a new level and stayed there: one allocation kept (a cache
    filled, a buffer grown), no growth a step."""

    step: float                 # the first step at the new level
    before: float               # median level before, and after
    after: float


def creep(steps: list[float], values: list[float], groups: list[int] | None = None) -> Creep | None:
    """Slope of `values` against `steps`; None for fewer than two points or one step number.
    `groups` (one label a point): stretches that may each sit at their own level (before and
    after a traced window, whose profiler buffers move the process's memory): one slope, an
    intercept a stretch, so that a jump between stretches reads as no slope."""
    n = len(values)
    if n < 2 or n != len(steps):
        return None
    # As arrays: a run of 100k steps made the sums over Python lists a tenth of its breakdown.
    group = _numbered(groups) if groups is not None and len(groups) else np.zeros(n, np.intp)
    xs, ys = np.asarray(steps, float), np.asarray(values, float)
    counts = np.bincount(group)
    dx = xs - (np.bincount(group, xs) / counts)[group]
    dy = ys - (np.bincount(group, ys) / counts)[group]
    sxx = float(dx @ dx)
    if sxx == 0:
        return None
    slope = float(dx @ dy) / sxx
    dof = n - len(counts) - 1
    if dof < 1:
        return Creep(slope, None, n)
    residual = float(((dy - slope * dx) ** 2).sum())
    half = _t_quantile(dof) * math.sqrt(residual / dof / sxx)
    return Creep(slope, (slope - half, slope + half), n)


def trend(steps: list[float], values: list[float], groups: list[int] | None = None,
          negligible: float = 0.0) -> tuple[Creep | None, LevelChange | None]:
    """The slope, or a one-off level change where that explains the figure: the step times'
    level-shift test (reliability.change_point, apart) finds the likeliest jump inside a
    stretch; where the two sides of it hardly overlap and, each at its own level, show no slope
    beyond noise, the figure stepped once (a planted 50 MB allocation read as +0.38 MB a step
    when fitted as a line). A steady leak keeps its slope on either side of any cut; a slope
    under `negligible` a step, which no view calls creep, does not keep the level change from
    being told (a page or so over 18 flat steps fits to a slope beyond noise), and a jump that
    such a slope would make over its stretch is not told as one."""
    label = _numbered(groups) if groups is not None and len(groups) else np.zeros(len(values), np.intp)
    found = creep(steps, values, label)
    ys_all = np.asarray(values, float)
    best = None
    for g in range(int(label.max()) + 1 if len(label) else 0):  # in their order of appearance
        idx = np.flatnonzero(label == g)
        ys = ys_all[idx]
        cut = change_point(ys)
        if cut is None or not apart(ys[:cut], ys[cut:]):
            continue
        jump = abs(float(np.median(ys[cut:])) - float(np.median(ys[:cut])))
        if best is None or jump > best[0]:
            best = (jump, idx, cut)
    # A jump no larger than a negligible slope would make over its stretch is no finding either.
    if best is None or best[0] < negligible * len(best[1]):
        return found, None
    _, idx, cut = best
    split = label.copy()
    split[idx[cut:]] += int(label.max()) + 1  # the stretch after the jump: a group of its own
    within = creep(steps, values, split)
    if within is None or within.significant and abs(within.per_step) >= negligible:
        return found, None
    before, after = ys_all[idx[:cut]], ys_all[idx[cut:]]
    return within, LevelChange(steps[int(idx[cut])], float(np.median(before)), float(np.median(after)))


def _numbered(groups) -> np.ndarray:
    """Each point's group (whole numbers) as 0, 1, ... in the order the groups first appear."""
    _, first, inverse = np.unique(np.asarray(groups, np.intp), return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse.reshape(-1)]
