"""The truthful phase estimate: the step time from unprofiled steps, each phase from host timers
where they saw it, else from the trace with the profiler's own cost taken out, bootstrapped.

The profiler's cost per step is measured by the run itself: traced steps minus unprofiled
steps on the same clock (the step timers). Where inside the step it lands cannot be seen, and
it does not follow the number of events recorded: on eager loops, where the timers give every
phase's truth beside the trace, the cost per recorded event ranged from 0.6 to 17 µs between
the phases of one torch step, and a TF eager step paid it almost all in the optimizer. The
estimate therefore assumes the profiler slows host work uniformly: each phase keeps its share
of the traced step and the shares are applied to the unprofiled step, so the five add up to
it. benchmarks/compensation_check.py measures how far that lands from the timers' truth.
Every step of that is repeated on bootstrap resamples of the steps, giving each figure an
interval that carries the noise of both the traced and the unprofiled steps."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gapscope.analysis.measures import stats
from gapscope.analysis.results.records import Breakdown, PhaseFigure, PhaseSource
from gapscope.profilers.phases import MARKED_PHASES, PHASES

_OTHER = PHASES.index("other")


@dataclass
class PhaseSamples:
    """Per-step figures of one run, each array one value per step."""

    untraced_step_ms: np.ndarray | None             # unprofiled steady steps (step timers)
    timer_phase_ms: dict[str, np.ndarray]           # phases the timers saw, on those steps
    traced_phase_ms: np.ndarray | None = None       # (traced steps × 5) as recorded, PHASES order
    traced_timer_step_ms: np.ndarray | None = None  # the traced steps on the step timers' clock


@dataclass
class Estimate:
    step_ms: float
    step_ci95: stats.Interval | None
    phases: dict[str, PhaseFigure]
    replicates: np.ndarray   # (resamples × 6): step mean, then the five phases
    source: PhaseSource


def estimate(samples: PhaseSamples, raw: bool = False) -> Estimate:
    """raw: the trace's figures as recorded (a foreign trace, or asked for)."""
    generator = stats.rng()
    traced = samples.traced_phase_ms
    have_trace = traced is not None and len(traced) > 0
    have_untraced = samples.untraced_step_ms is not None and len(samples.untraced_step_ms) > 0
    if raw or not have_untraced:
        if not have_trace:
            raise ValueError("no steps to estimate from")
        phases = stats.Resampler(len(traced), generator).means(traced)
        step = phases.sum(axis=1)
        sources = dict.fromkeys(PHASES, PhaseSource.RAW)
    else:
        untraced = stats.Resampler(len(samples.untraced_step_ms), generator)
        step = untraced.means(samples.untraced_step_ms)
        timed = {p: untraced.means(v) for p, v in samples.timer_phase_ms.items()}
        phases = np.zeros((len(step), len(PHASES)))
        for p, values in timed.items():
            phases[:, PHASES.index(p)] = values
        sources = {p: PhaseSource.TIMERS for p in timed}
        untimed = [p for p in MARKED_PHASES if p not in timed]
        if untimed and have_trace:
            in_trace = stats.Resampler(len(traced), generator)
            on_timers = (stats.Resampler(len(samples.traced_timer_step_ms), generator)
                         if samples.traced_timer_step_ms is not None
                         and len(samples.traced_timer_step_ms) else None)
            compensated = _compensate(samples, in_trace, on_timers)
            rest = [PHASES.index(p) for p in (*untimed, "other")]
            target = step - phases.sum(axis=1)
            found = compensated[:, rest].sum(axis=1)
            scale = np.divide(target, found, out=np.zeros_like(target), where=found > 0)
            phases[:, rest] = compensated[:, rest] * scale[:, None]
            # Nothing left in the trace phases (all zero): the whole remainder is other.
            phases[found <= 0, _OTHER] = target[found <= 0]
            sources.update({p: PhaseSource.COMPENSATED for p in (*untimed, "other")})
        else:
            # Every marked phase timed (or no trace to see the rest): other is the remainder.
            phases[:, _OTHER] = step - phases.sum(axis=1)
            sources.setdefault("other", PhaseSource.TIMERS)
            for p in untimed:
                sources[p] = PhaseSource.TIMERS  # not seen: zero, counted in other
    recorded = traced.mean(axis=0) if have_trace else None
    figures = {p: PhaseFigure(float(phases[0, i]), sources[p],
                              stats.percentile_interval(phases[:, i]) if _spread(phases) else None,
                              None if recorded is None else float(recorded[i]))
               for i, p in enumerate(PHASES)}
    replicates = np.column_stack([step, phases])
    worst = max(sources.values(), key=list(PhaseSource).index)
    return Estimate(float(step[0]), stats.percentile_interval(step) if _spread(phases) else None,
                    figures, replicates, worst)


def _compensate(samples: PhaseSamples, in_trace: stats.Resampler,
                on_timers: stats.Resampler | None) -> np.ndarray:
    """Trace phases per replicate, not yet scaled: removing a uniform slowdown is the scaling."""
    recorded = in_trace.means(samples.traced_phase_ms)
    if on_timers is not None:
        # Time the step timers saw but the trace's step event did not (the loop around the
        # traced call, callbacks) is host time outside every phase: other.
        outside = on_timers.means(samples.traced_timer_step_ms) - recorded.sum(axis=1)
        recorded[:, _OTHER] += np.clip(outside, 0.0, None)
    return recorded


def _spread(phases: np.ndarray) -> bool:
    """An interval needs resamples that differ (one step, or identical steps, give none)."""
    return len(phases) > 1 and bool(np.ptp(phases, axis=0).max() > 0)


def replicates_of(b: Breakdown) -> np.ndarray | None:
    """A breakdown's bootstrap replicates: kept, or rebuilt from its samples (the fixed seed gives
    the very same) where they were left out to keep a gathered rank summary small."""
    if b.replicates is not None or b.bootstrap is None:
        return b.replicates
    return estimate(*b.bootstrap).replicates
