"""Creates run directories and writes their manifest and steps.csv atomically."""
from __future__ import annotations

import csv
import io
import json
import os
import secrets
import time
from collections.abc import Container
from datetime import datetime, timezone
from pathlib import Path

from profilers import strict_json

MANIFEST = "manifest.json"
STEPS_CSV = "steps.csv"
STEP_COLUMNS = ("step", "epoch", "warmup", "traced", "step_ms", "data_load_ms", "forward_ms",
                "backward_ms", "optimizer_ms", "loss")


def new_run_id(*parts: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return "-".join([*(p for p in parts if p), stamp, secrets.token_hex(2)])


def create_run_dir(out_dir: str | Path, run_id: str) -> Path:
    """A fresh directory; never reuses one, so no earlier run is overwritten."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run_dir = out_dir / run_id
    run_dir.mkdir()  # FileExistsError on a clash rather than mixing two runs
    return run_dir


def write_atomic(path: Path, text: str) -> None:
    """Write beside the target, then rename: a reader sees the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Manifest:
    """The run's manifest.json, rewritten atomically at each status change."""

    def __init__(self, run_dir: Path, data: dict):
        self.path = run_dir / MANIFEST
        self.data = data

    @classmethod
    def start(cls, run_dir: Path, fields: dict) -> "Manifest":
        manifest = cls(run_dir, {"schema": 1, **fields, "status": "running", "error": None,
                                 "started_at": utc_now(), "ended_at": None})
        manifest.save()
        return manifest

    @classmethod
    def reopen(cls, run_dir: Path) -> "Manifest":
        """The manifest as the run left it, or a minimal one if the run died before writing it."""
        path = run_dir / MANIFEST
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {"schema": 1, "run_id": run_dir.name, "status": "running"}
        return cls(run_dir, data)

    @property
    def status(self) -> str | None:
        return self.data.get("status")

    def update(self, **fields) -> None:
        self.data.update(fields)
        self.save()

    def finish(self, error: str | None = None) -> None:
        self.update(status="failed" if error else "complete", error=error, ended_at=utc_now())

    def save(self) -> None:
        write_atomic(self.path, strict_json.dumps(self.data, indent=2, default=str) + "\n")


def mark_rows(rows: list[dict], warmup_steps: int, traced: Container[int] | None,
              traced_key: str = "step") -> list[dict]:
    """Adds the warmup and traced flags that steps.csv and the breakdown read. `traced_key`:
    the row field the traced set holds (Keras traces whole calls: their first update)."""
    for row in rows:
        row["warmup"] = row["step"] < warmup_steps
        row["traced"] = traced is not None and row[traced_key] in traced
    return rows


def write_steps_csv(run_dir: Path, rows: list[dict]) -> Path:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=STEP_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: _cell(row.get(key)) for key in STEP_COLUMNS})
    path = run_dir / STEPS_CSV
    write_atomic(path, buffer.getvalue())
    return path


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return f"{value:.6f}"
    return value


def effective_status(manifest: dict) -> tuple[str, str | None]:
    """(status, error) of a run as it stands now: a run still `running` whose process is gone
    from this host was killed without recording its end, and reads as failed: interrupted."""
    status, error = manifest.get("status"), manifest.get("error")
    if status != "running":
        return str(status), error
    pid, host = manifest.get("pid"), manifest.get("host")
    if isinstance(pid, int) and host == environment_host() and not _alive(pid):
        return "failed", f"interrupted (process {pid} on {host} is gone)"
    return "running", None


def environment_host() -> str:
    import socket
    return socket.gethostname()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
