"""A distributed run (a job) as the analyzers see it: its ranks located and checked to belong to one
job, each rank an ordinary Run, and their traces summarised in parallel, one rank per worker."""
from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from analysis.readers.run_dir import TORCH_TRACE_GLOBS, read_manifest
from analysis.readers import safe_files
from analysis.results.records import Breakdown
from analysis.model.run import Run, load_run, unfinished
from profilers.errors import GapscopeInputError
from profilers.job_dir import rank_entries, root_cause
from profilers.run_dir import MANIFEST, effective_status

# A foreign trace's rank where its distributedInfo is missing: from its file name, or the name
# of the folder holding it. Only an explicit "rank" (rank1, rank_1, rank-1, RANK1) counts: the
# profiler's default file name is <host>_<pid>.<time>.pt.trace.json, so a bare "_1." would
# take a pid for a rank.
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[_-]?(\d+)(?!\d)", re.IGNORECASE)
# Kineto writes distributedInfo near the top of the file, before traceEvents.
_HEAD_BYTES = 256 * 1024
_INFO = re.compile(rb'"distributedInfo"\s*:\s*')


@dataclass
class Job:
    path: Path
    manifest: dict                 # the job manifest (made up from rank 0's for a foreign job)
    ranks: list[Run]               # in rank order, rank r at index r
    hosts: dict[int, str | None]
    foreign: bool = False          # per-rank traces gapscope did not capture
    notes: list[str] = field(default_factory=list)

    @property
    def world_size(self) -> int:
        return len(self.ranks)

    @property
    def run_id(self) -> str:
        return self.manifest.get("run_id") or self.path.name

    @property
    def distributed(self) -> dict:
        info = self.manifest.get("distributed")
        return info if isinstance(info, dict) else {}

    @property
    def backend(self) -> str | None:
        return self.distributed.get("backend")

    @property
    def batch_size(self) -> int | None:
        return batch_size(self.ranks[0])

    @property
    def label(self) -> str:
        first = self.ranks[0].manifest
        parts = [first.get("workload"), first.get("framework"), first.get("variant")]
        name = " ".join(str(p) for p in parts if p and p != "default") or self.path.name
        return f"{name} x{self.world_size}"


def batch_size(run: Run) -> int | None:
    """Samples per step on one rank: the run's --batch-size, else its workload's."""
    spec = run.manifest.get("workload_spec")
    for value in (run.settings.get("batch_size"), spec.get("batch_size") if isinstance(spec, dict) else None):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


# -- recognising a job ---------------------------------------------------------------------

def is_job(path: str | Path) -> bool:
    """A job directory (manifest with "distributed"), a folder of rank run directories, or a
    folder of per-rank traces of at least two ranks. Cheap: manifests and trace heads only."""
    path = Path(path)
    if not path.is_dir():
        return False
    manifest = path / MANIFEST
    if manifest.is_file():
        try:
            return isinstance(read_manifest(manifest).get("distributed"), dict)
        except GapscopeInputError:
            return False
    if _rank_dirs(path):
        return True
    ranks = {rank for rank, _ in _foreign_ranks(path)}
    return len(ranks) >= 2


def load_job(path: str | Path) -> Job:
    path = Path(path)
    if (path / MANIFEST).is_file():
        return _load_job_dir(path)
    if _rank_dirs(path):
        return _load_rank_dirs(path)
    return _load_foreign(path)


def _load_job_dir(path: Path) -> Job:
    manifest = read_manifest(path / MANIFEST)
    info = manifest["distributed"]
    job_id = manifest["run_id"]
    status, error = effective_status(manifest)
    if status == "failed" and manifest.get("status") == "running":
        # Whoever was to end the job died first (a user's rank 0, SIGKILLed): its ranks tell.
        cause = root_cause(rank_entries(path, info.get("world_size") or 0))
        error = f"rank {cause['rank']}: {cause['error']} (the job was never ended)" if cause else error
    if status == "failed":
        raise GapscopeInputError(f"job {job_id} failed: {error}")
    if status != "complete":
        raise GapscopeInputError(f"job {job_id} did not finish (status {status!r}): "
                                 "still running or killed")
    entries = info.get("ranks")
    world = info.get("world_size")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise GapscopeInputError(f"{path / MANIFEST}: distributed.ranks should be a list of objects")
    numbers = [e.get("rank") for e in entries]
    _check_ranks(path, numbers, world)
    runs, hosts = [], {}
    for entry in sorted(entries, key=lambda e: e["rank"]):
        rank = entry["rank"]
        rank_dir = safe_child(path, entry.get("dir") or f"rank{rank}")
        if entry.get("status") not in (None, "complete"):
            raise GapscopeInputError(f"job {job_id} failed: rank {rank}: "
                                     f"{entry.get('error') or entry.get('status')}")
        run = _load_rank(job_id, rank, rank_dir)
        theirs = run.manifest
        for key, expected in (("rank", rank), ("job_id", job_id), ("world_size", world)):
            if key in ("rank", "job_id") and key not in theirs:  # an ordinary run, no rank of it
                raise GapscopeInputError(f"{path}: {rank_dir.name} is no rank of this job "
                                         f"(its manifest names no {key})")
            if key in theirs and theirs[key] != expected:
                raise GapscopeInputError(
                    f"{path}: mixes ranks of different jobs: {rank_dir.name} has {key} "
                    f"{theirs[key]!r}, the job {expected!r}")
        runs.append(run)
        hosts[rank] = entry.get("host") or theirs.get("host")
    return Job(path, manifest, runs, hosts)


