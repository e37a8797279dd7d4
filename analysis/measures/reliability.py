"""Whether a run's step time can be trusted: the machine's load while it ran, and steps that split or shift."""
from __future__ import annotations

import math

import numpy as np

# Other processes using more than this share of all cores while the run ran: the run's
# threads were preempted (2 intra-op threads on 2 shared cores wait for each other at every
# parallel region), so its step time says as much about the neighbours as about the run.
# A quiet machine here reads 0-3 % (the launcher reading the run's pipe included).
BUSY_OTHERS_PCT = 10.0
# Measured here (2 cores, load 5.5-7 from other work): the plain torch CNN loop took 1,445 ms a
# step with its 2 intra-op threads, 532 ms with one (quiet: ~75 ms with two). Threads that wait
# for each other at every parallel region suffer most when a neighbour takes a core.
THREADS_ADVICE = ("where you cannot, fewer intra-op threads suffer less: OMP_NUM_THREADS=1 made "
                  "a torch CNN step 2.7x faster on 2 busy cores here")
BUSY_STEAL_PCT = 5.0
# Steady steps that change level for good by this much (median over median) mid-run: the
# machine changed state. Unordered, steps in two groups are that only when far apart: a
# DataLoader with workers alternates 0.85 and 1.5 ms steps by itself (batch ready or not).
LEVEL_RATIO = 1.3
SPLIT_RATIO = 2.0
LEVEL_MIN_SHARE = 0.1
LEVEL_MIN_STEPS = 3


def reliability_warnings(manifest: dict, step_times_ms: list[float]) -> list[str]:
    """One line per reason not to take the step time as a fact; empty when none is seen."""
    warnings = _load_warnings(manifest.get("machine_load"))
    seen = []   # one state change, said in one line however many ways it shows
    split = two_levels(step_times_ms)
    if split:
        (n_low, low), (n_high, high) = split
        seen.append(f"fall into two levels ({n_low} near {low:.3f} ms, {n_high} near {high:.3f} ms)")
    shift = level_shift(step_times_ms)
    if shift:
        at, before, after = shift
        seen.append(f"shifted from {before:.3f} to {after:.3f} ms at the {_ordinal(at + 1)} steady step")
    if seen:
        warnings.append(f"steady steps {' and '.join(seen)}: the machine changed state during the run")
    return warnings


def busy_machine(manifest: dict) -> bool:
    """Whether other processes (or other guests) took the cores while the run ran."""
    return bool(_load_warnings(manifest.get("machine_load")))


def busy_reason(manifest: dict) -> str | None:
    """The load that made the run's machine busy, in a few words; None on a quiet machine."""
    return f"busy machine ({load_words([manifest['machine_load']])})" if busy_machine(manifest) else None


def busy_load(manifest: dict) -> dict | None:
    """The machine's load while the run ran, where it made the machine busy; else None."""
    return manifest["machine_load"] if busy_machine(manifest) else None


def is_load_warning(warning: str) -> bool:
    """A reliability warning about the machine's load (the others are the run's own steps)."""
    return warning.startswith(("busy machine:", "busy host:"))


def load_words(loads: list[dict]) -> str:
    """What took the cores in the busy `loads`: 'other processes used 41-96 % of the cores'."""
    def span(key: str, above: float) -> str | None:
        values = sorted(v for load in loads if (v := _number(load.get(key))) is not None and v > above)
        if not values:
            return None
        return f"{values[0]:.0f}" if round(values[0]) == round(values[-1]) else f"{values[0]:.0f}-{values[-1]:.0f}"
    others, steal = span("others_cpu_pct", BUSY_OTHERS_PCT), span("steal_pct", BUSY_STEAL_PCT)
    words = [f"other processes used {others} % of the cores"] if others else []
    words += [f"other guests took {steal} % of the CPU time (steal)"] if steal else []
    return " and ".join(words)


def busy_warning(named: list[str], loads: list[dict]) -> str:
    """The one warning of a comparison (compare, sweep) whose `named` runs ran while other
    processes took the cores (`loads`: their busy loads): no verdict is drawn from them."""
    return (f"busy machine while {', '.join(named)} ran: {load_words(loads)}, so those step times, "
            f"and every ratio, cause and suggestion drawn from them, are no fact about the "
            f"configurations; measure on a quiet machine ({THREADS_ADVICE})")


