"""Scaling between a run and a job of the same workload (1 process against N, or N against M):
the scaling efficiency and where the step gap went, as per-phase deltas of the time ranks spend
not waiting, plus exposed communication, plus skew (what the slowest rank of each step costs
beyond the mean rank), parts that add up to the gap exactly."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gapscope.analysis.results.compare import PhaseGap
from gapscope.analysis.results.distributed_breakdown import JobBreakdown, mean_of
from gapscope.analysis.results.phase_estimate import replicates_of
from gapscope.analysis.results.records import Breakdown
from gapscope.analysis.measures.stats import Interval, contains_one, percentile_interval
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.phases import PHASES

PARTS = PHASES + ("communication", "skew")
_DIGITS = 6


@dataclass
class Side:
    """A run or a job as job-level figures: one process is a job of one rank."""

    label: str
    run_id: str
    workload: str | None
    world_size: int
    step_ms: float                      # the job step (slowest rank per step)
    step_ci95: Interval | None
    step_replicates: np.ndarray | None  # bootstrap replicates of the step mean
    parts: dict[str, float]             # PARTS, adding up to step_ms
    part_replicates: dict[str, np.ndarray]
    batch_size: int | None              # per rank
    threads: str | None = None          # environment.threads_of each process (None: not recorded)
    bound: str | None = None            # why step_ms is only a lower bound (ranks missing)

    @property
    def samples_per_step(self) -> int | None:
        return None if self.batch_size is None else self.batch_size * self.world_size


def run_side(b: Breakdown, batch_size: int | None, threads: str | None = None) -> Side:
    parts = {p: b.phases[p].ms for p in PHASES}
    parts.update(communication=0.0, skew=0.0)
    reps = {} if b.replicates is None else {p: b.replicates[:, 1 + i] for i, p in enumerate(PHASES)}
    return Side(b.name, b.run_id or "", b.workload, 1, b.step_stats()["mean"], b.step_ci95,
                None if b.replicates is None else b.replicates[:, 0], parts, reps, batch_size, threads)


def job_side(jb: JobBreakdown, batch_size: int | None, threads: str | None = None) -> Side:
    # Rank by rank, each rank's replicates rebuilt once: a job's are never all held at once.
    reps = mean_of(None if (r := replicates_of(b)) is None
                   else np.column_stack([r[:, 1 + i] - w.get(p, 0.0) for i, p in enumerate(PHASES)])
                   for b, w in zip(jb.ranks, jb.wait_ms))
    reps = {} if reps is None else {p: reps[:, i] for i, p in enumerate(PHASES)}
    bound = None if jb.complete else (f"{jb.label}: {len(jb.ranks)} of {jb.world_size} ranks "
                                      "present: its job step is a lower bound, and so the gap")
    return Side(jb.label, jb.job_id, jb.ranks[0].workload, jb.world_size, jb.job_step_ms,
                jb.job_step_ci95, jb.job_step_replicates, jb.decomposition(), reps, batch_size,
                threads, bound)


@dataclass
class Scaling:
    a: Side
    b: Side
    gap_ms: float                       # b.step - a.step = the sum of the part deltas
    gap_ci95: Interval | None
    efficiency: float                   # per-sample throughput ratio / (W_b / W_a)
    efficiency_ci95: Interval | None
    throughput_ratio: float             # samples/s of b over a
    throughput_ratio_ci95: Interval | None
    parts: list[PhaseGap]           # per part: phases, exposed communication, skew
    warnings: list[str] = field(default_factory=list)

    @property
    def within_noise(self) -> bool:
        """Perfect scaling cannot be ruled out."""
        return contains_one(self.efficiency_ci95)

    def to_json_dict(self) -> dict:
        def side(s: Side) -> dict:
            return {"label": s.label, "run_id": s.run_id, "world_size": s.world_size,
                    "step_ms": _r(s.step_ms), "step_ci95": _ri(s.step_ci95),
                    "batch_size": s.batch_size, "samples_per_step": s.samples_per_step,
                    "threads": s.threads,
                    "parts_ms": {k: _r(v) for k, v in s.parts.items()}}
        return {"kind": "scaling", "a": side(self.a), "b": side(self.b),
                "gap_ms": _r(self.gap_ms), "gap_ci95": _ri(self.gap_ci95),
                "scaling_efficiency": _r(self.efficiency, 4),
                "scaling_efficiency_ci95": _ri(self.efficiency_ci95, 4),
                "throughput_ratio": _r(self.throughput_ratio, 4),
                "throughput_ratio_ci95": _ri(self.throughput_ratio_ci95, 4),
                "ideal_throughput_ratio": self.b.world_size / self.a.world_size,
                "within_noise_of_perfect": self.within_noise,
                "parts": {g.phase: {"a_ms": _r(g.a_ms), "b_ms": _r(g.b_ms), "delta_ms": _r(g.delta_ms),
                                   "delta_ci95": _ri(g.delta_ci95), "within_noise": g.within_noise,
                                   "share_of_gap": _r(g.share_of_gap, 4)} for g in self.parts},
                "warnings": self.warnings}


def scaling(a: Side, b: Side) -> Scaling:
    """`a` the baseline (usually one process), `b` the job."""
    warnings = [s.bound for s in (a, b) if s.bound]
    if a.workload and b.workload and a.workload != b.workload:
        raise GapscopeInputError(f"cannot compare different workloads: {a.run_id} runs "
                                 f"{a.workload!r}, {b.run_id} runs {b.workload!r}")
    per_rank = b.world_size / a.world_size
    if a.batch_size and b.batch_size and a.batch_size != b.batch_size:
        warnings.append(f"batch per rank differs ({a.batch_size} vs {b.batch_size}): the "
                        "efficiency counts samples, the phase deltas compare unequal steps")
        samples = b.samples_per_step / a.samples_per_step
    else:
        if not (a.batch_size and b.batch_size):
            warnings.append("batch size unknown on a side: taken as equal per rank")
        samples = per_rank
    if a.threads != b.threads:
        # torchrun sets OMP_NUM_THREADS=1 per rank and local TF workers get cores // N intra-op
        # threads, where a one-process run uses every core (older manifests record neither).
        warnings.append(f"threads per process differ ({a.threads or 'not recorded'} vs "
                        f"{b.threads or 'not recorded'}): the gap may include the thread count; "
                        "run the baseline with the ranks' threads (OMP_NUM_THREADS, "
                        "TF_NUM_INTRAOP_THREADS)")
    gap = b.step_ms - a.step_ms
    throughput = samples * a.step_ms / b.step_ms
    parts = [PhaseGap(p, a.parts[p], b.parts[p], b.parts[p] - a.parts[p],
                      b.parts[p] / a.parts[p] if a.parts[p] else None, None) for p in PARTS]
    # Each side's parts add up to its step; the last part takes the rounding that is left.
    parts[-1].delta_ms = gap - sum(g.delta_ms for g in parts[:-1])
    for g in parts:
        g.share_of_gap = g.delta_ms / gap if gap else None
        ra, rb = a.part_replicates.get(g.phase), b.part_replicates.get(g.phase)
        if ra is not None and rb is not None and len(ra) == len(rb):
            g.delta_ci95 = percentile_interval(rb - ra)
    result = Scaling(a, b, gap, None, throughput / per_rank, None, throughput, None, parts, warnings)
    if a.step_replicates is not None and b.step_replicates is not None \
            and len(a.step_replicates) == len(b.step_replicates):
        ratio = a.step_replicates / b.step_replicates
        result.gap_ci95 = percentile_interval(b.step_replicates - a.step_replicates)
        result.throughput_ratio_ci95 = percentile_interval(samples * ratio)
        result.efficiency_ci95 = percentile_interval(samples * ratio / per_rank)
    if a.world_size == b.world_size:
        warnings.append(f"both sides run {a.world_size} process(es): no scaling to measure")
    return result


def _r(value, digits: int = _DIGITS):
    return None if value is None else round(float(value), digits)


def _ri(interval, digits: int = _DIGITS):
    return None if interval is None else [_r(interval[0], digits), _r(interval[1], digits)]

