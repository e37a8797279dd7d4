"""`gapscope capture --pid`'s side: find the job's registration, leave the request in its run
directory (one at a time), signal it and wait for the window's run directory to end."""
from __future__ import annotations

import os
import time
from pathlib import Path

from gapscope.ondemand.registry import REQUEST, TRIGGER, read_entry, runtime_dir
from gapscope.profilers import strict_json
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.run_dir import status_of


class WindowNotTraced(Exception):
    """The job ended, or the time ran out, before the window was traced: one line for the CLI."""


def ask_window(pid: int, steps: int, timeout_s: float, poll_s: float = 0.1) -> Path:
    """Asks process `pid` to trace its next `steps` steps; returns the window's run directory
    once it has ended. Bad input (no such process, a process that registered no gapscope
    capture, a window already under way) is a GapscopeInputError."""
    if not _alive(pid):
        raise GapscopeInputError(f"no process {pid}")
    entry = read_entry(pid)
    if entry is None:
        raise GapscopeInputError(
            f"process {pid} runs no gapscope capture that can be asked for a window (none "
            f"registered in {runtime_dir()}): it must run gapscope.capture (torch), "
            "GapscopeCallback (Lightning) or capture_trainer (Hugging Face)")
    run_dir = Path(entry["run_dir"])
    window_dir = run_dir.parent / f"{run_dir.name}-window-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    request = run_dir / REQUEST
    try:
        fd = os.open(request, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise GapscopeInputError(f"process {pid} is tracing a window asked for earlier "
                                 f"({request} exists): wait until it ends") from None
    with os.fdopen(fd, "w") as handle:
        handle.write(strict_json.dumps({"steps": steps, "window_dir": str(window_dir),
                                        "asked_by": os.getpid()}))
    try:
        os.kill(pid, TRIGGER)
        return _wait(pid, window_dir, timeout_s, poll_s)
    except BaseException:
        if not (window_dir / "manifest.json").exists():
            request.unlink(missing_ok=True)  # never started: a later request may come
        raise


def _wait(pid: int, window_dir: Path, timeout_s: float, poll_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, _ = status_of(window_dir) if (window_dir / "manifest.json").exists() else (None, None)
        if status in ("complete", "failed"):
            return window_dir
        if not _alive(pid):
            raise WindowNotTraced(f"process {pid} ended before its window was traced"
                                  + (f" ({window_dir} holds what it got)" if status else ""))
        time.sleep(poll_s)
    raise WindowNotTraced(f"process {pid} traced no window of the steps asked for within "
                          f"{timeout_s:g} s (is its loop still stepping?)")


def _alive(pid: int) -> bool:
    import psutil
    try:
        return pid > 0 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # access denied: it exists
        return True
