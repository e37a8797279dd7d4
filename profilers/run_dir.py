"""Creates run directories, writes their manifest and steps.csv atomically, and tells how a run
ended (a `running` run whose process is gone ended without saying so)."""
from __future__ import annotations

import csv
import io
import os
import secrets
import socket
import stat
import time
from collections.abc import Container
from datetime import datetime, timezone
from pathlib import Path

from gapscope.profilers import state_json, strict_json
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.written_traces import TF_PROFILER_ABORT, died_stopping_tf_profiler

MANIFEST = "manifest.json"
STEPS_CSV = "steps.csv"
# The state file of each kind of folder that holds several runs, written by workloads and
# read by analysis: one name for both sides.
MATRIX_STATE = "matrix.json"
AB_STATE = "ab.json"
SWEEP_STATE = "sweep.json"
# How a run ended: a capture of a user's loop stopped early (a signal, an exception) is
# `interrupted`, its steps kept and analysable; any other run that did not complete `failed`.
INTERRUPTED_STATUS = "interrupted"
ENDED = ("complete", "failed", INTERRUPTED_STATUS)
# The variant of a capture of the user's own loop (gapscope.capture, capture_keras, the trainer
# callbacks): the runs that append their steps.csv as they go, so a killed one keeps its steps.
USER_VARIANT = "user"
# What torch.compile did in a run (workloads.runners.dynamo_records writes it).
COMPILE_JSON = "compile.json"
# Where a run whose manifest could not be written (a full disk) leaves why it failed: an empty
# file needs no data block, so it is made even when the reason cannot be written into it.
FAILED_MARKER = "run.failed"
UNRECORDED_FAILURE = "failed, and the reason could not be written (disk full?)"

STEP_COLUMNS = ("step", "epoch", "warmup", "traced", "step_ms", "data_load_ms", "forward_ms",
                "backward_ms", "optimizer_ms", "loss", "minor_faults", "rss_mb")


