"""From a Run to everything that explains it: breakdown, host/device attribution, kernels,
compile overhead, transfers and resource use (the per-run half of `gapscope compare`)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from gapscope.analysis.results.attribution import Attribution, attribute
from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.compile_overhead import CompileStats, compile_stats
from gapscope.analysis.results.layers import LayerBreakdown, layer_breakdown
from gapscope.analysis.measures.hardware import Hardware, hardware
from gapscope.analysis.measures.kernels import KernelStats, find_work, kernel_stats
from gapscope.analysis.measures.resources import ResourceStats, resource_stats
from gapscope.analysis.results.records import Breakdown
from gapscope.analysis.model.run import Run, load_run
from gapscope.analysis.measures.transfers import TransferStats, transfer_stats
from gapscope.profilers.errors import GapscopeInputError


@dataclass
class RunExplanation:
    breakdown: Breakdown
    attribution: Attribution
    kernels: KernelStats
    compile: CompileStats
    transfers: TransferStats
    resources: ResourceStats
    trace_file: str
    hardware: Hardware
    layers: LayerBreakdown | None = None  # each layer's forward and backward, where the trace names layers

    def to_json_dict(self) -> dict:
        # Layers only where the trace names any: the document of a run without them is unchanged.
        layers = {"layers": self.layers.to_json_dict()} if self.layers and self.layers.rows else {}
        return {"breakdown": self.breakdown.to_json_dict(),
                "attribution": self.attribution.to_json_dict(),
                "kernels": self.kernels.to_json_dict(),
                "compile": self.compile.to_json_dict(),
                "transfers": self.transfers.to_json_dict(),
                "resources": self.resources.to_json_dict(),
                "trace_file": self.trace_file,
                "hardware": self.hardware.to_json_dict(), **layers}


def explain(run: Run) -> RunExplanation:
    """Every per-run analyzer over the run's one trace and one phase timeline."""
    if run.trace is None:
        raise GapscopeInputError(f"{run.path}: holds no trace file; compare needs a traced run (--trace)")
    result = breakdown(run)
    timeline = run.timeline
    work = find_work(run.trace, timeline, run.hlo)
    work.steps = len(result.steps)  # traced optimizer updates, as the breakdown counts them
    found = hardware(run.manifest, run.trace)
    return RunExplanation(
        breakdown=result,
        attribution=attribute(work, timeline, result),
        kernels=kernel_stats(work),
        compile=compile_stats(run.trace, timeline, run.rows, run.warmup_steps, updates=work.steps),
        transfers=transfer_stats(work),
        resources=resource_stats(run.resources),
        trace_file=str(run.trace_file),
        hardware=found,
        layers=layer_breakdown(run, result.name, work.steps, work))


def explain_all(runs: list[Run]) -> list[RunExplanation]:
    """Each run's explanation; a run named twice is explained once, and each mention gets its
    own breakdown object, since compare labels each side on it."""
    done: dict[int, RunExplanation] = {}
    explained = []
    for run in runs:
        if id(run) in done:
            first = done[id(run)]
            explained.append(replace(first, breakdown=replace(first.breakdown)))
        else:
            explained.append(done.setdefault(id(run), explain(run)))
    return explained


def explain_run(path: str | Path) -> RunExplanation:
    return explain(load_run(path))