def _load_rank_dirs(path: Path) -> Job:
    """A folder of rank run directories without a job manifest (copied together by hand)."""
    dirs = _rank_dirs(path)
    manifests = {d: read_manifest(d / MANIFEST) for d in dirs}
    jobs = sorted({str(m.get("job_id")) for m in manifests.values()})
    if len(jobs) > 1:
        held = "; ".join(f"job {j}: ranks " + ", ".join(
            str(m["rank"]) for m in manifests.values() if str(m.get("job_id")) == j) for j in jobs)
        raise GapscopeInputError(f"{path}: mixes ranks of different jobs ({held})")
    worlds = {m.get("world_size") for m in manifests.values()}
    if len(worlds) > 1:
        raise GapscopeInputError(f"{path}: mixes ranks of different jobs (world sizes "
                                 f"{', '.join(map(str, sorted(worlds, key=str)))})")
    _check_ranks(path, [m["rank"] for m in manifests.values()], worlds.pop())
    by_rank = sorted(dirs, key=lambda d: manifests[d]["rank"])
    # The rank that failed first is the root cause; the others died on the broken collective.
    failed = sorted((d for d in by_rank if unfinished(manifests[d])),
                    key=lambda d: str(manifests[d].get("ended_at") or ""))
    if failed:
        rank = manifests[failed[0]]["rank"]
        raise GapscopeInputError(f"job {jobs[0]} failed: rank {rank}: {unfinished(manifests[failed[0]])}")
    runs = [_load_rank(jobs[0], manifests[d]["rank"], d) for d in by_rank]
    first = runs[0].manifest
    manifest = {**{k: first.get(k) for k in ("workload", "framework", "variant", "settings",
                                             "warmup_steps", "device")},
                "run_id": jobs[0], "status": "complete",
                "distributed": {"world_size": len(runs), "backend": first.get("backend"),
                                "launcher": None}}
    return Job(path, manifest, runs, {r: run.manifest.get("host") for r, run in enumerate(runs)})


def _load_foreign(path: Path) -> Job:
    """Per-rank Kineto traces in one folder: ranks from distributedInfo, else the file name."""
    found = _foreign_ranks(path)
    if not found:
        raise GapscopeInputError(f"{path}: not a distributed job (no manifest, no rank run "
                                 "directories, no per-rank traces)")
    numbers = [rank for rank, _ in found]
    worlds = {world for _, (_, world) in found if world is not None}
    if len(worlds) > 1:
        raise GapscopeInputError(f"{path}: mixes ranks of different jobs (traces say world sizes "
                                 f"{', '.join(map(str, sorted(worlds)))})")
    counts = {n: numbers.count(n) for n in numbers}
    duplicate = sorted(n for n, c in counts.items() if c > 1)
    if duplicate:
        files = [p.name for rank, (p, _) in found if rank == duplicate[0]]
        raise GapscopeInputError(f"{path}: mixes ranks of different jobs: rank {duplicate[0]} "
                                 f"appears {len(files)} times ({', '.join(files[:3])})")
    _check_ranks(path, numbers, worlds.pop() if worlds else None)
    ordered = sorted(found)
    runs = [load_run(trace, label=f"rank{rank}") for rank, (trace, _) in ordered]
    manifest = {"run_id": path.name, "status": "complete", "workload": None, "framework": "torch",
                "distributed": {"world_size": len(runs), "backend": _backend(ordered[0][1][0]),
                                "launcher": None}}
    job = Job(path, manifest, runs, {rank: None for rank, _ in ordered}, foreign=True)
    named = [p.name for rank, (p, world) in ordered if world is None]
    if named:
        job.notes.append(f"rank taken from the file name (no distributedInfo): {', '.join(named[:4])}")
    return job


