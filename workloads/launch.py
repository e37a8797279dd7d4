"""Starts each run in its own process (Keras fixes its backend at import; a crash or GPU memory
stays with its run) and makes sure the manifest says how the run ended."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from profilers import strict_json
from profilers.nvml import gpu_count
from profilers.run_dir import create_run_dir
from profilers.run_lifecycle import INTERRUPTED, LAUNCHER_PID_ENV, STOP_SIGNALS, Interrupted, RunLifecycle
from workloads.registry import check_framework, get_workload
from workloads.settings import RunSettings
from workloads.runners.step_report import parse

_PROJECT_ROOT = Path(__file__).resolve().parent.parent
# After a forwarded signal the run process records its end (and torch.profiler may be writing
# its trace); one that has not exited by then is killed, and the launcher records the end.
GRACE_S = 30.0
_INTERRUPTED_CODES = (128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGINT, -signal.SIGTERM)


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


def launch(settings: RunSettings, out_dir: str | Path,
           on_steps: Callable[[int], None] = lambda done: None) -> RunOutcome:
    """Runs one run in a child process. SIGINT and SIGTERM received meanwhile are forwarded to
    the child, which records `failed: interrupted`; then RunInterrupted is raised, so a command
    stops rather than go on (a matrix does not start its next row). `on_steps(done)`: called as
    the child reports its progress (a few times a second)."""
    if settings.distributed:
        from workloads.distributed_launch import launch_job
        return launch_job(settings, out_dir, on_steps)
    # Refuse unknown names and impossible variants before creating anything.
    get_workload(settings.workload)
    check_framework(settings.framework)
    settings = settings.with_variant(cuda_available=gpu_count() > 0)
    run_dir = create_run_dir(out_dir, settings.workload, settings.framework,
                             settings.variant.replace(",", "+"))
    env = child_env()
    command = [sys.executable, "-m", "workloads.runners.execute", str(run_dir),
               strict_json.dumps(settings.to_dict())]
    with _Forwarder() as forwarder:
        # Its own process group: a terminal's Ctrl-C reaches the child once, through the
        # forwarder, not twice (which could cut its recording of the end short).
        process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   errors="replace", process_group=0)
        output = forwarder.wait(process, on_steps)
    outcome = _outcome(run_dir, process.returncode, output, forwarder.signum is not None)
    if forwarder.signum is not None:
        raise RunInterrupted(forwarder.signum, outcome)
    return outcome


def child_env() -> dict:
    """The environment of a run process (or of torchrun, which passes it on to its ranks)."""
    env = dict(os.environ)
    # The child imports the project's packages the same way this process did.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env[LAUNCHER_PID_ENV] = str(os.getpid())
    return env


class _Forwarder:
    """While a run process runs, SIGINT and SIGTERM go to it instead of stopping this process
    at once; a second signal, or a child still there GRACE_S after the first, is killed."""

    def __init__(self):
        self.signum: int | None = None
        self._at = 0.0
        self._process: subprocess.Popen | None = None
        self._previous: dict = {}

    def __enter__(self) -> "_Forwarder":
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._received) for s in STOP_SIGNALS}
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


def _outcome(run_dir: Path, exit_code: int, output: str, interrupted: bool) -> RunOutcome:
    try:
        (run_dir / "run.log").write_text(output)
    except OSError:
        pass  # a full disk: the manifest below matters more than the log
    run = RunLifecycle.reopen(run_dir)
    # The child died before it could record its end (killed, segfault, Ctrl-C).
    error = (INTERRUPTED if interrupted or exit_code in _INTERRUPTED_CODES else
             f"run process exited with code {exit_code}: {_last_line(output)}")
    if not run.end_unrecorded(error):
        return RunOutcome(run_dir, "failed", f"{error}; the manifest could not be written", exit_code)
    return RunOutcome(run_dir, run.status, run.error, exit_code)


def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
