"""Runs a workload's configurations over a range of batch or model sizes, each point an
interleaved A/B measurement, into one sweep folder (sweep.json lists the points)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from gapscope.profilers import strict_json
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.nvml import gpu_count
from gapscope.profilers.run_dir import SWEEP_STATE, create_run_dir, write_atomic
from gapscope.profilers.run_lifecycle import INTERRUPTED
from gapscope.workloads.ab import Config, RunFailed, measure
from gapscope.workloads.launch import RunInterrupted
from gapscope.workloads.settings import RunSettings

# The RunSettings field each axis sets, and its values' type.
AXES = {"batch_size": int, "width": float}


def parse_values(axis: str, text: str) -> list:
    """'16,64,256' as sorted distinct values of the axis; at least two, or there is no sweep."""
    kind = AXES[axis]
    try:
        values = sorted({kind(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise GapscopeInputError(f"{text!r}: {axis.replace('_', ' ')} values are comma-separated "
                                 f"{'whole numbers' if kind is int else 'numbers'}") from None
    if len(values) < 2:
        raise GapscopeInputError(f"{text!r}: a sweep needs two or more distinct values")
    return values


def sweep(workload: str, configs: list[str], axis: str, values: list, repeats: int,
          base: RunSettings, out_dir: str | Path,
          on_run: Callable = lambda value, repeat, config, outcome: None) -> Path:
    """Every point of the axis as an A/B measurement of `configs` (FRAMEWORK[:VARIANT]), points
    in order; returns the sweep folder. Every point's settings are checked before anything runs."""
    parsed = [Config.parse(f"{workload}:{c}") for c in configs]
    cuda = gpu_count() > 0
    for value in values:  # a bad value or variant refused now, not after half the sweep ran
        for config in parsed:  # each with its variant: spe512 at --steps 60 has no steady step
            replace(base, workload=workload, framework=config.framework, variant=config.variant,
                    **{axis: value}).with_variant(cuda)
    folder = create_run_dir(out_dir, "sweep", workload)
    state = {"workload": workload, "configs": [c.label for c in parsed], "axis": axis,
             "values": values, "repeats": repeats, "points": [], "status": "running"}
    _save(folder, state)
    for value in values:
        try:
            ab = measure(parsed, repeats, replace(base, **{axis: value}), folder,
                         lambda repeat, config, outcome: on_run(value, repeat, config, outcome))
        except (RunInterrupted, RunFailed) as exc:
            state.update(status="failed", error=f"{axis.replace('_', ' ')} {value:g}: "
                         f"{INTERRUPTED if isinstance(exc, RunInterrupted) else exc}")
            _save(folder, state)
            raise
        state["points"].append({"value": value, "ab": ab.name})
        _save(folder, state)
    state["status"] = "complete"
    _save(folder, state)
    return folder


def _save(folder: Path, state: dict) -> None:
    write_atomic(folder / SWEEP_STATE, strict_json.dumps(state, indent=2) + "\n")
