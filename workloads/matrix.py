"""Named matrices of runs (TOML data in workloads/matrices/), run row by row, each in its own
process, resumable: a row already complete with the same settings is not run again."""
from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from profilers import strict_json
from profilers.errors import GapscopeInputError, UnsupportedVariantError
from profilers.nvml import gpu_count
from profilers.run_dir import write_atomic
from workloads.launch import launch
from workloads.registry import get_workload
from workloads.settings import RunSettings

MATRICES_DIR = Path(__file__).parent / "matrices"
STATE = "matrix.json"


@dataclass(frozen=True)
class MatrixRow:
    id: str
    workload: str
    framework: str
    variant: str = "default"
    config: str = ""
    input: str = ""
    nw: str = ""
    spe: str = ""
    remarks: str = ""
    needs: str = ""   # "cuda": the row measures something only a GPU has
    why: str = ""     # why it needs that, shown when it is skipped


@dataclass(frozen=True)
class Matrix:
    name: str
    description: str
    source: str
    baseline: str
    rows: tuple[MatrixRow, ...]


def matrix_names() -> list[str]:
    return sorted(p.stem for p in MATRICES_DIR.glob("*.toml"))


def load_matrix(name: str) -> Matrix:
    path = MATRICES_DIR / f"{name}.toml"
    if not path.exists():
        raise GapscopeInputError(f"unknown matrix {name!r}; known: {', '.join(matrix_names())}")
    data = tomllib.loads(path.read_text())
    rows = tuple(MatrixRow(**{"workload": data.get("workload", ""), **row}) for row in data["rows"])
    for row in rows:
        get_workload(row.workload)
    return Matrix(data["name"], data["description"], data.get("source", ""), data["baseline"], rows)


@dataclass
class RowOutcome:
    row_id: str
    status: str            # complete | failed | skipped
    run_dir: str | None = None
    reason: str | None = None


def run_matrix(matrix: Matrix, out_dir: Path, base: RunSettings,
               on_row: Callable[[MatrixRow, RowOutcome | None], None] = lambda row, outcome: None
               ) -> list[RowOutcome]:
    """Runs every row not yet complete; `on_row(row, None)` before a row, `(row, outcome)` after.

    `base` carries the run-length settings (steps/epochs, trace window, device); rows add
    workload, framework and variant. The state file records each row's outcome as soon as
    it is known, so an interrupted matrix resumes where it stopped."""
    matrix_dir = out_dir / matrix.name
    matrix_dir.mkdir(parents=True, exist_ok=True)
    state = _load_state(matrix_dir, matrix, base)
    cuda = gpu_count() > 0
    outcomes = []
    for row in matrix.rows:
        done = state["rows"].get(row.id)
        if done and done["status"] == "complete":
            outcome = RowOutcome(**done)
        else:
            on_row(row, None)
            outcome = _run_row(row, base, matrix_dir, cuda)
            state["rows"][row.id] = asdict(outcome)
            _save_state(matrix_dir, state)
        on_row(row, outcome)
        outcomes.append(outcome)
    return outcomes


def _run_row(row: MatrixRow, base: RunSettings, matrix_dir: Path, cuda: bool) -> RowOutcome:
    if row.needs == "cuda" and not cuda:
        return RowOutcome(row.id, "skipped", reason=f"needs a CUDA GPU: {row.why}".rstrip(": "))
    settings = RunSettings(**{**base.to_dict(), "workload": row.workload,
                              "framework": row.framework, "variant": row.variant})
    try:
        result = launch(settings, matrix_dir)
    except UnsupportedVariantError as exc:
        return RowOutcome(row.id, "skipped", reason=str(exc))
    status = "complete" if result.status == "complete" else "failed"
    return RowOutcome(row.id, status, str(result.run_dir), result.error)


def _load_state(matrix_dir: Path, matrix: Matrix, base: RunSettings) -> dict:
    """The state of an earlier run of this matrix, which must have used the same settings:
    rows measured with other step counts would not be comparable."""
    settings = {k: v for k, v in base.to_dict().items()
                if k not in ("workload", "framework", "variant")}
    path = matrix_dir / STATE
    if path.exists():
        try:
            state = json.loads(path.read_text())
        except ValueError:
            raise GapscopeInputError(f"{path}: corrupt matrix state; move it away to start over") from None
        if state.get("settings") != settings:
            raise GapscopeInputError(
                f"{matrix_dir} holds this matrix run with other settings; use another --out "
                "or the same settings to resume it")
        return state
    return {"matrix": matrix.name, "settings": settings, "rows": {}}


def _save_state(matrix_dir: Path, state: dict) -> None:
    write_atomic(matrix_dir / STATE, strict_json.dumps(state, indent=2) + "\n")


def matrix_outcomes(matrix: Matrix, out_dir: Path) -> list[RowOutcome]:
    """Outcomes recorded for a matrix in `out_dir`, in row order (rows never run: missing)."""
    path = out_dir / matrix.name / STATE
    rows = json.loads(path.read_text())["rows"] if path.exists() else {}
    return [RowOutcome(**rows[r.id]) if r.id in rows else RowOutcome(r.id, "missing")
            for r in matrix.rows]
