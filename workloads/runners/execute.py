"""Child-process entry point: executes one run into its run directory and records how it ended.

Usage (by workloads.launch, not by hand): python -m workloads.runners.execute RUN_DIR SETTINGS_JSON"""
from __future__ import annotations

import json
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from gapscope.profilers.environment import omp_num_threads
from gapscope.profilers.machine_load import MachineLoad
from gapscope.profilers.run_lifecycle import exit_code_of, signals_interrupt, stop_with_parent
from gapscope.profilers.samplers import ResourceSampler
from gapscope.workloads.runners.after_run import RunWithViews
from gapscope.workloads.runners.malloc_keep import keep_freed_memory
from gapscope.workloads.registry import get_workload
from gapscope.workloads.settings import RunSettings
from gapscope.workloads.runners.step_report import StepReporter


def execute(run_dir: Path, settings: RunSettings, rank_fields: dict | None = None,
            process_group=nullcontext) -> int:
    """The run's exit code: 0 complete, 1 failed, 2 bad input, 130/143 stopped by SIGINT/SIGTERM
    (its manifest then says `failed: interrupted`). A rank of a distributed run (execute_rank)
    adds its `rank_fields` to the manifest and trains inside `process_group()`."""
    with signals_interrupt() as stop_request:
        try:
            settings.check_lengths()  # again where the workers fork: settings may come from anywhere
            # First: glibc's thresholds must be fixed before the run's own allocations move them.
            malloc = keep_freed_memory() if settings.malloc_keep else None
            spec = get_workload(settings.workload).sized(settings.batch_size, settings.width)
            run = RunWithViews.start(run_dir, {
                "workload": spec.name, "framework": settings.framework,
                "variant": settings.variant, "settings": settings.to_dict(),
                "warmup_steps": settings.warmup_steps, "workload_spec": _spec_fields(spec),
                "layers": _layer_fields(spec),
                "device": None, "versions": None, "omp_num_threads": omp_num_threads(),
                **({"malloc_settings": malloc} if malloc else {}), **(rank_fields or {}),
            })
        except BaseException as exc:  # no run to record (stopped, a full disk): the launcher does
            if not isinstance(exc, KeyboardInterrupt):
                print(f"gapscope: run not started: {type(exc).__name__}: {exc}", file=sys.stderr)
            return exit_code_of(exc)
        try:
            # Once the run can record its end: the SIGTERM this may send is an Interrupted.
            stop_with_parent()
            runner = _runner(settings.framework)
            sampler = ResourceSampler() if settings.sample_resources else None
            load = MachineLoad()
            with process_group(), sampler or nullcontext(), StepReporter(settings.steps_per_execution):
                started = time.perf_counter()
                with load:
                    rows, facts = runner(spec, settings, run_dir)
                wall_s = time.perf_counter() - started
            # Whether others shared the machine: a step time from a busy machine is no fact.
            facts["machine_load"] = load.summary
            peak = _gemm_peak(settings)  # after the steps: it cannot disturb them
            if peak is not None:
                facts["gemm_peak"] = peak
            if sampler is not None:
                sampler.write_csv(run_dir)
                facts["resources"] = sampler.summary()
            run.complete(rows, {**facts, "run_wall_s": round(wall_s, 3)})
            return 0
        except BaseException as exc:  # a failed run is a result: record it, then say so
            exc = stop_request.behind(exc)
            run.fail(None, {}, exc)
            if not isinstance(exc, KeyboardInterrupt):
                print(f"gapscope: run failed: {run.error or exc}", file=sys.stderr)
            return exit_code_of(exc)


def _runner(framework: str):
    """The framework's runner, imported only now: each imports its own framework."""
    if framework == "torch":
        from gapscope.workloads.runners.torch_runner import run_torch
        return run_torch
    if framework == "tf":
        from gapscope.workloads.runners.tf_runner import run_tf
        return run_tf
    from gapscope.workloads.runners.keras_runner import run_keras
    return run_keras


def _spec_fields(spec) -> dict:
    from dataclasses import asdict
    return asdict(spec)


def _gemm_peak(settings: RunSettings) -> dict | None:
    """The CPU's measured GEMM peak, for the layers' share of it: traced CPU runs only."""
    from gapscope.profilers.nvml import gpu_count
    if not settings.trace or settings.distributed or settings.device == "cuda" or \
            (settings.device == "auto" and gpu_count() > 0):
        return None
    from gapscope.workloads.runners.gemm_peak import machine_theoretical_peak, measured_peak
    try:
        # The theoretical peak beside the measured one: what the machine reports, named so.
        return {**measured_peak(settings.framework), "theoretical": machine_theoretical_peak()}
    except Exception:  # noqa: BLE001 - only a figure is lost, never the run
        return None


def _layer_fields(spec) -> list[dict] | None:
    """The layers' one naming and shapes: the analyzers' layer names and FLOP counts."""
    layers = spec.layers()
    return None if layers is None else [layer.to_dict() for layer in layers]


def main(argv: list[str]) -> int:
    run_dir, settings_json = Path(argv[0]), argv[1]
    return execute(run_dir, RunSettings.from_dict(json.loads(settings_json)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
