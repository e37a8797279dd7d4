"""Where a job that can be captured on demand says so: one small file per process in a per-user
runtime folder (its pid, start time and run directory), and the request file in its run directory."""
from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

from gapscope.profilers import state_json, strict_json
from gapscope.profilers.run_dir import write_atomic

TRIGGER = signal.SIGUSR2  # SIGUSR1 is often the job's own (checkpoint-now in several launchers)
REQUEST = "ondemand-request.json"  # in the job's run directory, while a window is asked for
RUNTIME_ENV = "GAPSCOPE_RUNTIME_DIR"


def runtime_dir() -> Path:
    """`$GAPSCOPE_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/gapscope`, else a per-user temp folder."""
    chosen = os.environ.get(RUNTIME_ENV)
    if chosen:
        return Path(chosen)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "gapscope"
    return Path(tempfile.gettempdir()) / f"gapscope-{os.getuid()}"


def entry_path(pid: int) -> Path:
    return runtime_dir() / f"{pid}.json"


def register(run_dir: Path) -> Path:
    """Says that this process can be asked for a window, and where its run is."""
    import psutil
    folder = runtime_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = entry_path(os.getpid())
    write_atomic(path, strict_json.dumps({"pid": os.getpid(), "create_time": psutil.Process().create_time(),
                                          "run_dir": str(Path(run_dir).resolve()),
                                          "signal": TRIGGER.name}))
    return path


def unregister(path: Path) -> None:
    path.unlink(missing_ok=True)


def read_entry(pid: int) -> dict | None:
    """The registration of process `pid`, or None: none, unreadable, or left by an earlier
    process of the same number (it started before this one did)."""
    import psutil
    try:
        entry = state_json.load(entry_path(pid))
        created = psutil.Process(pid).create_time()
    except (OSError, ValueError, psutil.Error):  # StateFileError is a ValueError
        return None
    if not isinstance(entry, dict) or abs(float(entry.get("create_time", -1)) - created) > 1.0:
        return None
    return entry
