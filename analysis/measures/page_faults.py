"""Minor page faults per steady step (steps.csv): fresh pages the kernel had to map because the allocator gave memory back."""
from __future__ import annotations

import statistics

import numpy as np

from gapscope.analysis.readers import step_rows

# The variant that keeps freed memory (workloads/variants.py), named in the notes and suggestions.
VARIANT = "malloc-keep"
# Below this a step's faults cost too little to be a reason (about 1.5 ms at the cost below):
# a GPU or Keras step takes tens to hundreds, a torch CPU CNN step that trims its heap ~13,000.
MANY_PER_STEP = 1000
# What one fault costs, measured on the torch CNN (benchmarks/README.md): glibc keeping its memory
# took the step from 97.0 to 78.2 ms and from ~13,000 faults to ~1,000 (~1.5 µs each); step by
# step within a process, time rose 1.40-1.43 µs a fault (the kernel's fault and the zeroing of a
# 4 KiB page). Used to estimate what faults cost a step, and so when they are worth a try.
FAULT_COST_US = 1.5
# Faults whose estimated cost is this share of the step: keeping the memory is worth a try.
COSTLY_SHARE = 0.05
# Repeats of one configuration whose faults a step differ by this factor sat in different
# allocator states (glibc sets its thresholds from what a process freed before): seen here as
# 14,400 against 30,200 a step in one trial of the torch CNN, the slower repeat 40 % slower.
STATES_APART = 1.5


def faults_per_step(rows: list[dict] | None, warmup_steps: int) -> float | None:
    """Mean minor page faults of the steady steps the step time comes from (the unprofiled
    ones where there are any); None where steps.csv does not count them (older runs, foreign
    traces) or a step lacks the count."""
    if not rows:
        return None
    steady = step_rows.steady(rows, warmup_steps)
    counts, traced = step_rows.column(steady, "minor_faults"), step_rows.flagged(steady, "traced")
    if not traced.all():
        counts = counts[~traced]
    if not len(counts) or np.isnan(counts).any():
        return None
    return statistics.fmean(counts.tolist())


def estimated_cost_ms(faults: float) -> float:
    return faults * FAULT_COST_US / 1000.0


def costly(faults: float | None, step_ms: float) -> bool:
    """Whether a step's faults are many and their estimated cost a share of it worth a try
    of the malloc-keep variant."""
    return (faults is not None and faults >= MANY_PER_STEP and step_ms > 0
            and estimated_cost_ms(faults) >= COSTLY_SHARE * step_ms)


def note(faults: float | None, step_ms: float, variant: str | None) -> str | None:
    """The breakdown's line on costly faults, naming the variant that removes them."""
    if not costly(faults, step_ms) or VARIANT in (variant or "").split(","):
        return None
    cost = estimated_cost_ms(faults)
    return (f"steady steps took {faults:,.0f} minor page faults each, about {cost:.1f} ms "
            f"({100 * cost / step_ms:.0f} % of the step) at {FAULT_COST_US} µs each: the allocator "
            f"gives memory back to the kernel and takes it again every step; the {VARIANT} "
            "variant keeps it")


def states_apart(low: float, high: float) -> bool:
    """Whether repeats that took `low` and `high` faults a step sat in different allocator states."""
    return high >= MANY_PER_STEP and high > STATES_APART * low


def states_warning(label: str, counts: list[float | None]) -> str | None:
    """A warning where the repeats of one configuration took their pages in different allocator
    states: the spread of its step time is then that, as much as the configuration."""
    if len(counts) < 2 or any(c is None for c in counts):
        return None
    low, high = min(counts), max(counts)
    if not states_apart(low, high):
        return None
    return (f"{label}: its repeats took {low:,.0f} to {high:,.0f} page faults a step (about "
            f"{estimated_cost_ms(high - low):.1f} ms apart at {FAULT_COST_US} µs each): their "
            "processes sat in different allocator states, which spreads its step time; more "
            f"repeats average it out, and the {VARIANT} variant removes it (the loop then keeps "
            "its memory, which is another configuration)")
