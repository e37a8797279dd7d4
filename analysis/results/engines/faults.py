"""A test-only fault hook: GAPSCOPE_TEST_FAULT makes a chosen rank's worker die or raise, so the
fault paths run on real processes (a real SIGKILL, a real pool), never on a mock. Read where the
work is submitted and sent with it: a pool's workers fork from a server started with the
environment of its own time."""
from __future__ import annotations

import multiprocessing
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


def fault_spec() -> str | None:
    return os.environ.get(FAULT_ENV) or None


def inject_fault(key: int, spec: str | None) -> None:
    if not spec:
        return
    rank, _, action = spec.partition("=")
    if rank != str(key):
        return
    kind, _, marker = action.partition(":")
    # Only a worker process dies or hangs: the serial path runs ranks in the command's own process.
    if kind in ("kill", "hang") and (not marker or multiprocessing.parent_process() is None):
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
