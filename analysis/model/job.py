"""A distributed run (a job) as the analyzers see it: its ranks, as located, checked to belong to
one job, each rank an ordinary Run."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from analysis.model.locate import (ForeignRanks, ForeignTrace, JobDir, JobPlace, RankDirs, RunPlace,
                                   distributed_info, foreign_ranks, locate, unfinished)
from analysis.model.run import Run, load_run
from profilers.errors import GapscopeInputError
from profilers.job_dir import rank_entries, root_cause
from profilers.run_dir import MANIFEST, effective_status


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


# -- loading a job -------------------------------------------------------------------------

def is_job(path) -> bool:
    """A job directory (manifest with "distributed"), a folder of rank run directories, or a
    folder of per-rank traces of at least two ranks (analysis.model.locate tells)."""
    return isinstance(locate(path), JobPlace)


def load_job(path) -> Job:
    place = locate(path)
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
    traces = foreign_ranks(place.path) if place.path.is_dir() else []
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
    _check_ranks(path, numbers, world)
    runs, hosts = [], {}
    for entry in sorted(entries, key=lambda e: e["rank"]):
        rank = entry["rank"]
        rank_dir = safe_child(path, entry.get("dir") or f"rank{rank}")
        if entry.get("status") not in (None, "complete"):
            raise GapscopeInputError(f"job {job_id} failed: rank {rank}: "
                                     f"{entry.get('error') or entry.get('status')}")
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
    return Job(path, manifest, runs, hosts)


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
    _check_ranks(path, [m["rank"] for m in manifests.values()], worlds.pop())
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
                "distributed": {"world_size": len(runs), "backend": first.get("backend"),
                                "launcher": None}}
    return Job(path, manifest, runs, {r: run.manifest.get("host") for r, run in enumerate(runs)})


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


def _load_rank(job_id: str, rank: int, place) -> Run:
    if isinstance(place, RunPlace):
        found = place.readable()
        problem = unfinished(found.manifest)
        if problem:
            raise GapscopeInputError(f"job {job_id} failed: rank {rank}: {problem}")
    return load_run(place, label=f"rank{rank}")


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
