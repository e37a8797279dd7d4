"""A test-only fault hook: GAPSCOPE_TEST_FAULT makes a chosen rank's worker die or raise, so the
fault paths run on real processes (a real SIGKILL, a real pool), never on a mock."""
from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

# "RANK=kill:FILE" SIGKILLs the worker of RANK once (FILE, created first, marks it done);
# "RANK=raise" makes RANK raise every time.
FAULT_ENV = "GAPSCOPE_TEST_FAULT"


class InjectedFault(RuntimeError):
    """The failure GAPSCOPE_TEST_FAULT asked for."""


def inject_fault(key: int) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    rank, _, action = spec.partition("=")
    if rank != str(key):
        return
    kind, _, marker = action.partition(":")
    if kind == "raise":
        raise InjectedFault(f"rank {key}: failure injected by {FAULT_ENV}")
    # Only a worker process dies: the serial path runs ranks in the command's own process.
    if kind == "kill" and marker and multiprocessing.parent_process() is not None:
        try:
            Path(marker).touch(exist_ok=False)  # once: the rebuilt pool's worker goes on
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)
