"""A sweep's figures per point and configuration, the ratio of each configuration to the first
with its interval, and where that ratio crosses 1 (who wins changes)."""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.model.run import load_measurement
from gapscope.analysis.measures.reliability import busy_warning
from gapscope.analysis.measures.stats import contains_one, mean_variance, paired_ratio, welch_difference
from gapscope.analysis.results.amortisation import payback
from gapscope.profilers import state_json
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.phases import PHASES
from gapscope.profilers.run_dir import SWEEP_STATE, inside

AXIS_NAMES = {"batch_size": "batch size", "width": "width"}


@dataclass
class ConfigPoint:
    """One configuration at one point: means over its repeats."""

    label: str
    step_ms: float
    step_ms_repeats: list[float]
    samples_per_s: float
    phase_share: dict[str, float]
    parameters: int | None
    ratio: float | None = None                  # step time / the first configuration's (paired)
    ratio_ci95: tuple[float, float] | None = None
    compile_ms: float | None = None             # its warm-up's excess over steady steps, mean
    # Against the first configuration: steps after which this one's extra one-time cost (its
    # compile beyond the first's) is paid back by its faster steps; None: it is not faster,
    # or costs nothing extra (pays_back says which).
    pays_after_steps: int | None = None
    pays_after_ci95: list[int] | None = None    # [fewest, most] steps, from the gain's interval
    # "after", "never" (slower beyond noise), "free" (no extra cost) or "not known" (the step
    # gap within noise, or a busy machine: no verdict either way)
    pays_back: str | None = None
    busy_loads: list[dict] = field(default_factory=list)  # its repeats' loads, where busy
    ratio_over_steps: float | None = None       # (compile + N steps) / the first's, with --over-steps N


@dataclass
class SweepPoint:
    value: float
    configs: list[ConfigPoint]


@dataclass
class Crossover:
    """Where a configuration's ratio to the first passes 1, between two swept values."""

    label: str
    low: float
    high: float
    at: float                  # interpolated on log scales of value and ratio
    certain: bool              # both neighbours' intervals exclude 1


@dataclass
class Gap:
    """A swept value with no figures: never measured (the sweep stopped first) or measured
    but not analysable. No conclusion is drawn across it."""

    value: float
    reason: str


@dataclass
class SweepResult:
    workload: str
    axis: str
    labels: list[str]
    repeats: int
    points: list[SweepPoint]
    crossovers: list[Crossover] = field(default_factory=list)
    # With the compile included: over `over_steps` steps from the start, each configuration's
    # total time against the first's, and where that ratio crosses 1.
    over_steps: int | None = None
    crossovers_over_steps: list[Crossover] = field(default_factory=list)
    folder: str = ""
    status: str = "complete"               # the sweep's own: complete | failed | running
    error: str | None = None
    gaps: list[Gap] = field(default_factory=list)
    # Why no verdict is drawn (runs measured on a busy machine: compare's gate), else None.
    inconclusive: str | None = None

    @property
    def axis_name(self) -> str:
        return AXIS_NAMES.get(self.axis, self.axis)

    def to_json_dict(self) -> dict:
        return asdict(self)


def sweep_result(folder: str | Path, over_steps: int | None = None) -> SweepResult:
    """The sweep's figures; `over_steps`: also the ratios of whole runs of that many steps,
    compile included (where compiling pays, at each point)."""
    folder = Path(folder)
    try:
        state = state_json.load(folder / SWEEP_STATE)
        workload, labels, axis = state["workload"], list(state["configs"]), state["axis"]
        source = folder / SWEEP_STATE
        points = [(state_json.number(p["value"], "a point's value", source, 1e-9, 1e9), str(p["ab"]))
                  for p in state["points"]]
        values = [state_json.number(v, "a swept value", source, 1e-9, 1e9)
                  for v in (state.get("values") or [v for v, _ in points])]
        status, error = str(state.get("status", "complete")), state.get("error")
        repeats = state_json.whole_number(state.get("repeats", 1), "repeats", source, 1)
    except state_json.StateFileError:
        raise
    except (OSError, ValueError, KeyError, TypeError):
        raise GapscopeInputError(f"{folder / SWEEP_STATE}: corrupt sweep state") from None
    if not points:
        raise GapscopeInputError(f"{folder}: the sweep has no finished point "
                                 f"({error or status})")
    measured, gaps = [], []
    for value, ab in points:
        try:
            measured.append(_point(value, inside(folder, ab), labels))
        except (GapscopeInputError, OSError) as exc:  # this point's failure, not the sweep's
            gaps.append(Gap(value, f"not analysable: {exc}"))
    finished = {v for v, _ in points}
    # sweep.json keeps no process id: "running" may be a sweep still going or one killed outright.
    stopped = (f"the sweep stopped ({error or status})" if status == "failed" else
               f"the sweep has not finished (status {status})" if status != "complete" else "not run")
    gaps += [Gap(v, f"not measured: {stopped}") for v in values if v not in finished]
    if not measured:
        raise GapscopeInputError(f"{folder}: no point of the sweep can be analysed: "
                                 + "; ".join(f"{g.value:g}: {g.reason}" for g in gaps))
    result = SweepResult(workload, axis, labels, repeats, measured, folder=str(folder),
                         status=status, error=error, gaps=sorted(gaps, key=lambda g: g.value))
    result.inconclusive = _busy(result)
    if result.inconclusive:  # no pay-back figure, nor "never", from step times that are no fact
        for point in measured:
            for c in point.configs[1:]:
                if c.pays_back in ("after", "never"):
                    c.pays_back, c.pays_after_steps, c.pays_after_ci95 = "not known", None, None
    result.crossovers = crossovers(result)
    if over_steps is not None:
        result.over_steps = over_steps
        for point in measured:
            _over_steps(point, over_steps)
        result.crossovers_over_steps = crossovers(result, "ratio_over_steps")
    return result


