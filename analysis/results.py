"""Result objects of the analyzers: plain dataclasses that round-trip through JSON."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from profilers.phases import MARKED_PHASES, PHASES

# Rounding of figures written to JSON: 1 ns is far below timer resolution.
_DIGITS = 6


@dataclass
class StepBreakdown:
    """One steady-state step; its five phases add up to step_ms by construction."""

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


@dataclass
class Breakdown:
    """Per-phase time of every steady-state step of one run or trace."""

    source: str  # "trace" or "timers"
    steps: list[StepBreakdown]
    run_id: str | None = None
    workload: str | None = None
    framework: str | None = None
    variant: str | None = None
    device: str | None = None
    compile_ms: float | None = None
    # How much longer traced steps took than untraced ones (step timers), in percent.
    trace_overhead_pct: float | None = None
    phase_sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def self_check(self, tolerance_ms: float = 1e-6) -> None:
        """Assert that every step's phases add up to the step, as pyinstrument checks frames."""
        for s in self.steps:
            gap = s.step_ms - sum(s.phase_ms[p] for p in PHASES)
            assert abs(gap) <= tolerance_ms, f"step {s.step}: phases miss the step by {gap} ms"

    @property
    def step_times_ms(self) -> list[float]:
        return [s.step_ms for s in self.steps]

    def step_stats(self) -> dict[str, float]:
        times = sorted(self.step_times_ms)
        return {"mean": statistics.fmean(times), "median": statistics.median(times),
                "p10": _percentile(times, 10), "p90": _percentile(times, 90)}

    def phase_means(self) -> dict[str, float]:
        return {p: statistics.fmean(s.phase_ms[p] for s in self.steps) for p in PHASES}

    @property
    def unidentified_phases(self) -> list[str]:
        return [p for p in MARKED_PHASES if self.phase_sources.get(p) == "not identified"]

    def to_json_dict(self) -> dict:
        """The stable `gapscope breakdown --format json` contract, plus per-step detail."""
        stats = {k: round(v, _DIGITS) for k, v in self.step_stats().items()}
        means = {p: round(v, _DIGITS) for p, v in self.phase_means().items() if p != "other"}
        # `other` is derived after rounding so the five figures written add up to the mean.
        means["other"] = round(stats["mean"] - sum(means.values()), _DIGITS)
        phases = {p: {"ms": means[p], "share": round(means[p] / stats["mean"], _DIGITS)
                      if stats["mean"] else 0.0} for p in PHASES}
        return {
            "run_id": self.run_id, "workload": self.workload, "framework": self.framework,
            "variant": self.variant, "device": self.device, "source": self.source,
            "steps": len(self.steps), "step_ms": stats, "phases": phases,
            "compile_ms": None if self.compile_ms is None else round(self.compile_ms, 3),
            "trace_overhead_pct": None if self.trace_overhead_pct is None
            else round(self.trace_overhead_pct, 1),
            "phase_sources": self.phase_sources,
            "unidentified_phases": self.unidentified_phases,
            "notes": self.notes,
            "per_step": [asdict(s) for s in self.steps],
        }

    @classmethod
    def from_json_dict(cls, data: dict) -> "Breakdown":
        steps = [StepBreakdown(**s) for s in data["per_step"]]
        fields = ("run_id", "workload", "framework", "variant", "device", "compile_ms",
                  "trace_overhead_pct", "phase_sources", "notes")
        return cls(data["source"], steps, **{k: data[k] for k in fields if k in data})


def _percentile(sorted_values: list[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), without numpy."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * pct / 100
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)
