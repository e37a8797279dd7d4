"""Starts each run in its own process (Keras fixes its backend at import; a crash or GPU memory
stays with its run) and makes sure the manifest says how the run ended."""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

from gapscope.profilers import strict_json
from gapscope.profilers.nvml import gpu_count
from gapscope.profilers.run_dir import create_run_dir
from gapscope.profilers.run_lifecycle import INTERRUPTED, RunLifecycle
from gapscope.workloads.child_process import RunInterrupted, RunOutcome, _Forwarder, _last_line, child_env
from gapscope.workloads.registry import check_framework, get_workload
from gapscope.workloads.settings import RunSettings

_INTERRUPTED_CODES = (128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGINT, -signal.SIGTERM)


def launch(settings: RunSettings, out_dir: str | Path,
           on_steps: Callable[[int], None] = lambda done: None) -> RunOutcome:
    """Runs one run in a child process. SIGINT and SIGTERM received meanwhile are forwarded to
    the child, which records `failed: interrupted`; then RunInterrupted is raised, so a command
    stops rather than go on (a matrix does not start its next row). `on_steps(done)`: called as
    the child reports its progress (a few times a second)."""
    if settings.distributed:
        from gapscope.workloads.distributed_launch import launch_job
        return launch_job(settings, out_dir, on_steps)
    # Refuse unknown names and impossible variants before creating anything.
    get_workload(settings.workload)
    check_framework(settings.framework)
    settings = settings.with_variant(cuda_available=gpu_count() > 0)
    run_dir = create_run_dir(out_dir, settings.workload, settings.framework,
                             settings.variant.replace(",", "+"))
    env = child_env()
    command = [sys.executable, "-m", "gapscope.workloads.runners.execute", str(run_dir),
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