def _busy(result: SweepResult) -> str | None:
    """compare's busy gate over the whole sweep: the configurations (and how many of their runs)
    measured while other processes took the cores, in one warning; None on a quiet machine."""
    named, loads = [], []
    for index, label in enumerate(result.labels):
        busy = [x for p in result.points for x in p.configs[index].busy_loads]
        if busy:
            runs = sum(len(p.configs[index].step_ms_repeats) for p in result.points)
            named.append(f"{label} ({len(busy)} of {runs} runs)")
            loads += busy
    return busy_warning(named, loads) if named else None


def _point(value, ab_folder: Path, labels: list[str]) -> SweepPoint:
    per_config = load_measurement(ab_folder)
    figures, variances = [], []
    for label, runs in zip(labels, per_config):
        results = [breakdown(r) for r in runs]
        docs = [b.to_json_dict() for b in results]
        variances.append([mean_variance(b.step_times_ms) for b in results])
        steps = [d["step_ms"]["mean"] for d in docs]
        batch = runs[0].manifest.get("workload_spec", {}).get("batch_size")
        step = statistics.fmean(steps)
        compiles = [d["compile_ms"] for d in docs if d.get("compile_ms") is not None]
        figures.append(ConfigPoint(
            label, round(step, 6), steps, round(1000.0 * batch / step, 1) if batch and step else 0.0,
            {p: round(statistics.fmean(d["phases"][p]["share"] for d in docs), 4) for p in PHASES},
            runs[0].manifest.get("parameters"),
            compile_ms=round(statistics.fmean(compiles), 3) if len(compiles) == len(docs) else None,
            busy_loads=[b.busy_load for b in results if b.busy_load]))
    first = figures[0]
    for other, within in zip(figures[1:], variances[1:]):
        ratio, interval = paired_ratio(first.step_ms_repeats, other.step_ms_repeats)
        other.ratio = round(ratio, 4)
        other.ratio_ci95 = None if interval is None else (round(interval[0], 4), round(interval[1], 4))
        # The gain a step (first − other) over repeats, both sides' noise at both levels.
        gap = welch_difference(other.step_ms_repeats, first.step_ms_repeats, within, variances[0])
        _pays_back(first, other, gap)
    first.ratio = 1.0
    return SweepPoint(value, figures)


def _pays_back(first: ConfigPoint, other: ConfigPoint, gain_ci95=None) -> None:
    """other's one-time extra (its compile beyond the first's) ÷ its gain a step, with the
    interval the gain's gives (`gain_ci95`: first − other), as amortisation does for a pair."""
    if first.compile_ms is None or other.compile_ms is None:
        return
    found = payback(other.compile_ms - first.compile_ms, first.step_ms - other.step_ms, gain_ci95)
    other.pays_after_steps, other.pays_after_ci95 = found["steps"] or None, found["steps_ci95"]
    other.pays_back = ("free" if found["steps"] == 0 else "not known" if found["not_known"]
                       else "after" if found["steps"] else "never")


def _over_steps(point: SweepPoint, steps: int) -> None:
    """Each configuration's compile plus `steps` steady steps, against the first's."""
    first = point.configs[0]
    if first.compile_ms is None:
        return
    base = first.compile_ms + steps * first.step_ms
    for config in point.configs:
        if config.compile_ms is not None:
            config.ratio_over_steps = round((config.compile_ms + steps * config.step_ms) / base, 4)


def crossovers(result: SweepResult, ratio: str = "ratio") -> list[Crossover]:
    """For each configuration after the first: every pair of neighbouring points between which
    its ratio to the first (`ratio`: the steady steps', or over N steps with the compile)
    passes 1 (the winner changes there)."""
    found = []
    gaps = [g.value for g in result.gaps]
    for index, label in enumerate(result.labels[1:], start=1):
        series = [(p.value, p.configs[index]) for p in result.points]
        for (v0, c0), (v1, c1) in zip(series, series[1:]):
            if any(v0 < g < v1 for g in gaps):
                continue  # an unmeasured point between: the ratio may cross and cross back there
            r0, r1 = getattr(c0, ratio), getattr(c1, ratio)
            if not (r0 and r1) or (r0 - 1.0) * (r1 - 1.0) >= 0:
                continue
            x0, x1, y0, y1 = math.log(v0), math.log(v1), math.log(r0), math.log(r1)
            at = math.exp(x0 + (0.0 - y0) * (x1 - x0) / (y1 - y0))
            # Over N steps the compile, measured once a run, has no interval of its own.
            certain = ratio == "ratio" and all(_excludes_one(c.ratio_ci95) for c in (c0, c1))
            found.append(Crossover(label, v0, v1, round(at, 3), certain))
    return found


def _excludes_one(interval) -> bool:
    return interval is not None and not contains_one(interval)
