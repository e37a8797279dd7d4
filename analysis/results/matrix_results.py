"""The result table of a matrix: the blog's columns per row, plus the five phase shares and
each row's step-time ratio to the baseline row, with its interval over interleaved repeats."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.model.run import load_run
from gapscope.analysis.measures.stats import paired_ratio
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.phases import PHASES

RATIO_DIRECTION = "row / baseline"
# The reason's prefix for a row whose runs completed but could not be analysed.
UNANALYSABLE = "runs complete, not analysable"
# Figures averaged over a row's repeats (each run's own figure first, then the mean).
_MEANS = ("time_s", "steps_per_s", "final_loss", "cpu_load_percent", "gpu_util_percent",
          "gpu_power_w", "gpu_energy_j", "compile_ms", "step_ms")


@dataclass
class MatrixRowResult:
    id: str
    status: str                       # complete | failed | skipped | refused | running | missing
    config: str
    input: str
    framework: str
    variant: str
    nw: str
    spe: str
    reason: str | None = None
    run_dir: str | None = None
    run_dirs: list[str] = field(default_factory=list)  # one per repeat
    device: str | None = None
    time_s: float | None = None        # all steps, compile and warm-up included (the blog's "time")
    steps: int | None = None
    steps_per_s: float | None = None
    epoch_time_s: list[float] = field(default_factory=list)
    epoch_loss: list[float | None] = field(default_factory=list)  # None: no loss (Keras predict)
    final_loss: float | None = None
    cpu_load_percent: float | None = None
    gpu_util_percent: float | None = None
    gpu_power_w: float | None = None
    gpu_energy_j: float | None = None
    compile_ms: float | None = None
    step_ms: float | None = None       # steady-state mean from unprofiled steps, mean over repeats
    step_ms_repeats: list[float] = field(default_factory=list)
    phase_share: dict[str, float] = field(default_factory=dict)
    breakdown_source: str | None = None
    step_ratio: float | None = None    # this row's step / the baseline row's: > 1 is slower
    step_ratio_ci95: list[float] | None = None  # over paired repeats; None for one repeat


@dataclass
class MatrixResult:
    name: str
    description: str
    baseline: str
    device: str | None
    rows: list[MatrixRowResult]
    repeats: int = 1
    ratio: str = RATIO_DIRECTION

    def to_json_dict(self) -> dict:
        return asdict(self)


def matrix_result(matrix, outcomes, baseline: str | None = None) -> MatrixResult:
    """`matrix` and `outcomes` as workloads.matrix gives them; `baseline`: a row id."""
    baseline = baseline or matrix.baseline
    if baseline not in {r.id for r in matrix.rows}:
        raise GapscopeInputError(f"no row {baseline!r} in matrix {matrix.name}")
    rows = [_row_result(row, outcome) for row, outcome in zip(matrix.rows, outcomes)]
    reference = next(r for r in rows if r.id == baseline)
    for row in rows:
        _ratio(row, reference)
    device = next((r.device for r in rows if r.device), None)
    repeats = max((len(r.step_ms_repeats) for r in rows), default=1) or 1
    return MatrixResult(matrix.name, matrix.description, baseline, device, rows, repeats)


def _ratio(row: MatrixRowResult, reference: MatrixRowResult) -> None:
    """Repeat i of the row against repeat i of the baseline: they ran side by side in time
    (interleaved), so the ratio's interval carries the drift between processes."""
    if not row.step_ms_repeats or not reference.step_ms_repeats:
        return
    ratio, interval = paired_ratio(reference.step_ms_repeats, row.step_ms_repeats)
    row.step_ratio = round(ratio, 4)
    row.step_ratio_ci95 = None if interval is None else [round(x, 4) for x in interval]


def _row_result(row, outcome) -> MatrixRowResult:
    result = MatrixRowResult(row.id, outcome.status, row.config, row.input, row.framework,
                             row.variant, row.nw, row.spe, outcome.reason, outcome.run_dir,
                             list(outcome.run_dirs))
    if outcome.status != "complete":
        return result
    try:
        runs = [_run_result(result, Path(run_dir)) for run_dir in outcome.run_dirs]
    except (GapscopeInputError, OSError) as exc:
        # This row's runs cannot be analysed (all warm-up, a corrupt or vanished file): the
        # row's failure, not the matrix's. The other rows keep their figures and ratios.
        result.status, result.reason = "failed", f"{UNANALYSABLE}: {exc}"
        return result
    first = runs[0]
    for name in _MEANS:
        values = [getattr(r, name) for r in runs if getattr(r, name) is not None]
        setattr(result, name, round(statistics.fmean(values), 5) if values else None)
    result.step_ms_repeats = [r.step_ms for r in runs]
    result.phase_share = {p: round(statistics.fmean(r.phase_share[p] for r in runs), 4)
                          for p in PHASES}
    result.steps, result.epoch_loss = first.steps, first.epoch_loss
    result.epoch_time_s = first.epoch_time_s if len(runs) == 1 else [
        round(statistics.fmean(times), 3) for times in zip(*(r.epoch_time_s for r in runs))]
    result.breakdown_source, result.device = first.breakdown_source, first.device
    return result


def _run_result(row: MatrixRowResult, run_dir: Path) -> MatrixRowResult:
    """One run's figures, in a row of their own."""
    result = MatrixRowResult(row.id, row.status, row.config, row.input, row.framework,
                             row.variant, row.nw, row.spe)
    run = load_run(run_dir)
    rows, manifest = run.rows or [], run.manifest
    result.time_s = round(sum(r["step_ms"] for r in rows) / 1000.0, 3)
    result.steps = len(rows)
    result.steps_per_s = round(len(rows) / result.time_s, 2) if result.time_s else None
    epochs = sorted({r.get("epoch") or 0 for r in rows})
    result.epoch_time_s = [round(sum(r["step_ms"] for r in rows if (r.get("epoch") or 0) == e) / 1000, 3)
                           for e in epochs]
    result.epoch_loss = [_mean_loss(r for r in rows if (r.get("epoch") or 0) == e) for e in epochs]
    result.final_loss = _mean_loss(rows[-max(1, len(rows) // 10):])
    resources = manifest.get("resources") or {}
    result.cpu_load_percent = resources.get("cpu_load_percent")
    result.gpu_util_percent = resources.get("gpu_util_percent")
    result.gpu_power_w = resources.get("gpu_power_w")
    result.gpu_energy_j = resources.get("gpu_energy_j")
    doc = breakdown(run).to_json_dict()
    result.compile_ms = doc["compile_ms"]
    result.step_ms = doc["step_ms"]["mean"]
    result.phase_share = {p: doc["phases"][p]["share"] for p in PHASES}
    result.breakdown_source = doc["source"]
    result.device = manifest.get("device")
    return result


def _mean_loss(rows) -> float | None:
    """Mean of the losses the steps recorded; None where they recorded none, as a Keras
    predict (inference) does: it computes no loss."""
    losses = [r["loss"] for r in rows if r["loss"] is not None]
    return round(statistics.fmean(losses), 5) if losses else None
