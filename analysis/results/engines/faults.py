"""A test-only fault hook: GAPSCOPE_TEST_FAULT makes a chosen rank's worker die or raise, so the
fault paths run on real processes (a real SIGKILL, a real pool), never on a mock. Read where the
work is submitted and sent with it: a pool's workers fork from a server started with the
environment of its own time."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

# "RANK=kill:FILE" SIGKILLs the worker of RANK once (FILE, created first, marks it done);
# "RANK=raise" makes RANK raise every time, "RANK=raise:FILE" once; "RANK=hang:FILE" makes
# RANK's worker wait (FILE says it is waiting) for a Ctrl-C to cancel it.
FAULT_ENV = "GAPSCOPE_TEST_FAULT"
HANG_S = 600


class InjectedFault(RuntimeError):
    """The failure GAPSCOPE_TEST_FAULT asked for."""


def fault_spec() -> tuple[str, int] | None:
    """The hook's setting and the command's process id, sent with every rank's work."""
    spec = os.environ.get(FAULT_ENV)
    return (spec, os.getpid()) if spec else None


def inject_fault(key: int, fault: tuple[str, int] | None) -> None:
    if not fault:
        return
    spec, command = fault
    rank, _, action = spec.partition("=")
    if rank != str(key):
        return
    kind, _, marker = action.partition(":")
    # Only a worker dies or hangs, never the command (the serial path runs ranks in it): a
    # pool's, a Dask nanny's or a Ray raylet's worker alike.
    if kind in ("kill", "hang") and (not marker or os.getpid() == command):
        return
    if marker:
        try:
            Path(marker).touch(exist_ok=False)  # once: the next attempt goes on
        except FileExistsError:
            return
    if kind == "raise":
        raise InjectedFault(f"failure injected by {FAULT_ENV}")
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        time.sleep(HANG_S)
