"""Result objects of the breakdown: plain dataclasses that serialise to the JSON contract."""
from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from gapscope.analysis.measures.other_split import split_other
from gapscope.analysis.measures.stats import Interval, percentile
from gapscope.profilers.phases import MARKED_PHASES, PHASES
from gapscope.profilers.strict_json import finite

# Rounding of figures written to JSON: 1 ns is far below timer resolution.
_DIGITS = 6


class PhaseSource(enum.StrEnum):
    """How a phase's time was measured, best first."""

    TIMERS = "timers"                    # host timers around the phase, on unprofiled steps
    COMPENSATED = "trace, compensated"   # the trace's share, its profiler cost removed, scaled to the unprofiled step
    RAW = "trace, raw"                   # as the profiler recorded it, its own cost inside


@dataclass
class StepBreakdown:
    """One step; its five phases add up to step_ms by construction."""

    step: int
    step_ms: float
    phase_ms: dict[str, float]
    loss: float | None = None

    @classmethod
    def from_marked(cls, step: int, step_ms: float, marked_ms: dict[str, float],
                    loss: float | None = None) -> "StepBreakdown":
        phase_ms = {p: marked_ms.get(p, 0.0) for p in MARKED_PHASES}
        phase_ms["other"] = step_ms - sum(phase_ms.values())
        return cls(step, step_ms, phase_ms, loss)

    def to_json_dict(self) -> dict:
        """finite(asdict(self)), written out: asdict's deep copy took a third of a 10,000-step
        breakdown's time (every view reads the per-step rows)."""
        return {"step": finite(self.step), "step_ms": finite(self.step_ms),
                "phase_ms": finite(self.phase_ms), "loss": finite(self.loss)}


@dataclass
class PhaseFigure:
    """One phase's time per steady-state step."""

    ms: float
    source: PhaseSource
    ci95: Interval | None = None
    trace_ms: float | None = None   # as recorded under the profiler (mean over traced steps)


