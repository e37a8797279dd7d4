"""Noise of a figure: bootstrap resampling over steps, t-intervals over repeats, percentiles."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

# Resamples per bootstrap: the 2.5/97.5 % percentiles of 2,000 move by well under 1 % of the
# interval between seeds; the estimators are vectorised, so this costs milliseconds.
RESAMPLES = 2000
CONFIDENCE = 0.95
# A fixed seed: the same run read twice gives the same interval.
SEED = 20261123

Interval = tuple[float, float]


def resample_indices(n: int, rng: np.random.Generator, resamples: int = RESAMPLES) -> np.ndarray:
    """(resamples × n) indices drawn with replacement; row 0 is the sample itself, so the
    estimator's value on the data rides along with its bootstrap replicates."""
    drawn = rng.integers(0, n, size=(resamples, n)) if n else np.zeros((resamples, 0), int)
    drawn[0] = np.arange(n)
    return drawn


# Beyond this many steps the bootstrap resamples this many contiguous blocks of steps: its cost
# stays resamples x MAX_UNITS however long the run (100k steps would take a 2,000 x 100,000 index
# table, 1.6 GB), and blocks keep the serial correlation of neighbouring steps, which can only
# widen the interval. Up to this many, each step is its own unit (the plain bootstrap).
MAX_UNITS = 1024


class Resampler:
    """Bootstrap replicates of means over the same n steps, drawn once so that several figures
    of one run (its step, its phases) are resampled alike; row 0 is the sample itself."""

    def __init__(self, n: int, rng: np.random.Generator, resamples: int = RESAMPLES):
        units = min(n, MAX_UNITS)
        self.n = n
        self.starts = (np.arange(units) * n) // units     # each unit's first step
        self.indices = resample_indices(units, rng, resamples)
        sizes = np.diff(np.append(self.starts, n))
        self.steps = sizes[self.indices].sum(axis=1)      # steps each replicate holds

    def means(self, values) -> np.ndarray:
        """(resamples,) means of a per-step array, (resamples x k) of an (n x k) one."""
        values = np.asarray(values, dtype=float)
        if values.ndim == 2 and values.shape[1]:
            # A column at a time: gathering every column at once made a (resamples x n x k)
            # temporary (80 MB for 1,000 steps), four times slower.
            return np.stack([self.means(column) for column in values.T], axis=1)
        if len(self.starts) == self.n:
            return values[self.indices].mean(axis=1)
        totals = np.add.reduceat(values, self.starts, axis=0)[self.indices].sum(axis=1)
        return totals / (self.steps if values.ndim == 1 else self.steps[:, None])


def rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def percentile_interval(replicates: np.ndarray) -> Interval:
    """The central CONFIDENCE interval of bootstrap replicates (percentile method)."""
    tail = 100 * (1 - CONFIDENCE) / 2
    lo, hi = np.percentile(replicates, [tail, 100 - tail])
    return float(lo), float(hi)


def mean_interval(values: list[float]) -> Interval | None:
    """Bootstrap interval of the mean of `values`; None for fewer than two."""
    if len(values) < 2:
        return None
    return percentile_interval(Resampler(len(values), rng()).means(values))


@dataclass(frozen=True)
class RepeatRatio:
    """other / base over repeats in fresh processes, by the two-level model of repeat_ratio."""

    ratio: float
    ci95: Interval | None
    pair_ratios: list[float]        # repeat i of other / repeat i of base (they ran side by side)
    dof: float | None               # the t-interval's degrees of freedom (Welch)
    log_sd: float | None            # standard error of log(ratio): what further repeats shrink

    def repeats_to_reach(self, half_width: float, have: int) -> int | None:
        """Repeats per side after which the interval's relative half-width would be at most
        `half_width` (0.03 for 3 %), if the spread stays as measured; None without a spread."""
        if self.log_sd is None or half_width <= 0:
            return None
        spread = self.log_sd ** 2 * have           # variance of one repeat pair's log ratio
        # Degrees of freedom grow with the repeats as Welch's did here (2n - 2 where both
        # sides spread alike, n - 1 where one side holds all the spread).
        per_repeat = (self.dof or 2 * have - 2) / max(have - 1, 1)
        target = math.log1p(half_width)
        for n in range(2, 10_000):
            if _t_quantile(int(per_repeat * (n - 1))) * math.sqrt(spread / n) <= target:
                return n
        return None

    def repeats_to_decide(self, have: int) -> int | None:
        """Repeats per side after which an interval of this width would exclude 1 (no gap)."""
        if self.ratio == 1.0:
            return None
        return self.repeats_to_reach(math.expm1(abs(math.log(self.ratio))), have)


REPEAT_METHOD = ("two-level t (Welch) over interleaved repeats: the spread between processes, "
                 "never below the noise of the steps within them")


