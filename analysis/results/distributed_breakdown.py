"""Breaks a job down across its ranks: the five phases per rank, the job step (the slowest rank's
step, step by step), the skew between ranks and the straggler, communication per rank.

Synchronous data parallelism hides a straggler from raw step times: every rank waits for the
slowest inside the collective (DDP's all-reduce in backward), so all step times come out nearly
equal. Skew and straggler are therefore measured on each rank's time NOT spent waiting on
communication: the step minus the trace's exposed communication where the ranks have traces,
else (timers only) the step minus each rank's excess over the fastest rank in the phase holding
the collectives, which is where the fast ranks' wait shows.

Where only some ranks are present (sampled ranks, a lone rank), the job step and the skew are
taken over those: lower bounds of the whole job's, said so; the straggler is not named."""
from __future__ import annotations

import enum
import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from gapscope.analysis.readers import step_rows
from gapscope.analysis.model.job import Job, load_job, lone_rank, without_failed
from gapscope.analysis.model.locate import JobPlace, locate
from gapscope.analysis.model.run import load_run
from gapscope.analysis.results.breakdown import Source, breakdown
from gapscope.analysis.results.engines.collective_reduce import CollectiveReduction
from gapscope.analysis.results.phase_estimate import replicates_of
from gapscope.analysis.results.rank_summary import RankSummary, gather_ranks
from gapscope.analysis.results.records import Breakdown
from gapscope.analysis.measures.stats import Interval, Resampler, contains_zero, percentile_interval, rng
from gapscope.profilers.environment import threads_of
from gapscope.profilers.phases import PHASES

# Where DDP's collectives run when no trace says so: its all-reduce hooks fire during backward.
DEFAULT_COMM_PHASE = "backward"
_DIGITS = 6


class WaitSource(enum.StrEnum):
    """Where each rank's time waiting on communication comes from."""

    TRACE = "trace: exposed communication"
    TIMERS = "timers: excess over the fastest rank in the phase holding the collectives"


