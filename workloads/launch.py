"""Starts each run in its own process (Keras fixes its backend at import; a crash or GPU memory
stays with its run) and makes sure the manifest says how the run ended."""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from profilers import strict_json
from profilers.nvml import gpu_count
from profilers.run_dir import Manifest, create_run_dir, new_run_id
from workloads.registry import check_framework, get_workload
from workloads.settings import RunSettings

_PROJECT_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class RunOutcome:
    run_dir: Path
    status: str
    error: str | None
    exit_code: int


def launch(settings: RunSettings, out_dir: str | Path) -> RunOutcome:
    # Refuse unknown names and impossible variants before creating anything.
    get_workload(settings.workload)
    check_framework(settings.framework)
    settings = settings.with_variant(cuda_available=gpu_count() > 0)
    run_dir = create_run_dir(out_dir, new_run_id(settings.workload, settings.framework,
                                                 settings.variant.replace(",", "+")))
    env = dict(os.environ)
    # The child imports the project's packages the same way this process did.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    command = [sys.executable, "-m", "workloads.execute", str(run_dir),
               strict_json.dumps(settings.to_dict())]
    try:
        completed = subprocess.run(command, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True)
        exit_code, output = completed.returncode, completed.stdout
    except KeyboardInterrupt:
        exit_code, output = 130, ""
    return _outcome(run_dir, exit_code, output)


def _outcome(run_dir: Path, exit_code: int, output: str) -> RunOutcome:
    (run_dir / "run.log").write_text(output)
    manifest = Manifest.reopen(run_dir)
    if manifest.status == "running":
        # The child died before it could record its end (killed, segfault, Ctrl-C).
        manifest.finish(error="interrupted" if exit_code in (130, -2) else
                        f"run process exited with code {exit_code}: {_last_line(output)}")
    return RunOutcome(run_dir, manifest.status, manifest.data.get("error"), exit_code)


def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
