"""`gapscope capture --pid`'s side: check the job's proof (registry.proven_entry), leave the
request in the private folder (one at a time), signal the job, wait for the window's run
directory to end, and withdraw the request when the wait ends otherwise."""
from __future__ import annotations

import os
import time
from pathlib import Path

from gapscope.ondemand.registry import Trigger, proven_entry, request_path
from gapscope.profilers import state_json, strict_json
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.run_dir import ENDED, MANIFEST, status_of


class WindowNotTraced(Exception):
    """The job ended, its window failed, or the time ran out: one line for the CLI."""


def ask_window(pid: int, steps: int, timeout_s: float, poll_s: float = 0.1) -> Path:
    """Asks process `pid` to trace its next `steps` steps; returns the window's run directory
    once it has ended. Bad input (no such process, a process that proved no gapscope capture, a
    window already under way) is a GapscopeInputError. A wait that ends otherwise (time out,
    Ctrl-C) withdraws the request: the job then closes the window it opened."""
    if not _alive(pid):
        raise GapscopeInputError(f"no process {pid}")
    with Trigger(pid) as trigger:
        entry = proven_entry(pid)
        run_dir = entry["run_dir"]
        window_dir = run_dir.parent / f"{run_dir.name}-window-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        request = request_path(pid)
        try:
            fd = os.open(request, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            raise GapscopeInputError(f"process {pid} is tracing a window asked for earlier "
                                     f"({request} exists): wait until it ends") from None
        mine = os.fstat(fd).st_ino
        with os.fdopen(fd, "w") as handle:
            handle.write(strict_json.dumps({"steps": steps, "window_dir": str(window_dir),
                                            "asked_by": os.getpid(), "token": entry["token"]}))
        try:
            trigger.send()
            return _wait(pid, window_dir, timeout_s, poll_s)
        except BaseException:
            _withdraw(request, mine)
            raise


def window_note(window_dir: Path, steps: int) -> str | None:
    """A note when the window holds fewer steps than asked (the job ended first)."""
    try:
        manifest = state_json.load(window_dir / MANIFEST)
        first, last = manifest["trace_window"]
        traced = int(last) - int(first) + 1
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if traced >= steps:
        return None
    return (f"the window holds {traced} of the {steps} steps asked for: the job ended "
            "(or its loop stopped stepping) before the rest")


def _withdraw(request: Path, mine: int) -> None:
    """Removes the request this command left (not one another command left after it)."""
    try:
        if os.stat(request).st_ino == mine:
            request.unlink()
    except FileNotFoundError:
        pass


def _wait(pid: int, window_dir: Path, timeout_s: float, poll_s: float) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, error = status_of(window_dir) if (window_dir / MANIFEST).exists() else (None, None)
        if status in ENDED and status != "failed":  # interrupted: the steps it recorded are read
            return window_dir
        if status == "failed":
            raise WindowNotTraced(f"process {pid}'s window failed ({error}); {window_dir} holds what it got")
        if not _alive(pid):
            raise WindowNotTraced(f"process {pid} ended before its window was traced")
        time.sleep(poll_s)
    raise WindowNotTraced(f"process {pid} traced no window of the steps asked for within "
                          f"{timeout_s:g} s (is its loop still stepping?); the request is withdrawn")


def _alive(pid: int) -> bool:
    import psutil
    try:
        return pid > 0 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # access denied: it exists
        return True
