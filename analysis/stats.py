"""Noise of a figure: bootstrap resampling over steps, t-intervals over repeats, percentiles."""
from __future__ import annotations

import math

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
    data = np.asarray(values, dtype=float)
    return percentile_interval(data[resample_indices(len(data), rng())].mean(axis=1))


def t_interval(values: list[float]) -> Interval | None:
    """Student-t interval of the mean of a few independent values (repeats): the right width
    for 3 to 10 figures, where a bootstrap would be far too narrow. None for fewer than two."""
    n = len(values)
    if n < 2:
        return None
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = _t_quantile(n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half


def paired_ratio(base: list[float], other: list[float]) -> tuple[float, Interval | None]:
    """other / base over paired repeats (repeat i of both ran side by side): the geometric mean
    of the paired ratios and its t-interval, taken on their logs, where a ratio is symmetric
    (2x slower and 2x faster lie equally far from 1). No interval for fewer than two pairs."""
    logs = [math.log(b / a) for a, b in zip(base, other)]
    if not logs:
        raise ValueError("no pairs")
    interval = t_interval(logs)
    return (math.exp(sum(logs) / len(logs)),
            None if interval is None else (math.exp(interval[0]), math.exp(interval[1])))

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


# Two-sided 97.5 % quantiles of Student's t by degrees of freedom (scipy is no dependency).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000}


def _t_quantile(dof: int) -> float:
    known = max(k for k in _T975 if k <= dof)
    return _T975[known] if dof < 120 else 1.960
