"""Named matrices of runs (TOML data in workloads/matrices/, or a user's own file), run row by
row, each in its own process, resumable: a row already complete with the same settings is not
run again."""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable

from gapscope.profilers import environment, state_json, strict_json
from gapscope.profilers.errors import GapscopeInputError, UnsupportedVariantError
from gapscope.profilers.nvml import gpu_count
from gapscope.profilers.run_dir import (MATRIX_STATE, effective_status, ensure_out_dir, inside, status_of,
                               utc_now, write_atomic)
from gapscope.workloads.launch import RunInterrupted, launch
from gapscope.workloads.registry import get_workload, missing_extra
from gapscope.workloads.settings import RunSettings

MATRICES_DIR = Path(__file__).parent / "matrices"
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
    status: str            # complete | failed | skipped | refused | running | missing
    run_dirs: list[str] = field(default_factory=list)  # its runs, in repeat order; a failed one last
    reason: str | None = None

    @property
    def run_dir(self) -> str | None:
        return self.run_dirs[0] if self.run_dirs else None

    def stored(self) -> dict:
        """The row as matrix.json keeps it: its runs by name, inside the matrix folder, so
        that the folder can be moved and read from anywhere (analysis.model.run reads it so)."""
        return {"row_id": self.row_id, "status": self.status,
                "run_dir": [Path(d).name for d in self.run_dirs], "reason": self.reason}


def run_matrix(matrix: Matrix, out_dir: Path, base: RunSettings,
               on_row: Callable[[MatrixRow, RowOutcome | None], None] = lambda row, outcome: None,
               repeats: int = 1) -> list[RowOutcome]:
    """Runs every row until it has `repeats` complete runs; `on_row(row, None)` before a run,
    `(row, outcome)` after each row's turn in a round, run or not.

    Repeats are interleaved, row 1, row 2, ..., then row 1, row 2, ... again, each run a fresh
    process: repeat i of every row sees the same machine, so drift between processes shows in
    the ratios' intervals instead of biasing one row. `base` carries the run-length settings;
    rows add workload, framework and variant. The state file records each run as soon as it
    ends, so an interrupted matrix resumes where it stopped: a signal (RunInterrupted) records
    the run in flight as failed (interrupted) and ends the matrix there. A row that fails or is
    skipped runs no further repeats in this invocation; a resume tries it again."""
    if repeats < 1:
        raise GapscopeInputError(f"repeats must be 1 or more, got {repeats}")
    matrix_dir = ensure_out_dir(Path(out_dir) / matrix.name)
    state = _load_state(matrix_dir, matrix, base)
    state.update(pid=os.getpid(), host=environment.host(), started_at=utc_now(), repeats=repeats)
    cuda = gpu_count() > 0
    rows = {row.id: _recorded(matrix_dir, row.id, state["rows"].get(row.id), repeats)
            for row in matrix.rows}
    stopped = set()  # rows that failed or were skipped in this invocation
    for repeat in range(repeats):
        for row in matrix.rows:
            if row.id not in stopped and len(list(_complete_runs(rows[row.id]))) <= repeat:
                on_row(row, None)
                rows[row.id] = _run_turn(row, rows[row.id], base, matrix_dir, cuda, state, repeats)
                if rows[row.id].status in ("failed", "skipped", "refused"):
                    stopped.add(row.id)
            on_row(row, rows[row.id])
    return [rows[row.id] for row in matrix.rows]


def _run_turn(row: MatrixRow, outcome: RowOutcome, base: RunSettings, matrix_dir: Path,
              cuda: bool, state: dict, repeats: int) -> RowOutcome:
    """One more run of `row`; the row's record is saved before (in flight) and after."""
    kept = list(_complete_runs(outcome))
    # Marked in flight, so that a second matrix process into this folder is refused.
    state["rows"][row.id] = RowOutcome(row.id, "running", kept).stored()
    _save_state(matrix_dir, state)
    try:
        outcome = _run_row(row, base, matrix_dir, cuda, kept, repeats)
    except RunInterrupted as stop:
        state["rows"][row.id] = _with_run(row, kept, stop.outcome, repeats).stored()
        _save_state(matrix_dir, state)
        raise
    except BaseException:  # nothing ran (the out folder went, say): the row is as it was
        if outcome.status == "missing":
            del state["rows"][row.id]
        else:
            state["rows"][row.id] = outcome.stored()
        _save_state(matrix_dir, state)
        raise
    state["rows"][row.id] = outcome.stored()
    _save_state(matrix_dir, state)
    return outcome