@dataclass
class JobBreakdown:
    job_id: str
    label: str
    path: str
    world_size: int                             # the job's processes, present here or not
    backend: str | None
    hosts: dict[int, str | None]
    foreign: bool
    ranks: list[Breakdown]                      # the ranks present, in rank order, labelled rank<r>
    communication: list[dict | None]            # per rank: Communication.to_json_dict()
    job_step_ms: float                          # mean over steps of the slowest rank's step
    job_step_ci95: Interval | None
    job_steps: list[tuple[int, float, int]]     # (step number, slowest step ms, its rank number)
    job_step_source: str                        # unprofiled timer steps, or traced steps
    wait_source: str
    comm_phase: str | None                      # the phase the fast ranks' wait shows in (timers)
    wait_ms: list[dict[str, float]]             # per rank present, per phase: time waiting on communication
    busy_ms: list[float]                        # per rank present: step - wait
    skew_ms: float                              # max - min of busy_ms
    skew_ci95: Interval | None
    step_skew_ms: float                         # max - min of the raw step means (hides stragglers)
    straggler: int | None                       # rank number with the most busy time, beyond noise or not
    straggler_phase: str | None
    straggler_extra_ms: float | None            # its busy time in that phase over the others' mean
    straggler_extra_ci95: Interval | None
    clock_offsets_us: dict[int, float] = field(default_factory=dict)
    clocks: str = "one host: clocks agree"
    last_arrival: dict[int, float] = field(default_factory=dict)  # share of collectives a rank reached last
    samples_per_step: int | None = None
    threads: str | None = None                  # ranks' threads (environment.threads_of)
    notes: list[str] = field(default_factory=list)
    job_step_replicates: np.ndarray | None = field(default=None, repr=False)
    rank_numbers: list[int] | None = None       # of `ranks`; None: 0..len-1
    engine: dict | None = None                  # what analysed the ranks: name, workers

    @property
    def numbers(self) -> list[int]:
        return list(self.rank_numbers) if self.rank_numbers is not None else list(range(len(self.ranks)))

    @property
    def complete(self) -> bool:
        """Every rank of the job present: else the job step and skew are lower bounds (the
        missing ranks may be slower) and no straggler is named."""
        return len(self.ranks) == self.world_size

    @property
    def skew_within_noise(self) -> bool:
        return contains_zero(self.skew_ci95)

    @property
    def exposed_ms(self) -> list[float]:
        return [sum(w.values()) for w in self.wait_ms]

    def decomposition(self) -> dict[str, float]:
        """The job step as parts that add up to it: each phase's busy time (mean over ranks),
        communication waited on (mean over ranks), and skew (what the slowest rank of each step
        costs beyond the mean rank)."""
        n = len(self.ranks)
        parts = {p: statistics.fmean(b.phases[p].ms - w.get(p, 0.0)
                                     for b, w in zip(self.ranks, self.wait_ms)) for p in PHASES}
        parts["communication"] = statistics.fmean(self.exposed_ms) if n else 0.0
        mean_step = statistics.fmean(b.step_stats()["mean"] for b in self.ranks)
        parts["skew"] = self.job_step_ms - mean_step
        return parts

    def to_json_dict(self) -> dict:
        return {
            "job_id": self.job_id, "label": self.label, "path": self.path,
            "world_size": self.world_size, "ranks_present": self.numbers,
            "complete": self.complete,
            # Over the ranks present only: a missing rank may be slower (never faster: the
            # slowest of more ranks is no faster), so these are lower bounds of the job's.
            "lower_bounds": [] if self.complete else ["job_step_ms", "skew_ms", "step_skew_ms",
                                                      "decomposition_ms.skew"],
            "omitted": [] if self.complete else ["straggler", "last_arrival"],
            "backend": self.backend,
            "hosts": {str(r): h for r, h in self.hosts.items()}, "foreign": self.foreign,
            "job_step_ms": {"mean": _r(self.job_step_ms), "ci95": _ri(self.job_step_ci95),
                            "lower_bound": not self.complete,
                            "source": self.job_step_source, "steps": len(self.job_steps),
                            "per_step": [{"step": s, "ms": _r(ms), "rank": r}
                                         for s, ms, r in self.job_steps]},
            "samples_per_step": self.samples_per_step,
            "wait_source": self.wait_source, "comm_phase": self.comm_phase,
            "per_rank": [{"rank": r, "step_ms": _r(b.step_stats()["mean"]),
                          "busy_ms": _r(self.busy_ms[i]),
                          "waiting_ms": {p: _r(ms) for p, ms in self.wait_ms[i].items()},
                          "host": self.hosts.get(r)}
                         for i, (r, b) in enumerate(zip(self.numbers, self.ranks))],
            "skew_ms": _r(self.skew_ms), "skew_ci95": _ri(self.skew_ci95),
            "skew_within_noise": self.skew_within_noise, "step_skew_ms": _r(self.step_skew_ms),
            "straggler": None if self.straggler is None else {
                "rank": self.straggler, "phase": self.straggler_phase,
                "extra_ms": _r(self.straggler_extra_ms), "extra_ci95": _ri(self.straggler_extra_ci95),
                "within_noise": self.skew_within_noise},
            "decomposition_ms": {k: _r(v) for k, v in self.decomposition().items()},
            "communication": self.communication,
            "clock_offsets_us": {str(r): _r(v, 3) for r, v in self.clock_offsets_us.items()},
            "clocks": self.clocks,
            "last_arrival": {str(r): _r(v, 4) for r, v in self.last_arrival.items()},
            "notes": self.notes,
            "engine": self.engine,
        }


def breakdown_of(path, source: str = Source.AUTO):
    """The breakdown of whatever `path` holds (run directory, folder with a trace, trace file);
    for a distributed job (job directory, folder of per-rank traces, or one foreign rank of a
    larger job) its JobBreakdown."""
    place = locate(path)
    if isinstance(place, JobPlace) or lone_rank(place) is not None:
        return job_breakdown(load_job(place), source)
    return breakdown(load_run(place), source)


def job_breakdown(job: Job, source: str = "auto", workers: int | None = None) -> JobBreakdown:
    """The job's figures over its ranks, gathered by the command's engine; a rank whose analysis
    failed after its retries is a missing rank (analysis.model.job.without_failed)."""
    gathered = gather_ranks(job, source, workers)
    result = combine(without_failed(job, gathered.failed), gathered.summaries, gathered.collectives)
    result.engine = gathered.engine
    return result