@dataclass
class Breakdown:
    """Per-phase time of one run's steady-state step: the step time from unprofiled steps
    where the run has them, each phase from the best source available."""

    source: PhaseSource                  # the weakest source among the phases
    steps: list[StepBreakdown]           # per-step detail of that source (timer steps, or traced steps as recorded)
    step_times_ms: list[float]           # the steps the step time comes from
    phases: dict[str, PhaseFigure]
    step_ci95: Interval | None = None
    unprofiled: bool = False             # step_times_ms ran without the profiler
    run_id: str | None = None
    workload: str | None = None
    framework: str | None = None
    variant: str | None = None
    device: str | None = None
    label: str | None = None
    compile_ms: float | None = None
    # How much longer traced steps took than untraced ones (step timers), in percent.
    trace_overhead_pct: float | None = None
    phase_sources: dict[str, str] = field(default_factory=dict)  # how each phase was found in the trace
    # The trace's `other` by what the host did meanwhile (OtherPart names): shares adding up to 1.
    other_shares: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # Reasons not to take the step time as a fact (a busy machine, steps in two levels):
    # each is also a note, so every view shows it; the JSON marks the figures unreliable.
    reliability_warnings: list[str] = field(default_factory=list)
    # The machine's load where other processes took the cores meanwhile (None: quiet): the
    # step time is then no fact about the configuration, and no verdict is drawn from it.
    busy_load: dict | None = None
    # Mean minor page faults of the steps step_times_ms come from (None: not counted).
    minor_faults_per_step: float | None = None
    # Bootstrap replicates (rows) of the step mean and the five phases (columns: step, *PHASES);
    # row 0 is the estimate itself. Kept for the intervals of differences between runs.
    replicates: np.ndarray | None = field(default=None, repr=False)
    # What rebuilds `replicates` (phase_estimate.replicates_of: the samples and the raw flag, with
    # the fixed seed) where a job's gathered rank summaries leave them out: 2 kB, not 96.
    bootstrap: tuple | None = field(default=None, repr=False)
    # What torch.compile did and why (compile_why.CompileWhy), where the run kept compile.json.
    compile_why: object | None = field(default=None, repr=False)
    # Memory per step and phase, creep and RSS (results.memory.figures.MemoryFigures), where
    # the run recorded allocator events or RSS.
    memory: object | None = field(default=None, repr=False)

    def self_check(self, tolerance_ms: float = 1e-6) -> None:
        """Assert that every step's phases add up to the step, and the phases to the mean
        step, as pyinstrument checks frames."""
        for s in self.steps:
            gap = s.step_ms - sum(s.phase_ms[p] for p in PHASES)
            assert abs(gap) <= tolerance_ms, f"step {s.step}: phases miss the step by {gap} ms"
        gap = self.step_stats()["mean"] - sum(f.ms for f in self.phases.values())
        assert abs(gap) <= tolerance_ms, f"phases miss the mean step by {gap} ms"
        assert all(math.isfinite(f.ms) for f in self.phases.values()), "a phase is not finite"

    def step_stats(self) -> dict[str, float]:
        times = sorted(self.step_times_ms)
        return {"mean": statistics.fmean(times), "median": statistics.median(times),
                "p10": percentile(times, 10), "p90": percentile(times, 90)}

    def phase_means(self) -> dict[str, float]:
        return {p: self.phases[p].ms for p in PHASES}

    @property
    def unidentified_phases(self) -> list[str]:
        return [p for p in MARKED_PHASES if self.phase_sources.get(p) == "not identified"]

    @property
    def name(self) -> str:
        """What tables call the run: its label (unique among the runs shown), else its id."""
        return self.label or self.run_id or "?"

    def to_json_dict(self) -> dict:
        """The stable `gapscope breakdown --format json` contract, plus per-step detail."""
        stats = {k: round(v, _DIGITS) for k, v in self.step_stats().items()}
        means = {p: round(self.phases[p].ms, _DIGITS) for p in MARKED_PHASES}
        # `other` is derived after rounding so the five figures written add up to the mean.
        means["other"] = round(stats["mean"] - sum(means.values()), _DIGITS)
        phases = {p: {"ms": means[p],
                      "share": round(means[p] / stats["mean"], _DIGITS) if stats["mean"] else 0.0,
                      "source": str(self.phases[p].source),
                      "ci95": _interval(self.phases[p].ci95),
                      "trace_ms": _round(self.phases[p].trace_ms),
                      "distortion_ms": None if self.phases[p].trace_ms is None
                      else round(self.phases[p].trace_ms - means[p], _DIGITS)}
                  for p in PHASES}
        phases["other"]["parts"] = split_other(means["other"], self.other_shares, _DIGITS)
        return {
            "run_id": self.run_id, "workload": self.workload, "framework": self.framework,
            "variant": self.variant, "device": self.device, "label": self.label,
            "source": str(self.source), "steps": len(self.step_times_ms),
            "step_ms": {**stats, "ci95": _interval(self.step_ci95)},
            "step_source": "unprofiled steps" if self.unprofiled else "traced steps (profiler cost inside)",
            "phases": phases,
            "compile_ms": _round(self.compile_ms, 3),
            "trace_overhead_pct": _round(self.trace_overhead_pct, 1),
            "phase_sources": {p: str(s) for p, s in self.phase_sources.items()},
            "unidentified_phases": self.unidentified_phases,
            "notes": self.notes,
            "reliable": not self.reliability_warnings,
            "reliability_warnings": self.reliability_warnings,
            "minor_faults_per_step": _round(self.minor_faults_per_step, 1),
            "per_step": [s.to_json_dict() for s in self.steps],
            **({"compile": self.compile_why.to_json_dict()} if self.compile_why else {}),
            **({"memory": self.memory.to_json_dict()} if self.memory is not None else {}),
        }


    def to_dict(self) -> dict:
        """The JSON contract (`gapscope breakdown --format json`), for notebooks."""
        return self.to_json_dict()

    def to_pandas(self):
        """A DataFrame of the five phases and the step: ms, ci95 bounds, share, source and
        the traced figure; pandas is imported only here (gapscope does not depend on it)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Breakdown.to_pandas() needs pandas: pip install pandas") from None
        data = self.to_json_dict()
        rows = [{"phase": p, "ms": f["ms"], "ci95_low_ms": (f["ci95"] or [None])[0],
                 "ci95_high_ms": (f["ci95"] or [None, None])[1], "share": f["share"],
                 "source": f["source"], "trace_ms": f["trace_ms"]}
                for p, f in data["phases"].items()]
        step = data["step_ms"]
        rows.append({"phase": "step", "ms": step["mean"], "ci95_low_ms": (step["ci95"] or [None])[0],
                     "ci95_high_ms": (step["ci95"] or [None, None])[1], "share": 1.0,
                     "source": data["step_source"], "trace_ms": None})
        return pd.DataFrame(rows).set_index("phase")


def _round(value: float | None, digits: int = _DIGITS) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def _interval(interval: Interval | None) -> list[float] | None:
    if interval is None or not all(math.isfinite(v) for v in interval):
        return None
    return [round(interval[0], _DIGITS), round(interval[1], _DIGITS)]
