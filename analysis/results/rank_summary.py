"""What the job analysis needs of each rank, summarised in parallel, one rank per worker: its
breakdown, step rows and communication, small and picklable, never the trace's events."""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from analysis.model.job import Job
from analysis.model.locate import RunPlace
from analysis.model.run import Run, current_rules, load_run, use_rules
from analysis.results.records import Breakdown
from profilers.errors import GapscopeInputError

@dataclass
class RankSummary:
    """What the job analysis needs of one rank: small and picklable, never the trace's events."""

    rank: int
    host: str | None
    breakdown: Breakdown
    rows: list[dict] | None                 # steps.csv
    communication: object | None = None     # analysis.measures.collectives.Communication
    collectives: list = field(default_factory=list)  # analysis.measures.collectives.Collective, for clocks
    traced_step_ms: float | None = None     # mean traced step: the clock communication was timed on
    notes: list[str] = field(default_factory=list)
    traced: bool = False                    # the rank's trace was read
    # A traced rank's figures from its step timers alone: compared with untraced ranks (a TF
    # multi-worker job traces only its chief) like with like.
    timers: Breakdown | None = None


def summarize_rank(rank: int, place: RunPlace, label: str, source: str, host: str | None) -> RankSummary:
    """One rank, loaded and analysed inside a worker; the Run and its trace die with the call."""
    from analysis.results.breakdown import breakdown, breakdown_from_timers
    run = load_run(place, label=label)  # as located: its manifest is not read again
    result = breakdown(run, source)
    communication, collectives, traced, timers = None, [], None, None
    read = run.trace is not None and source != "timers"  # --source timers: the trace unread
    if read:
        communication, collectives = _communication(run)
        _ddp_bytes(communication, run.manifest.get("ddp"))
        durations = [s.dur_us / 1000.0 for s in run.timeline.steps]
        traced = sum(durations) / len(durations) if durations else None
        if run.rows:
            timers = breakdown_from_timers(run.rows, run.warmup_steps, run.runs_phases)
    return RankSummary(rank, host or run.manifest.get("host"), result, run.rows,
                       communication, collectives, traced, traced=read, timers=timers)


def _ddp_bytes(communication, ddp) -> None:
    """All-reduced bytes per step from DDP's own buckets (the rank manifest's `ddp`), where the
    trace has none (gapscope traces without shapes, which gloo ranges need for sizes): taken only
    when the trace shows exactly one all-reduce per bucket a step, so each is a bucket's."""
    if communication is None or not isinstance(ddp, dict):
        return
    reduce = communication.per_kind.get("all_reduce")
    buckets = ddp.get("rebuilt_bucket_sizes") or ddp.get("bucket_sizes")
    total = ddp.get("total_parameter_size_bytes")
    if (reduce is None or reduce.get("bytes") is not None or not isinstance(buckets, list)
            or not isinstance(total, int) or abs(reduce["count"] - len(buckets)) > 1e-9):
        return
    reduce["bytes"] = total
    reduce["bytes_from"] = "DDP buckets"


def _communication(run: Run):
    try:
        from analysis.measures.collectives import communication, find_collectives
    except ImportError:  # the communication analyzer is not in this build
        return None, []
    return (communication(run.trace, run.timeline),
            list(find_collectives(run.trace, run.timeline)))


# Workers of the pool, where the caller names none: GAPSCOPE_JOB_WORKERS (1 reads the ranks one
# after another in this process), else one per core.
WORKERS_ENV = "GAPSCOPE_JOB_WORKERS"


def worker_count(ranks: int, workers: int | None = None) -> int:
    """At most one worker per core and per rank: memory stays that of a few traces at once."""
    if not workers:
        try:
            workers = int(os.environ.get(WORKERS_ENV) or 0)
        except ValueError:
            raise GapscopeInputError(f"{WORKERS_ENV} should be a whole number, not "
                                     f"{os.environ[WORKERS_ENV]!r}") from None
    limit = workers if workers and workers > 0 else (os.cpu_count() or 1)
    return max(1, min(ranks, limit))


def summarize_ranks(job: Job, source: str = "auto", workers: int | None = None) -> list[RankSummary]:
    """Every rank's summary in rank order; with more than one worker, a process pool whose
    workers each load one rank at a time and return only its summary."""
    tasks = [(r, run.place, run.label, source, job.hosts.get(r))
             for r, run in zip(job.rank_numbers, job.ranks)]
    count = worker_count(len(tasks), workers)
    if count == 1:
        return [summarize_rank(*task) for task in tasks]
    # forkserver (spawn where there is none): no copy of this process's memory or threads.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=count, mp_context=context,  # --phase, --step-marker too
                             initializer=use_rules, initargs=(current_rules(),)) as pool:
        return list(pool.map(summarize_rank, *zip(*tasks)))