def combine(job: Job, summaries: list[RankSummary],
            collectives: CollectiveReduction | None = None) -> JobBreakdown:
    """The job's figures from its ranks' summaries (pure: no file is read here); `collectives`:
    their collectives already reduced as they streamed in (else reduced here)."""
    ranks = [s.breakdown for s in summaries]
    numbers = [s.rank for s in summaries]
    notes = list(job.notes)
    steps, step_source = _job_steps(summaries, job.ranks[0].warmup_steps)
    steps = [(n, ms, numbers[i]) for n, ms, i in steps]
    values = [ms for _, ms, _ in steps]
    replicates = _mean_replicates(values)
    job_step = statistics.fmean(values)
    comms = [s.communication for s in summaries]
    untraced = [s.rank for s in summaries if not s.traced]
    # Ranks are compared like with like: where some have no trace (a TF multi-worker job
    # traces its chief only), every rank on its step timers alone.
    compared = ([s.timers or s.breakdown for s in summaries]
                if untraced and len(untraced) < len(summaries) else ranks)
    wait_ms, wait_source, comm_phase = _waits(compared, comms, [s.traced_step_ms for s in summaries])
    busy = [b.step_stats()["mean"] - sum(w.values()) for b, w in zip(compared, wait_ms)]
    means = [b.step_stats()["mean"] for b in compared]
    # Among some ranks only, the slowest present is no straggler of the job.
    straggler = max(range(len(busy)), key=busy.__getitem__) if len(busy) > 1 and job.complete else None
    fastest = min(range(len(busy)), key=busy.__getitem__)
    skew_ci = _busy_difference(compared, wait_ms, straggler, fastest) if straggler is not None else None
    phase, extra, extra_ci = _straggler_phase(compared, wait_ms, straggler)
    result = JobBreakdown(
        job.run_id, job.label, str(job.path), job.world_size, job.backend, dict(job.hosts),
        job.foreign, ranks, [c.to_json_dict() if c is not None else None for c in comms],
        job_step, None if replicates is None else percentile_interval(replicates), steps,
        step_source, wait_source, comm_phase, wait_ms, busy, max(busy) - min(busy), skew_ci,
        max(means) - min(means), None if straggler is None else numbers[straggler], phase, extra,
        extra_ci, notes=notes, job_step_replicates=replicates, rank_numbers=numbers)
    _clocks(result, job, summaries, collectives)
    result.threads = threads_of(job.ranks[0].manifest)
    if job.batch_size:
        result.samples_per_step = job.batch_size * job.world_size
    if compared is not ranks:
        notes.append(f"{', '.join(f'rank{r}' for r in untraced)} not traced: waiting, skew and "
                     f"straggler taken on every rank's step timers (waiting as each rank's "
                     f"{comm_phase} beyond the fastest rank's)")
    elif wait_source == WaitSource.TIMERS:
        notes.append(f"no communication in the traces: waiting estimated from the step timers as "
                     f"each rank's {comm_phase} beyond the fastest rank's")
    return result


def _job_steps(summaries: list[RankSummary], warmup: int) -> tuple[list[tuple[int, float, int]], str]:
    """Per step number run by every rank, the slowest rank's step: unprofiled timer steps
    where every rank has steps.csv, else the traced steps."""
    per_rank = []
    # Timer steps where the breakdowns took their step times from them (not --source trace).
    if all(s.rows and s.breakdown.unprofiled for s in summaries):
        for s in summaries:
            steady = step_rows.steady(s.rows, warmup)
            per_rank.append({int(r["step"]): (float(r["step_ms"]), bool(r.get("traced")))
                             for r in steady})
        common = set.intersection(*(set(p) for p in per_rank))
        untraced = sorted(n for n in common if not any(p[n][1] for p in per_rank))
        numbers, source = (untraced, "unprofiled steps") if untraced else (sorted(common), "traced steps")
        per_rank = [{n: p[n][0] for n in numbers} for p in per_rank]
    else:
        per_rank = [{st.step: st.step_ms for st in s.breakdown.steps} for s in summaries]
        numbers = sorted(set.intersection(*(set(p) for p in per_rank)))
        source = "traced steps (profiler cost inside)"
    if not numbers:
        from gapscope.profilers.errors import GapscopeInputError
        raise GapscopeInputError("the ranks share no step numbers: no job step to take")
    steps = []
    for n in numbers:
        times = [p[n] for p in per_rank]
        slowest = max(range(len(times)), key=times.__getitem__)
        steps.append((n, times[slowest], slowest))
    return steps, source


