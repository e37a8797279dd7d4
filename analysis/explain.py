"""From a PATH to everything that explains one run: breakdown, host/device attribution, kernels,
compile overhead, transfers and resource use (the per-run half of `gapscope compare`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analysis.attribution import Attribution, attribute
from analysis.compile_overhead import CompileStats, compile_stats
from analysis.hlo_metadata import HloModules
from analysis.kernels import KernelStats, find_work, kernel_stats
from analysis.load import breakdown_of, read_trace
from analysis.readers.resources_csv import RESOURCES_CSV, read_resources_csv
from analysis.readers.run_dir import locate, read_steps_csv
from analysis.resources import ResourceStats, resource_stats
from analysis.results import Breakdown
from analysis.timeline import phase_timeline
from analysis.transfers import TransferStats, transfer_stats
from profilers.errors import GapscopeInputError

XLA_DUMP_DIR = "xla_dump"


@dataclass
class RunExplanation:
    breakdown: Breakdown
    attribution: Attribution
    kernels: KernelStats
    compile: CompileStats
    transfers: TransferStats
    resources: ResourceStats
    trace_file: str

    def to_json_dict(self) -> dict:
        return {"breakdown": self.breakdown.to_json_dict(),
                "attribution": self.attribution.to_json_dict(),
                "kernels": self.kernels.to_json_dict(),
                "compile": self.compile.to_json_dict(),
                "transfers": self.transfers.to_json_dict(),
                "resources": self.resources.to_json_dict(),
                "trace_file": self.trace_file}


def explain_run(path: str | Path) -> RunExplanation:
    found = locate(path)
    if not found.trace_files:
        raise GapscopeInputError(f"{found.path}: holds no trace file; compare needs a traced run (--trace)")
    # The breakdown is exactly `gapscope breakdown`'s (same file, same rules); the analyzers
    # below use the same trace for what the breakdown does not keep.
    chosen = found.trace_files[0]
    trace = read_trace(chosen)
    breakdown = breakdown_of(found.path, source="trace", trace=trace)
    run_dir = found.path if found.path.is_dir() else None
    hlo = _hlo_modules(trace, run_dir)
    rows = read_steps_csv(found.steps_csv) if found.steps_csv else None
    warmup = int((found.manifest or {}).get("warmup_steps", 0))

    timeline = phase_timeline(trace)
    work = find_work(trace, timeline, hlo)
    work.steps = len(breakdown.steps)  # per optimizer update, as the breakdown counts
    resources = None
    if run_dir is not None and (run_dir / RESOURCES_CSV).exists():
        resources = read_resources_csv(run_dir / RESOURCES_CSV)
    return RunExplanation(
        breakdown=breakdown,
        attribution=attribute(work, timeline, breakdown),
        kernels=kernel_stats(work),
        compile=compile_stats(trace, timeline, rows, warmup, updates=len(breakdown.steps)),
        transfers=transfer_stats(work),
        resources=resource_stats(resources),
        trace_file=str(chosen))


def _hlo_modules(trace, run_dir: Path | None) -> HloModules | None:
    """HLO metadata for the XLA ops of a trace: the HloProto inside the profile, else the
    run's XLA text dump; None when the trace ran no XLA program."""
    if not any(e.hlo_op for e in trace.events):
        return None
    protos = trace.metadata.get("hlo_protos")
    if protos and "hlo_error" not in trace.metadata:  # the reader found them readable
        from analysis.readers.hlo_proto import read_hlo_protos
        return read_hlo_protos(protos)
    if run_dir is not None and (run_dir / XLA_DUMP_DIR).is_dir():
        from analysis.readers.hlo_text import read_hlo_dump_dir
        return read_hlo_dump_dir(run_dir / XLA_DUMP_DIR)
    return None
