"""A run process as its launcher sees it: the environment it starts with, its signals forwarded
and its output read while it runs, and how it ended."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gapscope.profilers.environment import importing_this_gapscope
from gapscope.profilers.run_lifecycle import LAUNCHER_PID_ENV, STOP_SIGNALS, Interrupted
from gapscope.workloads.runners.step_report import parse

# After a forwarded signal the run process records its end (and torch.profiler may be writing
# its trace); one that has not exited by then is killed, and the launcher records the end.
GRACE_S = 30.0


@dataclass
class RunOutcome:
    run_dir: Path
    status: str
    error: str | None
    exit_code: int


class RunInterrupted(Interrupted):
    """The command was told to stop while a run was in flight; `outcome` says how that run
    ended: failed (interrupted), or complete if it had finished when the signal came."""

    def __init__(self, signum: int, outcome: RunOutcome):
        super().__init__(signum, f"run {outcome.run_dir.name}: {outcome.status}"
                         + (f" ({outcome.error})" if outcome.error else ""))
        self.outcome = outcome


def child_env() -> dict:
    """The environment of a run process (or of torchrun, which passes it on to its ranks)."""
    env = importing_this_gapscope(dict(os.environ))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env[LAUNCHER_PID_ENV] = str(os.getpid())
    return env


class StopRequest:
    """Stops the runs one thread launches as SIGTERM stops a command's, for a caller on another
    thread (a server whose request was cancelled), where no signal reaches: the run in flight
    records `failed: interrupted`, launch raises RunInterrupted, and no later run starts."""

    _bound = threading.local()

    def __init__(self):
        self.signum: int | None = None
        self._forwarders: list[_Forwarder] = []
        self._lock = threading.Lock()

    @classmethod
    def current(cls) -> "StopRequest | None":
        return getattr(cls._bound, "request", None)

    @contextlib.contextmanager
    def bound(self):
        """This request stands for the signals of the calling thread (the one that launches
        the runs) while the block runs."""
        StopRequest._bound.request = self
        try:
            yield self
        finally:
            StopRequest._bound.request = None

    def stop(self, signum: int = signal.SIGTERM) -> None:
        with self._lock:
            self.signum = signum
            forwarders = list(self._forwarders)
        for forwarder in forwarders:
            forwarder._received(signum, None)

    def _watch(self, forwarder: "_Forwarder") -> None:
        with self._lock:
            self._forwarders.append(forwarder)
            signum = self.signum
        if signum is not None:  # asked before this run started: it starts stopped
            forwarder._received(signum, None)


class _Forwarder:
    """While a run process runs, SIGINT and SIGTERM go to it instead of stopping this process
    at once; a second signal, or a child still there GRACE_S after the first, is killed. Off the
    main thread, where signals never arrive, the thread's StopRequest stands in for them."""

    def __init__(self):
        self.signum: int | None = None
        self._at = 0.0
        self._process: subprocess.Popen | None = None
        self._previous: dict = {}

    def __enter__(self) -> "_Forwarder":
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._received) for s in STOP_SIGNALS}
        request = StopRequest.current()
        if request is not None:
            request._watch(self)
        return self

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        if self._process is not None and self._process.poll() is None:
            self._kill()  # this process is leaving (an error here): the run goes with it
            self._process.wait()

    def _received(self, signum, frame) -> None:
        if self.signum is not None:
            self._kill()  # asked twice: stop now
            return
        self.signum, self._at = signum, time.monotonic()
        self._send(signum)

    def wait(self, process: subprocess.Popen, on_steps: Callable[[int], None],
             progress: Callable[[str], int | None] = parse) -> str:
        """The child's output, without its progress lines (those go to on_steps; `progress`
        tells them and their step count)."""
        self._process = process
        if self.signum is not None:  # it came before the child existed
            self._send(self.signum)
        lines: list[str] = []

        def read() -> None:
            for line in process.stdout:
                done = progress(line)
                if done is None:
                    lines.append(line)
                else:
                    on_steps(done)
        # Read on a thread: this one checks every second whether a stopped child overstays.
        reader = threading.Thread(target=read, name="gapscope-run-output", daemon=True)
        reader.start()
        while True:
            try:
                process.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                if self.signum is not None and time.monotonic() - self._at > GRACE_S:
                    self._kill()
        # A worker the child left behind may hold the pipe open: do not wait on it for long.
        reader.join(timeout=5.0)
        return "".join(lines)

    def _send(self, signum: int) -> None:
        if self._process is not None and self._process.poll() is None:
            try:
                self._process.send_signal(signum)
            except ProcessLookupError:
                pass

    def _kill(self) -> None:
        if self._process is None:
            return
        try:
            os.killpg(self._process.pid, signal.SIGKILL)  # its DataLoader workers too
        except (ProcessLookupError, PermissionError):
            pass



def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
