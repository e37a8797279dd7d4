"""The regression check for CI: a configuration's step time now against a stored baseline, with its interval."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from pathlib import Path

from gapscope.analysis.measures.stats import RepeatRatio, repeat_ratio
from gapscope.analysis.readers.step_rows import MAX_STEP_MS
from gapscope.profilers import state_json
from gapscope.profilers.errors import EXIT_INCONCLUSIVE, GapscopeInputError
from gapscope.profilers.state_json import StateFileError

BASELINE_FORMAT = "gapscope-baseline/1"
# A baseline is a few hundred bytes; anything far larger is not one.
MAX_BASELINE_BYTES = 1 << 20
MAX_REPEATS = 1000
# No training step is shorter than a microsecond (a kernel launch alone takes several).
MIN_STEP_MS = 1e-3


class Verdict(enum.StrEnum):
    REGRESSION = "regression"   # slower by more than the threshold, and beyond noise
    FASTER = "faster"           # faster by more than the threshold, and beyond noise
    UNCHANGED = "unchanged"     # within the threshold, or not told apart from noise
    INCONCLUSIVE = "inconclusive"  # measured on a busy machine: no verdict is a fact


# check's exit codes: CI fails on a regression; a busy runner's figure is neither pass nor fail.
EXIT_REGRESSION = 1


@dataclass(frozen=True)
class Baseline:
    """What a check compares against: per-process steady step means (ms) and the variance of
    each mean from its own steps, with what was measured and where."""

    config: str
    step_ms: list[float]
    within: list[float]
    settings: dict
    machine: dict
    busy: bool = False             # other processes took the cores while it was measured

    def to_json_dict(self) -> dict:
        return {"format": BASELINE_FORMAT, "config": self.config, "step_ms": self.step_ms,
                "within": self.within, "settings": self.settings, "machine": self.machine,
                "busy": self.busy}


@dataclass
class CheckResult:
    config: str
    baseline: Baseline
    step_ms: list[float]
    threshold: float
    ratio: RepeatRatio
    verdict: Verdict
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return {Verdict.REGRESSION: EXIT_REGRESSION,
                Verdict.INCONCLUSIVE: EXIT_INCONCLUSIVE}.get(self.verdict, 0)

    def line(self) -> str:
        r = self.ratio
        interval = "" if r.ci95 is None else f" [{r.ci95[0]:.3f}, {r.ci95[1]:.3f}]"
        now, then = _mean(self.step_ms), _mean(self.baseline.step_ms)
        return (f"check {self.config}: {self.verdict.upper()}: {r.ratio:.3f}x the baseline"
                f"{interval} ({now:.3f} vs {then:.3f} ms, {len(self.step_ms)} vs "
                f"{len(self.baseline.step_ms)} repeats; threshold {100 * self.threshold:g} %)")

    def to_json_dict(self) -> dict:
        r = self.ratio
        return {"config": self.config, "verdict": str(self.verdict), "exit_code": self.exit_code,
                "ratio": round(r.ratio, 4),
                "ratio_ci95": None if r.ci95 is None else [round(v, 4) for v in r.ci95],
                "threshold": self.threshold, "step_ms": self.step_ms,
                "baseline": self.baseline.to_json_dict(), "warnings": self.warnings}


def check(baseline: Baseline, config: str, step_ms: list[float], within: list[float],
          threshold: float, machine: dict, busy: bool = False) -> CheckResult:
    """Now against the baseline, as in asv: a regression is slower by more than `threshold`
    AND with an interval that excludes no change, so neither a small real drift nor a large
    noisy one fails CI. Where the two were measured differently, it is said. Measured while
    other processes took the cores (`busy`, now or for the baseline), no verdict stands: at
    load 10 an unchanged configuration read 7.4x slower [1.24, 44], and a planted slowdown
    read unchanged."""
    busy = busy or baseline.busy
    ratio = repeat_ratio(baseline.step_ms, step_ms, baseline.within, within)
    beyond_noise = ratio.ci95 is not None and not (ratio.ci95[0] <= 1.0 <= ratio.ci95[1])
    verdict = (Verdict.INCONCLUSIVE if busy else
               Verdict.REGRESSION if beyond_noise and ratio.ratio > 1 + threshold else
               Verdict.FASTER if beyond_noise and ratio.ratio < 1 / (1 + threshold) else
               Verdict.UNCHANGED)
    warnings = []
    if config != baseline.config:
        warnings.append(f"the baseline measured {baseline.config}, this check {config}")
    # OMP_NUM_THREADS changes a CPU step several-fold (threads that wait on each other).
    for key in ("host", "cpu", "torch", "tensorflow", "OMP_NUM_THREADS"):
        then, now = baseline.machine.get(key), machine.get(key)
        if then is not None and now is not None and then != now:
            warnings.append(f"{key} differs from the baseline's: {now} vs {then}")
    if ratio.ci95 is None:
        warnings.append("fewer than two repeats on a side: no interval, no verdict beyond noise")
    if baseline.busy:
        warnings.append("the baseline was measured on a busy machine: record it again on a quiet one")
    return CheckResult(config, baseline, step_ms, threshold, ratio, verdict, warnings)


def read_baseline(path: str | Path) -> Baseline:
    """The stored baseline, validated as a trace reader validates events: one line on any fault."""
    path = Path(path)
    try:
        doc = state_json.load(path, MAX_BASELINE_BYTES)
    except FileNotFoundError:
        raise GapscopeInputError(f"{path}: no baseline there; record one with --save") from None
    except OSError as exc:
        raise GapscopeInputError(f"{path}: not a gapscope baseline ({exc.strerror or exc})") from None
    except StateFileError as exc:
        raise GapscopeInputError(f"not a gapscope baseline: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != BASELINE_FORMAT:
        raise GapscopeInputError(f"{path}: not a gapscope baseline (format is not {BASELINE_FORMAT})")
    step_ms, within = doc.get("step_ms"), doc.get("within")
    if not (_positive_list(step_ms) and isinstance(within, list) and len(within) == len(step_ms)
            and all(_number(v) and v >= 0 for v in within)):
        raise GapscopeInputError(f"{path}: corrupt baseline: step_ms must be 1 to {MAX_REPEATS} "
                                 f"step times of {MIN_STEP_MS:g} to {MAX_STEP_MS:g} ms, within as many "
                                 "non-negative ones")
    config, settings, machine = doc.get("config"), doc.get("settings"), doc.get("machine")
    if not (isinstance(config, str) and config and isinstance(settings, dict)
            and isinstance(machine, dict)):
        raise GapscopeInputError(f"{path}: corrupt baseline: config, settings or machine missing")
    _check_settings(path, settings)
    busy = doc.get("busy", False)  # absent from baselines recorded before it was kept
    if not isinstance(busy, bool):
        raise GapscopeInputError(f"{path}: corrupt baseline: busy must be true or false")
    return Baseline(config, [float(v) for v in step_ms], [float(v) for v in within], settings,
                    {k: v for k, v in machine.items() if isinstance(v, (str, int, float))}, busy)


# The counts a run's settings hold, and their least: a baseline is shown, and compared, with
# them (batch_size "x" and steps -1 were kept silently). Absent or null: not recorded.
_COUNTS = {"steps": 1, "epochs": 1, "warmup_steps": 0, "trace_steps": 1, "batch_size": 1,
           "steps_per_execution": 1, "num_workers": 0, "dynamo_cache_limit": 1}


def _check_settings(path: Path, settings: dict) -> None:
    for name, least in _COUNTS.items():
        value = settings.get(name)
        if value is not None:
            state_json.whole_number(value, f"settings.{name}", f"{path}: corrupt baseline", least, 10**9)
    width = settings.get("width")
    if width is not None and not (_number(width) and width > 0):
        raise GapscopeInputError(f"{path}: corrupt baseline: settings.width must be a number above 0")


def _positive_list(values) -> bool:
    """1 to MAX_REPEATS step figures a step can take: 1e300 printed a 300-digit figure and 1e-9
    ms an '88268236869x' ratio, so a baseline holds what steps.csv may (step_rows)."""
    return (isinstance(values, list) and 1 <= len(values) <= MAX_REPEATS
            and all(_number(v) and MIN_STEP_MS <= v <= MAX_STEP_MS for v in values))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)