def _load_warnings(load) -> list[str]:
    if not isinstance(load, dict):
        return []
    warnings = []
    others, steal = _number(load.get("others_cpu_pct")), _number(load.get("steal_pct"))
    cores = _number(load.get("cores"))
    if others is not None and others > BUSY_OTHERS_PCT:
        warnings.append(f"busy machine: other processes used {others:.0f} % of the "
                        f"{f'{cores:.0f} ' if cores else ''}cores while this run ran, so its step "
                        "time is not a fact about this configuration: measure on a quiet machine "
                        f"({THREADS_ADVICE})")
    if steal is not None and steal > BUSY_STEAL_PCT:
        warnings.append(f"busy host: the hypervisor gave {steal:.0f} % of the CPU time to other "
                        "guests while this run ran (steal)")
    return warnings


def two_levels(times: list[float]) -> tuple[tuple[int, float], tuple[int, float]] | None:
    """((count, median) of the fast group, (count, median) of the slow) where the sorted steps
    break at one wide gap into two groups SPLIT_RATIO apart; None for one level."""
    values = np.asarray(times, float)
    values = np.sort(values[values > 0])
    least = max(LEVEL_MIN_STEPS, math.ceil(LEVEL_MIN_SHARE * len(values)))
    if len(values) < 2 * least:
        return None
    at = np.arange(least, len(values) - least + 1)
    gaps = np.log(values[at] / values[at - 1])
    cut = int(at[len(at) - 1 - np.argmax(gaps[::-1])])  # the widest gap, the last of equals
    low, high = values[:cut], values[cut:]
    if _sorted_median(high) / _sorted_median(low) < SPLIT_RATIO:
        return None
    # A continuum of step times has no wide gap: half the ratio must lie between the groups.
    if values[cut] / values[cut - 1] < math.sqrt(SPLIT_RATIO):
        return None
    return (len(low), _sorted_median(low)), (len(high), _sorted_median(high))


def _sorted_median(ordered: np.ndarray) -> float:
    """statistics.median of values already in order."""
    middle = len(ordered) // 2
    return float(ordered[middle]) if len(ordered) % 2 else float((ordered[middle - 1] + ordered[middle]) / 2)


def level_shift(times: list[float]) -> tuple[int, float, float] | None:
    """(index, median before, median after) where the steps, in time order, change level for
    good: the two stretches LEVEL_RATIO apart and hardly overlapping; None otherwise."""
    times = np.asarray(times, float)
    if not len(times) or times.min() <= 0:
        return None
    # On logs so a 2x step change counts alike at any speed.
    cut = change_point(np.log(times))
    if cut is None:
        return None
    before, after = float(np.median(times[:cut])), float(np.median(times[cut:]))
    if abs(math.log(after / before)) < math.log(LEVEL_RATIO):
        return None
    if not apart(times[:cut], times[cut:]):
        return None
    return cut, before, after


def change_point(values: list[float]) -> int | None:
    """The cut that explains most of the spread of `values` in time order (largest
    between-stretch sum of squares: the least-squares change point), each stretch at least
    LEVEL_MIN_STEPS long and a LEVEL_MIN_SHARE of them; None where they are too few."""
    least = max(LEVEL_MIN_STEPS, math.ceil(LEVEL_MIN_SHARE * len(values)))
    if len(values) < 2 * least:
        return None
    # The stretches' means from running sums, so every cut is tried in linear time.
    n = len(values)
    cuts = np.arange(least, n - least + 1)
    sums = np.cumsum(np.asarray(values, dtype=float))
    before = sums[cuts - 1] / cuts
    after = (sums[-1] - sums[cuts - 1]) / (n - cuts)
    return int(cuts[np.argmax(cuts * (n - cuts) * (before - after) ** 2)])


def apart(before: list[float], after: list[float]) -> bool:
    """Most of the higher stretch above most of the lower one: a step change, not a drift."""
    before, after = np.sort(np.asarray(before, float)), np.sort(np.asarray(after, float))
    high, low = (before, after) if _sorted_median(before) > _sorted_median(after) else (after, before)
    return _quantile(low, 0.9) < _quantile(high, 0.1)


def _quantile(ordered: np.ndarray, q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
