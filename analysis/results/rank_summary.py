"""What the job analysis needs of each rank, summarised in parallel, one rank per worker: its
breakdown, step rows and communication, small and picklable, never the trace's events."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from gapscope.analysis.model.job import Job
from gapscope.analysis.model.locate import RunPlace
from gapscope.analysis.model.run import Run, current_rules, load_run, use_rules
from gapscope.analysis.readers import chunk_pool
from gapscope.analysis.results.engines.choose import current_choice
from gapscope.analysis.results.engines.collective_reduce import CollectiveReduction, digest
from gapscope.analysis.results.engines.interface import stream
from gapscope.analysis.results.engines.local import WORKERS_ENV, worker_count  # noqa: F401 - their old home
from gapscope.analysis.results.records import Breakdown

@dataclass
class RankSummary:
    """What the job analysis needs of one rank: small and picklable, never the trace's events."""

    rank: int
    host: str | None
    breakdown: Breakdown
    rows: list[dict] | None                 # steps.csv
    communication: object | None = None     # analysis.measures.collectives.Communication
    # analysis.measures.collectives.Collective, for clocks: a Digest once slimmed for the trip
    # back, None once reduced at the driver (engines.collective_reduce)
    collectives: list = field(default_factory=list)
    traced_step_ms: float | None = None     # mean traced step: the clock communication was timed on
    notes: list[str] = field(default_factory=list)
    traced: bool = False                    # the rank's trace was read
    # A traced rank's figures from its step timers alone: compared with untraced ranks (a TF
    # multi-worker job traces only its chief) like with like.
    timers: Breakdown | None = None


def summarize_rank(rank: int, place: RunPlace, label: str, source: str, host: str | None) -> RankSummary:
    """One rank, loaded and analysed inside a worker; the Run and its trace die with the call.
    Its trace is read in this process alone: the job's other ranks have the other cores."""
    with chunk_pool.alone():
        return _summarize_rank(rank, place, label, source, host)


def _summarize_rank(rank: int, place: RunPlace, label: str, source: str, host: str | None) -> RankSummary:
    from gapscope.analysis.results.breakdown import breakdown, breakdown_from_timers
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
        from gapscope.analysis.measures.collectives import communication, find_collectives
    except ImportError:  # the communication analyzer is not in this build
        return None, []
    return (communication(run.trace, run.timeline),
            list(find_collectives(run.trace, run.timeline)))


@dataclass
class Gathered:
    """Every rank's summary that came back, in rank order; the ranks whose work failed, each
    with why (one line); and what did the work (engine name, workers)."""

    summaries: list[RankSummary]
    failed: dict[int, str]
    engine: dict
    collectives: CollectiveReduction   # the ranks' collectives, reduced as they came


def _summarize_under(rules, rank: int, place: RunPlace, label: str, source: str,
                     host: str | None) -> RankSummary:
    """summarize_rank under the command's --phase and --step-marker, wherever it runs."""
    use_rules(rules)
    return _slim(summarize_rank(rank, place, label, source, host))


def _slim(summary: RankSummary) -> RankSummary:
    """What travels back to the driver: the bootstrap replicates (96 of a summary's 99 kB) left
    out, rebuilt at the driver only where a figure needs them (phase_estimate.replicates_of);
    the collectives as a Digest of numbers, reduced at the driver as the rank comes in."""
    for b in (summary.breakdown, summary.timers):
        if b is not None and b.bootstrap is not None:
            b.replicates = None
    summary.collectives = digest(summary.collectives)
    return summary


def gather_ranks(job: Job, source: str = "auto", workers: int | None = None) -> Gathered:
    """Every rank's summary from the command's engine (analysis.results.engines.choose), taken
    as each completes; a rank still failing after its retries is left out and named."""
    rules = current_rules()
    tasks = {r: (rules, r, run.place, run.label, source, job.hosts.get(r))
             for r, run in zip(job.rank_numbers, job.ranks)}
    choice = current_choice()
    summaries, failed = {}, {}
    collectives = CollectiveReduction(job.hosts)
    with choice.engine(len(tasks), workers) as engine:
        sizes = _rank_bytes(job) if engine.batch_bytes or choice.on_ranks else None
        told = _progress(choice.on_ranks, job, engine.workers, sizes)
        for outcome in stream(engine, _summarize_under, tasks, choice.retries, sizes=sizes):
            if outcome.error is None:
                summary = summaries[outcome.key] = outcome.value
                collectives.add(outcome.key, summary.collectives)
                summary.collectives = None  # reduced: the driver keeps no rank's list
            else:
                failed[outcome.key] = outcome.error
                collectives.drop(outcome.key)
            told(outcome.key, outcome.error is None)
        record = engine.record()
    return Gathered([summaries[r] for r in sorted(summaries)], failed, record, collectives)


def _progress(on_ranks, job: Job, workers: int, sizes: dict[int, int]):
    """told(rank, ok) for each rank as it completes, passing on_ranks the counts and the MB of
    the ranks' files (`sizes`) read so far; nothing where nobody watches."""
    if on_ranks is None:
        return lambda rank, ok: None
    total, counts, start = len(sizes), {"done": 0, "failed": 0, "bytes": 0}, time.monotonic()

    def told(rank: int | None, ok: bool) -> None:
        if rank is not None:
            counts["done" if ok else "failed"] += 1
            counts["bytes"] += sizes.get(rank, 0) if ok else 0
        left = total - counts["done"] - counts["failed"]
        on_ranks(job.label, total, counts["done"], counts["failed"], min(workers, left),
                 counts["bytes"] / 1e6, time.monotonic() - start)
    told(None, True)
    return told


def _rank_bytes(job: Job) -> dict[int, int]:
    return {r: _bytes(run.place.path) for r, run in zip(job.rank_numbers, job.ranks)}


def _bytes(path) -> int:
    """A rank's files on disk: the trace file, or all a rank directory holds."""
    try:
        return path.stat().st_size if path.is_file() else sum(
            p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        return 0


def summarize_ranks(job: Job, source: str = "auto", workers: int | None = None) -> list[RankSummary]:
    """The summaries of the ranks that succeeded, in rank order."""
    return gather_ranks(job, source, workers).summaries