def repeat_ratio(base: list[float], other: list[float],
                 base_within: list[float] | None = None,
                 other_within: list[float] | None = None) -> RepeatRatio:
    """other / base from repeats in fresh processes: per side, each process gives the mean of
    its steady steps; `*_within` (optional) is the variance of each such mean from its own steps
    (var(steps) / n).

    Two levels of noise add up in a process's mean: the process itself (threads, allocator,
    placement: a process is steady within itself but differs from the next by several %) and
    its steps. The spread of the processes' means holds both, but from 3 processes it is a
    poor estimate, and three that happen to agree would claim more than their own steps can:
    so each side's variance of log(mean) is the larger of the spread between its processes
    and the mean noise within them. The sides may spread differently (a compiled run is
    steadier), so the t-interval on log(ratio) uses Welch's degrees of freedom; a ratio's
    interval on logs is symmetric (2x slower and 2x faster lie equally far from 1)."""
    if not base or not other:
        raise ValueError("no repeats")
    la = [math.log(v) for v in base]
    lb = [math.log(v) for v in other]
    ratio = math.exp(statistics.fmean(lb) - statistics.fmean(la))
    pairs = [b / a for a, b in zip(base, other)]
    if len(la) < 2 or len(lb) < 2:
        return RepeatRatio(ratio, None, pairs, None, None)
    if other == base:  # the same measurements (a baseline against itself): no difference at all
        return RepeatRatio(1.0, (1.0, 1.0), pairs, None, 0.0)
    (va, da), (vb, db) = _side(la, base, base_within), _side(lb, other, other_within)
    ea, eb = va / len(la), vb / len(lb)
    se2 = ea + eb
    if se2 == 0:
        return RepeatRatio(ratio, (ratio, ratio), pairs, None, 0.0)
    dof = se2 ** 2 / (ea ** 2 / da + eb ** 2 / db)
    half = _t_quantile(int(dof)) * math.sqrt(se2)
    log_ratio = math.log(ratio)
    return RepeatRatio(ratio, (math.exp(log_ratio - half), math.exp(log_ratio + half)), pairs,
                       dof, math.sqrt(se2))


# Degrees of freedom of a side whose variance is its steps' noise: dozens of steps in each of
# several processes; 30 errs on the wide side.
_WITHIN_DOF = 30


def _side(logs: list[float], means: list[float], within: list[float] | None) -> tuple[float, float]:
    """A side's variance of log(process mean), and the degrees of freedom behind it: the
    spread between its processes (n - 1), or, where that is smaller than the noise within
    them, the within-process noise (known from many steps)."""
    between, floor = statistics.variance(logs), _log_within(means, within)
    return (between, len(logs) - 1) if between >= floor else (floor, _WITHIN_DOF)


def _log_within(means: list[float], within: list[float] | None) -> float:
    """Mean variance of log(mean) from the steps inside each process (delta method)."""
    if not within:
        return 0.0
    return statistics.fmean(w / m ** 2 for w, m in zip(within, means))


def mean_variance(values: list[float]) -> float:
    """Variance of the mean of `values` from their own spread (var / n); 0 for fewer than two."""
    return statistics.variance(values) / len(values) if len(values) > 1 else 0.0


def welch_difference(base: list[float], other: list[float], base_within: list[float] | None = None,
                     other_within: list[float] | None = None) -> Interval | None:
    """Interval of mean(other) - mean(base) over repeats in fresh processes (Welch's t), by
    repeat_ratio's two levels: a side's variance is the spread of its processes' means, or the
    mean noise within them (`*_within`: each mean's variance from its own steps) where that is
    larger, so three processes that happen to agree claim no more than their steps can."""
    if len(base) < 2 or len(other) < 2:
        return None
    (va, da), (vb, db) = _level(base, base_within), _level(other, other_within)
    ea, eb = va / len(base), vb / len(other)
    delta = statistics.fmean(other) - statistics.fmean(base)
    if ea + eb == 0:
        return delta, delta
    dof = (ea + eb) ** 2 / (ea ** 2 / da + eb ** 2 / db)
    half = _t_quantile(int(dof)) * math.sqrt(ea + eb)
    return delta - half, delta + half


def _level(means: list[float], within: list[float] | None) -> tuple[float, float]:
    """A side's variance of a process mean in ms, and its degrees of freedom (as _side)."""
    between, floor = statistics.variance(means), statistics.fmean(within) if within else 0.0
    return (between, len(means) - 1) if between >= floor else (floor, _WITHIN_DOF)


def paired_ratio(base: list[float], other: list[float]) -> tuple[float, Interval | None]:
    """other / base over repeats (means only) and its interval: repeat_ratio's model."""
    result = repeat_ratio(base, other)
    return result.ratio, result.ci95


def contains_zero(interval: Interval | None) -> bool:
    return interval is not None and interval[0] <= 0.0 <= interval[1]


def contains_one(interval: Interval | None) -> bool:
    """For a ratio's interval: no difference cannot be ruled out."""
    return interval is not None and interval[0] <= 1.0 <= interval[1]


def percentile(sorted_values: list[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * pct / 100
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


# Two-sided 97.5 % quantiles of Student's t by degrees of freedom (scipy is no dependency);
# between entries the next lower dof is taken, which errs on the wide side.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 40: 2.021,
         60: 2.000, 120: 1.980}


def _t_quantile(dof: int) -> float:
    dof = max(dof, 1)
    known = max(k for k in _T975 if k <= dof)
    return _T975[known] if dof < 1000 else 1.960
