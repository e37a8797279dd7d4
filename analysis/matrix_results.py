"""The result table of a matrix: the blog's columns per row, plus the five phase shares and
each row's speed ratio to the baseline row."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from analysis.breakdown import breakdown_of
from analysis.readers.run_dir import locate, read_steps_csv
from profilers.errors import GapscopeInputError
from profilers.phases import PHASES


@dataclass
class MatrixRowResult:
    id: str
    status: str                       # complete | failed | skipped | missing
    config: str
    input: str
    framework: str
    variant: str
    nw: str
    spe: str
    reason: str | None = None
    run_dir: str | None = None
    device: str | None = None
    time_s: float | None = None        # all steps, compile and warm-up included (the blog's "time")
    steps: int | None = None
    steps_per_s: float | None = None
    epoch_time_s: list[float] = field(default_factory=list)
    epoch_loss: list[float] = field(default_factory=list)
    final_loss: float | None = None
    cpu_load_percent: float | None = None
    gpu_util_percent: float | None = None
    gpu_power_w: float | None = None
    gpu_energy_j: float | None = None
    compile_ms: float | None = None
    step_ms: float | None = None       # steady-state mean, from the breakdown
    phase_share: dict[str, float] = field(default_factory=dict)
    breakdown_source: str | None = None
    speed_ratio: float | None = None   # baseline time / this row's time: > 1 is faster


@dataclass
class MatrixResult:
    name: str
    description: str
    baseline: str
    device: str | None
    rows: list[MatrixRowResult]

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
        if row.time_s and reference.time_s:
            row.speed_ratio = round(reference.time_s / row.time_s, 3)
    device = next((r.device for r in rows if r.device), None)
    return MatrixResult(matrix.name, matrix.description, baseline, device, rows)


def _row_result(row, outcome) -> MatrixRowResult:
    result = MatrixRowResult(row.id, outcome.status, row.config, row.input, row.framework,
                             row.variant, row.nw, row.spe, outcome.reason, outcome.run_dir)
    if outcome.status != "complete":
        return result
    run_dir = Path(outcome.run_dir)
    found = locate(run_dir)
    manifest = found.manifest or {}
    rows = read_steps_csv(found.steps_csv)
    result.time_s = round(sum(r["step_ms"] for r in rows) / 1000.0, 3)
    result.steps = len(rows)
    result.steps_per_s = round(len(rows) / result.time_s, 2) if result.time_s else None
    epochs = sorted({r.get("epoch") or 0 for r in rows})
    result.epoch_time_s = [round(sum(r["step_ms"] for r in rows if (r.get("epoch") or 0) == e) / 1000, 3)
                           for e in epochs]
    result.epoch_loss = [round(statistics.fmean(r["loss"] for r in rows if (r.get("epoch") or 0) == e
                                                and r["loss"] is not None), 5) for e in epochs]
    tail = [r["loss"] for r in rows[-max(1, len(rows) // 10):] if r["loss"] is not None]
    result.final_loss = round(statistics.fmean(tail), 5) if tail else None
    resources = manifest.get("resources") or {}
    result.cpu_load_percent = resources.get("cpu_load_percent")
    result.gpu_util_percent = resources.get("gpu_util_percent")
    result.gpu_power_w = resources.get("gpu_power_w")
    result.gpu_energy_j = resources.get("gpu_energy_j")
    breakdown = breakdown_of(run_dir)
    doc = breakdown.to_json_dict()
    result.compile_ms = doc["compile_ms"]
    result.step_ms = doc["step_ms"]["mean"]
    result.phase_share = {p: doc["phases"][p]["share"] for p in PHASES}
    result.breakdown_source = doc["source"]
    result.device = manifest.get("device")
    return result
