"""Named matrices of runs (TOML data in workloads/matrices/, or a user's own file), run row by
row, each in its own process, resumable: a row already complete with the same settings is not
run again."""
from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

from profilers import environment
from profilers.errors import GapscopeInputError, UnsupportedVariantError
from profilers.nvml import gpu_count
from profilers.run_dir import MANIFEST, effective_status, ensure_out_dir, utc_now, write_atomic
from workloads.launch import RunInterrupted, launch
from workloads.registry import get_workload
from workloads.settings import RunSettings

MATRICES_DIR = Path(__file__).parent / "matrices"
STATE = "matrix.json"
# A matrix name becomes a folder under --out: a name, never a path (no "/", no "..").
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


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
    """A bundled matrix by name; a user's own TOML goes through load_matrix_file."""
    if name not in matrix_names():  # only the names listed: "../x" never reaches the disk
        raise GapscopeInputError(f"unknown matrix {name!r}; known: {', '.join(matrix_names())}"
                                 " (a TOML of your own: --file PATH)")
    return _parse((MATRICES_DIR / f"{name}.toml").read_text(), name)


def load_matrix_file(path: str | Path) -> Matrix:
    """A matrix from the user's own TOML file, in the bundled matrices' format."""
    path = Path(path)
    try:
        if not path.is_file():
            raise GapscopeInputError(f"{path}: not a file")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GapscopeInputError(f"{path}: cannot read it: {exc}") from None
    return _parse(text, str(path))


def _parse(text: str, source: str) -> Matrix:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GapscopeInputError(f"{source}: not valid TOML: {exc}") from None
    missing = [key for key in ("name", "description", "baseline", "rows") if key not in data]
    if missing:
        raise GapscopeInputError(f"{source}: missing {', '.join(missing)}")
    name = data["name"]
    if not isinstance(name, str) or not _PLAIN_NAME.fullmatch(name):
        raise GapscopeInputError(f"{source}: matrix name {name!r} must be a plain name "
                                 "(letters, digits, '.', '_', '-'): it names a folder under --out")
    known = {f.name for f in fields(MatrixRow)}
    if not isinstance(data["rows"], list) or not data["rows"]:
        raise GapscopeInputError(f"{source}: rows must be a non-empty list of [[rows]] tables")
    rows = []
    for row in data["rows"]:
        row = {"workload": data.get("workload", ""), **row} if isinstance(row, dict) else row
        if (not isinstance(row, dict) or set(row) - known or "id" not in row
                or not all(isinstance(v, str) for v in row.values())):
            raise GapscopeInputError(f"{source}: bad row {row!r}: string fields only, an id, "
                                     f"and no others than {', '.join(sorted(known))}")
        rows.append(MatrixRow(**row))
    if len({row.id for row in rows}) < len(rows):
        raise GapscopeInputError(f"{source}: row ids repeat")
    for row in rows:
        get_workload(row.workload)
    return Matrix(name, str(data["description"]), str(data.get("source", "")),
                  str(data["baseline"]), tuple(rows))


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
    it is known, so an interrupted matrix resumes where it stopped: a signal (RunInterrupted)
    records the row in flight as failed and ends the matrix there."""
    matrix_dir = ensure_out_dir(Path(out_dir) / matrix.name)
    state = _load_state(matrix_dir, matrix, base)
    state.update(pid=os.getpid(), host=environment.host(), started_at=utc_now())
    cuda = gpu_count() > 0
    outcomes = []
    for row in matrix.rows:
        done = state["rows"].get(row.id)
        if done and done["status"] == "complete" and _still_complete(matrix_dir, done):
            outcome = _resolved(matrix_dir, RowOutcome(**done))
        else:
            on_row(row, None)
            # Marked in flight, so that a second matrix process into this folder is refused.
            state["rows"][row.id] = asdict(RowOutcome(row.id, "running"))
            _save_state(matrix_dir, state)
            try:
                outcome = _run_row(row, base, matrix_dir, cuda)
            except RunInterrupted as stop:
                state["rows"][row.id] = _stored(_from_run(row, stop.outcome))
                _save_state(matrix_dir, state)
                raise
            except BaseException:
                del state["rows"][row.id]  # nothing ran: the row stays to do
                _save_state(matrix_dir, state)
                raise
            state["rows"][row.id] = _stored(outcome)
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
    return _from_run(row, result)


def _from_run(row: MatrixRow, result) -> RowOutcome:
    status = "complete" if result.status == "complete" else "failed"
    return RowOutcome(row.id, status, str(result.run_dir), result.error)


def _stored(outcome: RowOutcome) -> dict:
    """The row as matrix.json keeps it: its run directory by name, inside the matrix folder,
    so that the folder can be moved and read from anywhere."""
    return {**asdict(outcome), "run_dir": _run_name(outcome.run_dir)}


def _run_name(run_dir: str | None) -> str | None:
    """A run directory's name; also reads states that stored a path (relative to where the
    matrix ran): only its last part counts, which can only point inside the matrix folder."""
    name = Path(run_dir).name if run_dir else ""
    return name if name not in ("", ".", "..") else None


def _resolved(matrix_dir: Path, outcome: RowOutcome) -> RowOutcome:
    name = _run_name(outcome.run_dir)
    outcome.run_dir = str(matrix_dir / name) if name else None
    return outcome


def _still_complete(matrix_dir: Path, row: dict) -> bool:
    """A row recorded complete whose run directory is gone or no longer complete is run again."""
    name = _run_name(row.get("run_dir"))
    if name is None:
        return False
    try:
        manifest = json.loads((matrix_dir / name / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and effective_status(manifest)[0] == "complete"


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
        if not isinstance(state, dict) or not isinstance(state.get("rows"), dict):
            raise GapscopeInputError(f"{path}: corrupt matrix state; move it away to start over")
        if state.get("settings") != settings:
            raise GapscopeInputError(
                f"{matrix_dir} holds this matrix run with other settings; use another --out "
                "or the same settings to resume it")
        _refuse_if_in_use(matrix_dir, state)
        return state
    return {"matrix": matrix.name, "settings": settings, "rows": {}}


def _refuse_if_in_use(matrix_dir: Path, state: dict) -> None:
    """A row left `running` by a matrix process that is gone was interrupted: it is run again.
    One whose process still runs belongs to another matrix process writing this folder."""
    in_flight = [row_id for row_id, row in state["rows"].items()
                 if isinstance(row, dict) and row.get("status") == "running"]
    if not in_flight:
        return
    status, _ = effective_status({"status": "running", "pid": state.get("pid"),
                                  "host": state.get("host"), "started_at": state.get("started_at")})
    if status == "running":
        raise GapscopeInputError(
            f"{matrix_dir} is in use: process {state.get('pid')} on {state.get('host')} is "
            f"running row {in_flight[0]!r}; wait for it or use another --out")


def _save_state(matrix_dir: Path, state: dict) -> None:
    write_atomic(matrix_dir / STATE, json.dumps(state, indent=2) + "\n")


def matrix_outcomes(matrix: Matrix, out_dir: Path) -> list[RowOutcome]:
    """Outcomes recorded for a matrix in `out_dir`, in row order (rows never run: missing)."""
    matrix_dir = Path(out_dir) / matrix.name
    path = matrix_dir / STATE
    rows = json.loads(path.read_text())["rows"] if path.exists() else {}
    return [_resolved(matrix_dir, RowOutcome(**rows[r.id])) if r.id in rows
            else RowOutcome(r.id, "missing") for r in matrix.rows]
