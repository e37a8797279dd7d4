"""A distributed run (a job) as the analyzers see it: its ranks, as located, checked to belong to
one job, each rank an ordinary Run; where only some ranks were kept (sampled ranks), those."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gapscope.analysis.model.locate import (ForeignRanks, ForeignTrace, JobDir, JobPlace, RankDirs, RunPlace,
                                   distributed_info, foreign_ranks, locate, unfinished)
from gapscope.analysis.model import kept_traces
from gapscope.analysis.model.run import Run, load_run, read_trace
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.job_dir import rank_entries, root_cause
from gapscope.profilers.run_dir import MANIFEST, effective_status


@dataclass
class Job:
    path: Path
    manifest: dict                 # the job manifest (made up from rank 0's for a foreign job)
    ranks: list[Run]               # the ranks present, in rank order
    hosts: dict[int, str | None]
    foreign: bool = False          # per-rank traces gapscope did not capture
    notes: list[str] = field(default_factory=list)
    numbers: list[int] | None = None   # rank number of each of `ranks`; None: 0..len-1
    world: int | None = None           # the job's world size where ranks are missing

    @property
    def world_size(self) -> int:
        """Processes the job ran, present here or not."""
        return self.world or len(self.ranks)

    @property
    def rank_numbers(self) -> list[int]:
        return list(self.numbers) if self.numbers is not None else list(range(len(self.ranks)))

    @property
    def complete(self) -> bool:
        """Every rank of the job is here: figures over all ranks (the job step as the slowest
        rank's, the straggler) are then whole, else bounds at most."""
        return len(self.ranks) == self.world_size

    @property
    def missing(self) -> list[int]:
        return sorted(set(range(self.world_size)) - set(self.rank_numbers))

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


# -- loading a job -------------------------------------------------------------------------

def is_job(path, lone: bool = False) -> bool:
    """A job directory (manifest with "distributed"), a folder of rank run directories, or a
    folder of per-rank traces of at least two ranks (analysis.model.locate tells); with `lone`,
    also one foreign rank of a larger job (a trace whose distributedInfo says world_size > 1),
    which breaks down as a job with its other ranks missing, but compares as a run."""
    place = locate(path)
    return isinstance(place, JobPlace) or (lone and lone_rank(place) is not None)


def lone_rank(place) -> ForeignRanks | None:
    """A foreign trace (or a folder holding one) of one rank of a world of several, as a job of
    that rank alone; None for anything else (gapscope's own rank directory is a run: naming
    one rank's directory is how a user asks for that rank alone)."""
    if not isinstance(place, ForeignTrace) or place.problem is not None:
        return None
    if place.path.is_dir():
        traces = foreign_ranks(place.path, _read_ahead)
    else:
        info = distributed_info(place.path, _read_ahead) or {}
        rank, world = info.get("rank"), info.get("world_size")
        traces = [(rank, (place.path, world))] if _whole(rank) and _whole(world) else []
    if len(traces) != 1 or not _whole(traces[0][1][1]) or traces[0][1][1] < 2:
        return None
    return ForeignRanks(place.path, tuple(traces))


def _read_ahead(path: Path):
    """A lone trace read whole for what its head does not say, kept for the run that reads it."""
    return kept_traces.read_ahead(path, read_trace)


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def load_job(path) -> Job:
    place = locate(path)
    place = lone_rank(place) or place
    if isinstance(place, JobDir):
        return _load_job_dir(place)
    if isinstance(place, RankDirs):
        return _load_rank_dirs(place)
    if isinstance(place, ForeignRanks):
        return _load_foreign(place)
    # A manifest it cannot read; a folder of foreign traces is refused as a run (two sessions)
    # only after its traces' ranks were looked at.
    if isinstance(place, RunPlace) and not isinstance(place, ForeignTrace) and place.problem is not None:
        raise place.problem
    traces = foreign_ranks(place.path, _read_ahead) if place.path.is_dir() else []
    if traces:  # a rank alone: _load_foreign says which are missing
        return _load_foreign(ForeignRanks(place.path, tuple(traces)))
    if isinstance(place, RunPlace) and place.problem is not None:
        raise place.problem
    raise GapscopeInputError(f"{place.path}: not a distributed job (no manifest, no rank run "
                             "directories, no per-rank traces)")


def _load_job_dir(place: JobDir) -> Job:
    path, manifest = place.path, place.manifest
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
    _check_ranks(path, numbers, world)  # the manifest gapscope wrote names every rank
    runs, hosts, absent = [], {}, []
    for entry in sorted(entries, key=lambda e: e["rank"]):
        rank = entry["rank"]
        rank_dir = safe_child(path, entry.get("dir") or f"rank{rank}")
        if entry.get("status") not in (None, "complete"):
            raise GapscopeInputError(f"job {job_id} failed: rank {rank}: "
                                     f"{entry.get('error') or entry.get('status')}")
        # A rank that finished but whose folder is not here (another node's disk, or left out
        # of a copy) is sampled out; a folder there without its manifest is a broken rank.
        if not os.path.lexists(rank_dir):
            absent.append(rank)
            continue
        if not (rank_dir / MANIFEST).is_file():
            raise GapscopeInputError(f"job {job_id}: rank {rank} has no run directory at {rank_dir}")
        run = _load_rank(job_id, rank, locate(rank_dir))
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
    if not runs:
        raise GapscopeInputError(f"job {job_id}: none of its {len(entries)} rank directories "
                                 "is here")
    return _sampled(Job(path, manifest, runs, hosts), sorted(hosts), absent,
                    "the other rank directories are not in the job directory")


def _load_rank_dirs(place: RankDirs) -> Job:
    """A folder of rank run directories without a job manifest (copied together by hand)."""
    path = place.path
    manifests = {rank.path: rank.manifest for rank in place.ranks}
    jobs = sorted({str(m.get("job_id")) for m in manifests.values()})
    if len(jobs) > 1:
        held = "; ".join(f"job {j}: ranks " + ", ".join(
            str(m["rank"]) for m in manifests.values() if str(m.get("job_id")) == j) for j in jobs)
        raise GapscopeInputError(f"{path}: mixes ranks of different jobs ({held})")
    worlds = {m.get("world_size") for m in manifests.values()}
    if len(worlds) > 1:
        raise GapscopeInputError(f"{path}: mixes ranks of different jobs (world sizes "
                                 f"{', '.join(map(str, sorted(worlds, key=str)))})")
    world = worlds.pop()
    missing = _check_ranks(path, [m["rank"] for m in manifests.values()], world, sampled=True)
    by_rank = sorted(place.ranks, key=lambda r: r.manifest["rank"])
    # The rank that failed first is the root cause; the others died on the broken collective.
    failed = sorted((r for r in by_rank if unfinished(r.manifest)),
                    key=lambda r: str(r.manifest.get("ended_at") or ""))
    if failed:
        rank = failed[0].manifest["rank"]
        raise GapscopeInputError(f"job {jobs[0]} failed: rank {rank}: {unfinished(failed[0].manifest)}")
    runs = [_load_rank(jobs[0], r.manifest["rank"], r) for r in by_rank]
    first = runs[0].manifest
    manifest = {**{k: first.get(k) for k in ("workload", "framework", "variant", "settings",
                                             "warmup_steps", "device")},
                "run_id": jobs[0], "status": "complete",
                "distributed": {"world_size": len(runs) + len(missing),
                                "backend": first.get("backend"), "launcher": None}}
    numbers = [r.manifest["rank"] for r in by_rank]
    job = Job(path, manifest, runs, {r: run.manifest.get("host") for r, run in zip(numbers, runs)})
    return _sampled(job, numbers, missing, "the folder holds no directory of the others")


def _load_foreign(place: ForeignRanks) -> Job:
    """Per-rank Kineto traces in one folder: ranks from distributedInfo, else the file name."""
    path, found = place.path, list(place.traces)
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
    missing = _check_ranks(path, numbers, worlds.pop() if worlds else None, sampled=True)
    ordered = sorted(found)
    runs = [load_run(trace, label=f"rank{rank}") for rank, (trace, _) in ordered]
    manifest = {"run_id": path.name, "status": "complete", "workload": None, "framework": "torch",
                "distributed": {"world_size": len(runs) + len(missing),
                                "backend": _backend(ordered[0][1][0], lone=len(ordered) == 1), "launcher": None}}
    job = Job(path, manifest, runs, {rank: None for rank, _ in ordered}, foreign=True)
    named = [p.name for rank, (p, world) in ordered if world is None]
    if named:
        job.notes.append(f"rank taken from the file name (no distributedInfo): {', '.join(named[:4])}")
    return _sampled(job, [rank for rank, _ in ordered], missing,
                    "the traces of the others are not here")


def _check_ranks(path: Path, numbers: list, world, sampled: bool = False) -> list[int]:
    """The ranks missing from 0..W-1. A duplicate, or a rank beyond the world, means two jobs
    mixed; a gap is refused unless `sampled` (ranks kept by choice, or lost with their folder)."""
    if not all(_whole(n) for n in numbers):
        raise GapscopeInputError(f"{path}: a rank that is not a whole number: {numbers!r}")
    duplicate = sorted({n for n in numbers if numbers.count(n) > 1})
    if duplicate:
        raise GapscopeInputError(f"{path}: mixes ranks of different jobs: rank {duplicate[0]} "
                                 "appears twice")
    world = world if _whole(world) else max(numbers, default=-1) + 1 if sampled else len(numbers)
    missing = sorted(set(range(world)) - set(numbers))
    extra = sorted(n for n in numbers if not 0 <= n < world)
    if extra or (missing and not sampled):
        raise GapscopeInputError(f"{path}: ranks {rank_ranges(numbers)} of a world of {world}: "
                                 f"missing {rank_ranges(missing) or 'none'}"
                                 f"{f', extra ranks {rank_ranges(extra)}' if extra else ''}")
    return missing


def rank_ranges(numbers) -> str:
    """Rank numbers as runs: 0-1, 4, 6-127 (a 128-rank job missing 126 ranks is one line)."""
    out, ordered = [], sorted(numbers)
    for i, n in enumerate(ordered):
        if i and n == ordered[i - 1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def _sampled(job: Job, numbers: list[int], missing: list[int], why: str) -> Job:
    """The job with its missing ranks said once, where figures over every rank are bounds."""
    if missing:
        job.numbers = list(numbers)
        job.world = len(job.ranks) + len(missing)
        job.notes.append(f"warning: {len(job.ranks)} of {job.world} ranks present ({why}): missing "
                         f"{rank_ranges(missing)}; the job step and skew are lower bounds, no "
                         "straggler is named")
    return job


def without_failed(job: Job, failed: dict[int, str]) -> Job:
    """The job less the ranks whose analysis failed (each with why): they are missing ranks,
    as sampled ranks are, so the job step and skew become lower bounds, said once."""
    if not failed:
        return job
    keep = [(n, run) for n, run in zip(job.rank_numbers, job.ranks) if n not in failed]
    if not keep:
        first = min(failed)
        raise GapscopeInputError(f"job {job.run_id}: every rank failed to analyse "
                                 f"(rank {first}: {failed[first]})")
    numbers = [n for n, _ in keep]
    reasons = "; ".join(f"rank {n}: {failed[n]}" for n in sorted(failed)[:3])
    notes = [*job.notes, f"warning: rank {rank_ranges(failed)} failed to analyse ({reasons}"
             f"{'; ...' if len(failed) > 3 else ''}): missing {rank_ranges(job.missing + list(failed))}; "
             "the job step and skew are lower bounds, no straggler is named"]
    return Job(job.path, job.manifest, [run for _, run in keep],
               {n: h for n, h in job.hosts.items() if n not in failed}, job.foreign, notes,
               numbers, job.world_size)


def _load_rank(job_id: str, rank: int, place) -> Run:
    if isinstance(place, RunPlace):
        found = place.readable()
        problem = unfinished(found.manifest)
        if problem:
            raise GapscopeInputError(f"job {job_id} failed: rank {rank}: {problem}")
    return load_run(place, label=f"rank{rank}")


def _backend(trace: Path, lone: bool) -> str | None:
    # A lone rank is analysed in this process (the local engine runs one rank here): the trace
    # read for its tail is its run's. A job's ranks go to workers; the driver keeps none of theirs.
    info = distributed_info(trace, _read_ahead if lone else None)
    return info.get("backend") if info else None


def safe_child(folder: Path, name) -> Path:
    """A rank directory the manifest names, kept inside the job directory."""
    from gapscope.profilers.run_dir import inside
    try:
        return inside(folder, name)
    except Exception as exc:  # noqa: BLE001 - any refusal is the manifest's fault
        raise GapscopeInputError(f"{folder / MANIFEST}: rank directory {name!r}: {exc}") from None
