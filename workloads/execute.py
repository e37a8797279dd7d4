"""Child-process entry point: executes one run into its run directory and records how it ended.

Usage (by workloads.launch, not by hand): python -m workloads.execute RUN_DIR SETTINGS_JSON"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path

from analysis.summaries import write_after_run
from profilers import environment
from profilers.errors import GapscopeInputError
from profilers.run_dir import Manifest, write_steps_csv
from profilers.samplers import ResourceSampler
from workloads.registry import get_workload
from workloads.settings import RunSettings
from workloads.step_report import StepReporter

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


def execute(run_dir: Path, settings: RunSettings) -> int:
    spec = get_workload(settings.workload)
    manifest = Manifest.start(run_dir, {
        "run_id": run_dir.name, "workload": spec.name, "framework": settings.framework,
        "variant": settings.variant, "settings": settings.to_dict(),
        "warmup_steps": settings.warmup_steps, "workload_spec": _spec_fields(spec),
        "host": environment.host(), "device": None, "versions": None, "pid": os.getpid(),
    })
    try:
        runner = _runner(settings.framework)
        sampler = ResourceSampler() if settings.sample_resources else None
        with sampler or nullcontext(), StepReporter(settings.steps_per_execution):
            started = time.perf_counter()
            rows, facts = runner(spec, settings, run_dir)
            wall_s = time.perf_counter() - started
        write_steps_csv(run_dir, rows)
        if sampler is not None:
            sampler.write_csv(run_dir)
            facts["resources"] = sampler.summary()
        manifest.update(**facts, versions=environment.versions(), run_wall_s=round(wall_s, 3),
                        final_loss=rows[-1]["loss"] if rows else None)
        manifest.finish()
        write_after_run(run_dir)
        return 0
    except KeyboardInterrupt:
        manifest.update(versions=environment.versions())
        manifest.finish(error="interrupted")
        return 130
    except GapscopeInputError as exc:
        manifest.finish(error=str(exc))
        return EXIT_BAD_INPUT
    except Exception as exc:  # a failed run is a result: record it, then say so
        manifest.update(versions=environment.versions(), traceback=traceback.format_exc())
        manifest.finish(error=f"{type(exc).__name__}: {exc}")
        return EXIT_FAILED


def _runner(framework: str):
    """The framework's runner, imported only now: each imports its own framework."""
    if framework == "torch":
        from workloads.torch_runner import run_torch
        return run_torch
    if framework == "tf":
        from workloads.tf_runner import run_tf
        return run_tf
    from workloads.keras_runner import run_keras
    return run_keras


def _spec_fields(spec) -> dict:
    from dataclasses import asdict
    return asdict(spec)


def main(argv: list[str]) -> int:
    run_dir, settings_json = Path(argv[0]), argv[1]
    return execute(run_dir, RunSettings.from_dict(json.loads(settings_json)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