def new_run_id(*parts: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return "-".join([*(p for p in parts if p), stamp, secrets.token_hex(2)])


_SYSTEM_FOLDERS = ("/dev", "/proc", "/sys")


def ensure_out_dir(out_dir: str | Path) -> Path:
    """The folder runs are written into, created if needed; one line (exit 2) when it cannot be:
    under a file, unwritable, on a read-only disk."""
    out_dir = Path(out_dir)
    # The kernel's own folders take files from root (trace --out /dev/full.json.gz wrote a
    # trace into /dev, in memory) and are never where output belongs.
    resolved = out_dir.resolve()
    system = next((Path(p) for p in _SYSTEM_FOLDERS if Path(p) in (resolved, *resolved.parents)), None)
    if system is not None:
        raise GapscopeInputError(f"output folder {out_dir}: inside {system}, the system's own "
                                 "folder: name a folder of yours")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # mkdir names neither the file nor the problem
        blocking = next((p for p in [out_dir, *out_dir.parents] if p.exists() and not p.is_dir()),
                        out_dir)
        raise GapscopeInputError(f"output folder {out_dir}: {blocking} is a file, not a folder") from None
    except OSError as exc:
        raise GapscopeInputError(f"output folder {out_dir}: cannot create it: "
                                 f"{exc.strerror or exc}") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise GapscopeInputError(f"output folder {out_dir}: not writable")
    return out_dir


def create_run_dir(out_dir: str | Path, *id_parts: str, attempts: int = 20) -> Path:
    """A fresh directory named `new_run_id(*id_parts)`; never reuses one, so no earlier run is
    overwritten. The id's random part is short (ids stay readable): on a clash, another id."""
    out_dir = ensure_out_dir(out_dir)
    for _ in range(attempts):
        run_dir = out_dir / new_run_id(*id_parts)
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
        except OSError as exc:
            raise GapscopeInputError(f"output folder {out_dir}: cannot create a run directory: "
                                     f"{exc.strerror or exc}") from None
    raise GapscopeInputError(f"output folder {out_dir}: no free run id after {attempts} tries")


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write beside the target, then rename: a reader sees the old file or the new, never half.
    The temporary file goes when the write fails (a full disk), so no `.tmp` is left behind."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_new(path: Path, data: bytes, exists: str = "use --force to replace it") -> None:
    """Write `data` to `path` only if nothing is there: written beside it, then linked into place
    (fails when the name exists, a symlink included), so no earlier file is ever overwritten;
    `exists`: what the one-line refusal advises."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links: exclusive create, written in place
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
    except FileExistsError:
        raise GapscopeInputError(f"{path}: exists; {exists}") from None
    finally:
        tmp.unlink(missing_ok=True)


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
            data = state_json.load(path)
            if not isinstance(data, dict):
                raise ValueError
        except (OSError, ValueError):
            data = {"schema": 1, "run_id": run_dir.name, "status": "running"}
        return cls(run_dir, data)

    @property
    def status(self) -> str | None:
        return self.data.get("status")

    def update(self, **fields) -> None:
        """Written first, kept after: an update cut short (a signal, a full disk) leaves the
        manifest in memory as it is on disk, so the end recorded next is the true one."""
        data = {**self.data, **fields}
        _write_json(self.path, data)
        self.data = data

    def finish(self, error: str | None = None, status: str | None = None) -> None:
        """Complete, or with `error` failed (or the `status` given: interrupted)."""
        self.update(status=(status or "failed") if error else "complete", error=error,
                    ended_at=utc_now())

    def save(self) -> None:
        _write_json(self.path, self.data)


def _write_json(path: Path, data: dict) -> None:
    write_atomic(path, strict_json.dumps(data, indent=2, default=str) + "\n")


def effective_status(manifest: dict) -> tuple[str, str | None]:
    """(status, error) of a run as it stands now: a run still `running` whose process is gone
    from this host was killed before it could record its end, and reads as failed: interrupted.
    A run of another host, or one that names no process, stays `running`: nothing here can tell."""
    status, error = manifest.get("status"), manifest.get("error")
    if status != "running":
        return str(status), error
    pid, host = manifest.get("pid"), manifest.get("host")
    if (isinstance(pid, int) and not isinstance(pid, bool) and host == socket.gethostname()
            and not _process_alive(pid, manifest.get("started_at"))):
        return "failed", f"interrupted (process {pid} on {host} is gone)"
    return "running", None


def mark_failed(run_dir: Path, error: str) -> bool:
    """Leaves FAILED_MARKER with `error` in `run_dir`; True if at least the marker exists."""
    path = Path(run_dir) / FAILED_MARKER
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:
        return False
    try:
        os.write(fd, error.encode(errors="replace")[:4096])
    except OSError:
        pass  # the empty marker still says the run failed
    finally:
        os.close(fd)
    return True


def marked_failure(run_dir: Path) -> str | None:
    """The failure a run left in FAILED_MARKER, or None when there is none."""
    path = Path(run_dir) / FAILED_MARKER
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = " ".join(handle.read(4096).decode(errors="replace").split())
    return text or UNRECORDED_FAILURE


def with_marked_failure(run_dir: Path, manifest: dict) -> dict:
    """`manifest` as the run would have written it: still `running` beside a FAILED_MARKER, it
    failed with the marker's reason."""
    if manifest.get("status") == "running":
        reason = marked_failure(run_dir)
        if reason is not None:
            return {**manifest, "status": "failed", "error": reason}
    return manifest


def status_of(run_dir: Path) -> tuple[str | None, str | None]:
    """effective_status of the run in `run_dir`; (None, why) when it has no readable manifest."""
    try:
        manifest = state_json.load(Path(run_dir) / MANIFEST)
    except (OSError, ValueError) as exc:
        return None, f"no readable manifest ({exc})"
    if not isinstance(manifest, dict):
        return None, "no readable manifest"
    manifest = with_marked_failure(Path(run_dir), manifest)
    status, error = effective_status(manifest)
    if manifest.get("status") == "running" and status == "failed" and died_stopping_tf_profiler(run_dir):
        return status, TF_PROFILER_ABORT  # its process died inside TensorFlow's profiler stop
    return status, error


def inside(folder: Path, stored) -> Path:
    """A run directory a state file (matrix.json, ab.json) names: only ever a folder directly
    inside `folder` (older state files stored a path; its last part is the run's name), so a
    state file cannot lead gapscope anywhere else, and the folder can move."""
    name = Path(str(stored)).name if stored else ""
    if name in ("", ".", ".."):
        raise GapscopeInputError(f"{folder}: state file names no run directory ({stored!r})")
    path = Path(folder) / name
    # A symlink there (a run swapped for a link to another) must not lead outside the folder.
    if path.is_symlink():
        target, root = os.path.realpath(path), os.path.realpath(folder)
        if os.path.commonpath([target, root]) != root:
            raise GapscopeInputError(f"{path}: a symlink to {target}, outside {folder}: not followed")
    return path

def _process_alive(pid: int, started_at) -> bool:
    """Whether process `pid` is the run's own: alive, not a zombie, and not a later process
    that reuses the number (it would have started after the run did)."""
    import psutil
    if pid <= 0:
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        created = process.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # access denied: it exists
        return True
    try:
        started = datetime.fromisoformat(started_at).timestamp()
    except (TypeError, ValueError):
        return True
    return created <= started + 1.0  # the process existed when the run began

def mark_rows(rows: list[dict], warmup_steps: int, traced: Container[int] | None,
              traced_key: str = "step") -> list[dict]:
    """Adds the warmup and traced flags that steps.csv and the breakdown read. `traced_key`:
    the row field the traced set holds (Keras traces whole calls: their first update).

    `traced` means "not an unprofiled step": besides the recorded window it takes the step (or
    call) right after it, which pays the profiler's teardown. Measured on the seed CNN (2-core
    CPU, 15 Keras runs): that step was slower than the run's unprofiled mean in 15 of 15 runs,
    by 15-45 %, while the plain loop has no such step; left in, it biased the step time."""
    for row in rows:
        row["warmup"] = row["step"] < warmup_steps
        row["traced"] = traced is not None and row[traced_key] in traced
    last = max((i for i, row in enumerate(rows) if row["traced"]), default=None)
    if last is not None and last + 1 < len(rows):
        after = rows[last + 1][traced_key]
        for row in rows[last + 1:]:
            if row[traced_key] != after:
                break
            row["traced"] = True
    return rows


def write_steps_csv(run_dir: Path, rows: list[dict]) -> Path:
    path = run_dir / STEPS_CSV
    write_atomic(path, steps_csv_text(rows))
    return path


def steps_csv_text(rows: list[dict], header: bool = True) -> str:
    """`rows` as steps.csv's lines; header=False for rows appended to a file that has it."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=STEP_COLUMNS, extrasaction="ignore")
    if header:
        writer.writeheader()
    for row in rows:
        writer.writerow({key: _cell(row.get(key)) for key in STEP_COLUMNS})
    return buffer.getvalue()


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return f"{value:.6f}"
    return value