def _run_row(row: MatrixRow, base: RunSettings, matrix_dir: Path, cuda: bool, kept: list[str],
             repeats: int) -> RowOutcome:
    if row.needs == "cuda" and not cuda:
        return RowOutcome(row.id, "skipped", reason=f"needs a CUDA GPU: {row.why}".rstrip(": "))
    if missing_extra(row.framework):  # keras-jax without JAX: the other rows still run
        return RowOutcome(row.id, "skipped", reason=missing_extra(row.framework))
    settings = RunSettings(**{**base.to_dict(), "workload": row.workload,
                              "framework": row.framework, "variant": row.variant})
    try:
        settings.with_variant(cuda)  # what launch checks first: here a row's, not the matrix's
    except UnsupportedVariantError as exc:
        return RowOutcome(row.id, "skipped", reason=str(exc))
    except GapscopeInputError as exc:
        # Settings that leave this row nothing to measure (spe512 at --steps 50: every step is
        # warm-up) refuse the row before its process starts; the other rows go on.
        return RowOutcome(row.id, "refused", reason=str(exc))
    return _with_run(row, kept, launch(settings, matrix_dir), repeats)


def _with_run(row: MatrixRow, kept: list[str], result, repeats: int) -> RowOutcome:
    """The row after one more run: complete once it has all its repeats, failed at once when a
    run failed (that run's directory last, for its reason), else still to be repeated."""
    runs = [*kept, str(result.run_dir)]
    if result.status != "complete":
        return RowOutcome(row.id, "failed", runs, result.error)
    return RowOutcome(row.id, "complete" if len(runs) >= repeats else "running", runs)


def _recorded(matrix_dir: Path, row_id: str, stored, repeats: int) -> RowOutcome:
    """A row as an earlier invocation left it, its runs checked on disk: a run gone, or no
    longer complete, does not count (it is run again)."""
    if not isinstance(stored, dict):
        return RowOutcome(row_id, "missing")
    outcome = _resolved(matrix_dir, {**stored, "row_id": row_id})
    complete = list(_complete_runs(outcome))
    if len(complete) >= repeats:
        return RowOutcome(row_id, "complete", complete)
    if outcome.status == "complete":
        outcome.status = "running"  # more repeats asked for this time, or a run went missing
    return outcome


def _complete_runs(outcome: RowOutcome):
    for run_dir in outcome.run_dirs:
        if status_of(Path(run_dir))[0] == "complete":
            yield run_dir


def _resolved(matrix_dir: Path, stored: dict) -> RowOutcome:
    """A stored row with its runs as paths inside the matrix folder (older states stored one
    path, relative to where the matrix ran: its name is what counts)."""
    names = stored.get("run_dir")
    names = names if isinstance(names, list) else [names] if names else []
    runs = []
    for name in names:
        try:
            runs.append(str(inside(matrix_dir, name)))
        except GapscopeInputError:
            continue  # a state file that names no run: nothing to follow
    return RowOutcome(str(stored.get("row_id")), str(stored.get("status")), runs,
                      stored.get("reason"))


def _load_state(matrix_dir: Path, matrix: Matrix, base: RunSettings) -> dict:
    """The state of an earlier run of this matrix, which must have used the same settings:
    rows measured with other step counts would not be comparable."""
    settings = {k: v for k, v in base.to_dict().items()
                if k not in ("workload", "framework", "variant")}
    path = matrix_dir / MATRIX_STATE
    if path.exists():
        try:
            state = state_json.load(path)
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
    write_atomic(matrix_dir / MATRIX_STATE, strict_json.dumps(state, indent=2) + "\n")


def matrix_outcomes(matrix: Matrix, out_dir: Path) -> list[RowOutcome]:
    """Outcomes recorded for a matrix in `out_dir`, in row order (rows never run: missing)."""
    matrix_dir = Path(out_dir) / matrix.name
    path = matrix_dir / MATRIX_STATE
    rows = state_json.load(path)["rows"] if path.exists() else {}
    return [_resolved(matrix_dir, rows[r.id]) if isinstance(rows.get(r.id), dict)
            else RowOutcome(r.id, "missing") for r in matrix.rows]


def record_row_failures(matrix: Matrix, out_dir: Path, reasons: dict[str, str]) -> None:
    """Rows whose runs completed but that could not be analysed (analysis.results.matrix_results says
    why) are failed rows in matrix.json too, with the reason and their runs kept: a resume does
    not run them again, since the same settings would make the same runs."""
    matrix_dir = Path(out_dir) / matrix.name
    path = matrix_dir / MATRIX_STATE
    if not reasons or not path.is_file():
        return
    state = state_json.load(path)
    for row_id, reason in reasons.items():
        if isinstance(state["rows"].get(row_id), dict):
            state["rows"][row_id].update(status="failed", reason=reason)
    _save_state(matrix_dir, state)