def _check_ranks(path: Path, numbers: list, world) -> None:
    """Ranks 0..W-1, each once: a duplicate or gap means two jobs mixed, or a rank lost."""
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
        raise GapscopeInputError(f"{path}: a rank that is not a whole number: {numbers!r}")
    duplicate = sorted({n for n in numbers if numbers.count(n) > 1})
    if duplicate:
        raise GapscopeInputError(f"{path}: mixes ranks of different jobs: rank {duplicate[0]} "
                                 "appears twice")
    world = world if isinstance(world, int) and not isinstance(world, bool) else len(numbers)
    missing = sorted(set(range(world)) - set(numbers))
    if missing or len(numbers) != world:
        raise GapscopeInputError(f"{path}: ranks {sorted(numbers)} of a world of {world}: "
                                 f"missing {', '.join(map(str, missing)) or 'none'}"
                                 f"{'' if len(numbers) <= world else ', extra ranks'}")


def _load_rank(job_id: str, rank: int, rank_dir: Path) -> Run:
    if not (rank_dir / MANIFEST).is_file():
        raise GapscopeInputError(f"job {job_id}: rank {rank} has no run directory at {rank_dir}")
    manifest = read_manifest(rank_dir / MANIFEST)
    problem = unfinished(manifest)
    if problem:
        raise GapscopeInputError(f"job {job_id} failed: rank {rank}: {problem}")
    return load_run(rank_dir, label=f"rank{rank}")


def _rank_dirs(folder: Path) -> list[Path]:
    """Child run directories that are ranks of a job (their manifest names a rank)."""
    dirs = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir()):
        if (child / MANIFEST).is_file():
            try:
                manifest = read_manifest(child / MANIFEST)
            except GapscopeInputError:
                continue
            if isinstance(manifest.get("rank"), int):
                dirs.append(child)
    return dirs


def _foreign_ranks(folder: Path) -> list[tuple[int, tuple[Path, int | None]]]:
    """(rank, (trace, world size or None)) for each torch trace under `folder` that says its
    rank; a folder where some trace has none is no foreign job."""
    traces = sorted({p for g in TORCH_TRACE_GLOBS for p in folder.rglob(g)
                     if safe_files.is_readable_regular_file(p) and not _in_run_dir(p, folder)})
    found = []
    for trace in traces:
        info = distributed_info(trace)
        rank = info.get("rank") if info else None
        world = info.get("world_size") if info else None
        if not isinstance(rank, int):
            rank = rank_from_name(trace, folder)
            world = None
        if rank is None:
            return []
        found.append((rank, (trace, world if isinstance(world, int) else None)))
    return found


def _in_run_dir(trace: Path, root: Path) -> bool:
    """A trace inside a gapscope run directory under `root` belongs to that run (a folder of
    runs, or of jobs, is no foreign job)."""
    return any((root / parent / MANIFEST).is_file()
               for parent in trace.relative_to(root).parents if parent.name)


def rank_from_name(trace: Path, root: Path) -> int | None:
    """`rank1` in the file name, else in a folder name between `root` and the file."""
    for name in [trace.name, *[p.name for p in trace.relative_to(root).parents if p.name]]:
        match = _RANK_IN_NAME.search(name)
        if match:
            return int(match.group(1))
    return None


def distributed_info(trace: Path) -> dict | None:
    """The trace's `distributedInfo` object (backend, rank, world_size), read from its head."""
    try:
        with safe_files.open_regular(trace) as raw:
            stream = gzip.GzipFile(fileobj=raw) if trace.name.endswith(".gz") else raw
            head = stream.read(_HEAD_BYTES)
    except (OSError, EOFError, ValueError):
        return None
    match = _INFO.search(head)
    if not match:
        return None
    try:
        info, _ = json.JSONDecoder().raw_decode(head[match.end():].decode("utf-8", "replace"))
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def _backend(trace: Path) -> str | None:
    info = distributed_info(trace)
    return info.get("backend") if info else None


def safe_child(folder: Path, name) -> Path:
    """A rank directory the manifest names, kept inside the job directory."""
    from profilers.run_dir import inside
    try:
        return inside(folder, name)
    except Exception as exc:  # noqa: BLE001 - any refusal is the manifest's fault
        raise GapscopeInputError(f"{folder / MANIFEST}: rank directory {name!r}: {exc}") from None


# -- per-rank summaries, in parallel -------------------------------------------------------

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


def summarize_rank(rank: int, path: str, label: str, source: str, host: str | None) -> RankSummary:
    """One rank, loaded and analysed inside a worker; the Run and its trace die with the call."""
    from analysis.results.breakdown import breakdown, breakdown_from_timers
    run = load_run(path, label=label)
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
    tasks = [(r, str(run.located.path), run.label, source, job.hosts.get(r))
             for r, run in enumerate(job.ranks)]
    count = worker_count(len(tasks), workers)
    if count == 1:
        return [summarize_rank(*task) for task in tasks]
    # forkserver (spawn where there is none): no copy of this process's memory or threads.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
        return list(pool.map(summarize_rank, *zip(*tasks)))
