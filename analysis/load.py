"""From a PATH to a Breakdown: picks the reader by what the path holds, then the analyzer."""
from __future__ import annotations

from pathlib import Path

from analysis.breakdown import (breakdown_from_timers, breakdown_from_trace, compile_ms,
                                per_update, trace_overhead_pct)
from profilers.errors import GapscopeInputError
from analysis.readers.run_dir import Located, locate, read_steps_csv
from analysis.results import Breakdown
from analysis.trace import Trace
from profilers.phases import MARKED_PHASES


def read_trace(path: Path) -> Trace:
    if path.name.endswith(".xplane.pb"):
        from analysis.readers.xplane import read_xplane
        return read_xplane(path)
    from analysis.readers.torch_trace import read_torch_trace
    return read_torch_trace(path)


def breakdown_of(path: str | Path, source: str = "auto", trace: Trace | None = None) -> Breakdown:
    """Breakdown of a run directory, a folder holding a trace, or a trace file.

    source: "trace", "timers", or "auto" (the trace where there is one: it sees inside
    compiled steps, which host timers cannot). `trace`: the path's trace file already read
    by a caller that analyses it further, so it is not read twice."""
    found = locate(path)
    _refuse_unfinished(found)
    rows = read_steps_csv(found.steps_csv) if found.steps_csv else None
    warmup = int((found.manifest or {}).get("warmup_steps", 0))
    inference = (found.manifest or {}).get("settings", {}).get("inference")
    runs_phases = ("data_load", "forward") if inference else MARKED_PHASES
    if source == "timers" or (source == "auto" and not found.trace_files):
        if rows is None:
            raise GapscopeInputError(f"{found.path}: holds no trace file and no steps.csv")
        result = breakdown_from_timers(rows, warmup, runs_phases)
    else:
        if not found.trace_files:
            raise GapscopeInputError(f"{found.path}: holds no torch trace or .xplane.pb file")
        chosen = found.trace_files[0]
        result = breakdown_from_trace(trace or read_trace(chosen), runs_phases)
        manifest = found.manifest or {}
        spe = manifest.get("settings", {}).get("steps_per_execution", 1)
        if spe > 1 and found.xplanes and chosen in found.xplanes:
            result = per_update(result, spe, manifest["steps_run"], manifest["steps_per_epoch"])
        if len(found.trace_files) > 1:
            result.notes.append(f"{len(found.trace_files)} trace files found; used {chosen.name}")
        if rows is not None:
            result.compile_ms = compile_ms(rows, warmup)
            result.trace_overhead_pct = trace_overhead_pct(rows, warmup)
            if result.trace_overhead_pct is not None:
                result.notes.append(f"traced steps took {result.trace_overhead_pct:+.0f}% against "
                                    "untraced ones (step timers): the profiler's own cost")
    _label(result, found)
    return result


def _refuse_unfinished(found: Located) -> None:
    manifest = found.manifest
    if manifest is None:
        return
    status = manifest.get("status")
    if status == "failed":
        raise GapscopeInputError(f"run {manifest['run_id']} failed: {manifest.get('error')}")
    if status != "complete":
        raise GapscopeInputError(
            f"run {manifest['run_id']} did not finish (status {status!r}): interrupted or still running")


def _label(result: Breakdown, found: Located) -> None:
    manifest = found.manifest or {}
    result.run_id = manifest.get("run_id") or found.path.name
    result.workload = manifest.get("workload")
    result.framework = manifest.get("framework") or _framework_from_files(found)
    result.variant = manifest.get("variant")
    result.device = manifest.get("device")


def _framework_from_files(found: Located) -> str | None:
    if found.torch_traces:
        return "torch"
    return "tensorflow" if found.xplanes else None