def _mean_replicates(values: list[float]) -> np.ndarray | None:
    if len(values) < 2:
        return None
    return Resampler(len(values), rng()).means(values)


def _waits(ranks: list[Breakdown], comms: list,
           traced_step_ms: list[float | None]) -> tuple[list[dict[str, float]], str, str | None]:
    """Per rank and phase, the time spent waiting on communication.

    The trace times the collectives on traced steps, which the profiler slows (the straggler's
    lead, and so the others' wait, grows with it): each rank's exposed time keeps its share of
    the traced step, applied to the unprofiled step, as the phase estimate does; never more
    than the phase it was exposed in."""
    if comms and all(c is not None for c in comms):
        waits = []
        for b, c, traced in zip(ranks, comms, traced_step_ms):
            scale = b.step_stats()["mean"] / traced if b.unprofiled and traced else 1.0
            waits.append({p: min(float(ms) * scale, max(b.phases[p].ms, 0.0))
                          for p, ms in c.exposed_by_phase.items() if p in PHASES and ms})
        return waits, WaitSource.TRACE, None
    phase = DEFAULT_COMM_PHASE
    floor = min(b.phases[phase].ms for b in ranks)
    return [{phase: b.phases[phase].ms - floor} for b in ranks], WaitSource.TIMERS, phase


def _busy_replicates(b: Breakdown, wait: dict[str, float], column: int = 0) -> np.ndarray | None:
    """Bootstrap replicates of a rank's busy time (column 0: the step; 1..5: a phase)."""
    replicates = replicates_of(b)
    if replicates is None:
        return None
    shift = sum(wait.values()) if column == 0 else wait.get(PHASES[column - 1], 0.0)
    return replicates[:, column] - shift


def _busy_difference(ranks, waits, a: int, b: int) -> Interval | None:
    ra, rb = _busy_replicates(ranks[a], waits[a]), _busy_replicates(ranks[b], waits[b])
    if ra is None or rb is None or len(ra) != len(rb):
        return None
    return percentile_interval(ra - rb)


def _straggler_phase(ranks: list[Breakdown], waits, straggler: int | None):
    """The phase where the straggler's busy time most exceeds the other ranks' mean."""
    if straggler is None:
        return None, None, None
    others = [r for r in range(len(ranks)) if r != straggler]

    def busy(r, p):
        return ranks[r].phases[p].ms - waits[r].get(p, 0.0)
    extra = {p: busy(straggler, p) - statistics.fmean(busy(r, p) for r in others) for p in PHASES}
    phase = max(extra, key=extra.get)
    column = 1 + PHASES.index(phase)
    mine = _busy_replicates(ranks[straggler], waits[straggler], column)
    theirs = None if mine is None else mean_of(_busy_replicates(ranks[r], waits[r], column)
                                                for r in others)
    interval = None if theirs is None or len(theirs) != len(mine) else percentile_interval(mine - theirs)
    return phase, extra[phase], interval


def mean_of(arrays) -> np.ndarray | None:
    """np.mean(arrays, axis=0), to the last bit, one array at a time: a job's ranks' replicates
    rebuilt one by one are never all held at once. None where one is missing or of another size."""
    total, count = None, 0
    for values in arrays:
        if values is None or (total is not None and len(values) != len(total)):
            return None
        if total is None:
            total = np.array(values, float)
        else:
            total += values
        count += 1
    return None if total is None else total / count


def _clocks(result: JobBreakdown, job: Job, summaries: list[RankSummary],
            reduction: CollectiveReduction | None) -> None:
    """Clock offsets between hosts from matching collective completions, applied to the
    collectives' arrivals: the rank the others wait for reaches each collective last. From the
    reduction the ranks streamed into, else from the summaries' collectives here."""
    if reduction is None:
        reduction = CollectiveReduction(job.hosts)
        for s in summaries:
            reduction.add(s.rank, s.collectives)
    result.clock_offsets_us, line = reduction.clocks()
    if line:
        result.clocks = line
    if job.complete:  # the last of some ranks says nothing of who the others waited for
        result.last_arrival = reduction.last_arrival()


def _r(value, digits: int = _DIGITS):
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


def _ri(interval, digits: int = _DIGITS):
    return None if interval is None else [_r(interval[0], digits), _r(interval[1], digits)]
