"""What a path is, found out once and kept as a typed Place (a run, a foreign trace, a job, foreign
ranks, a folder of runs, an A/B, matrix or sweep folder) that every loader takes."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from gapscope.analysis.readers import run_dir as run_files
from gapscope.analysis.readers import safe_files
from gapscope.analysis.readers.run_dir import HEAD_BYTES, Located, find_torch_traces
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.run_dir import (AB_STATE, INTERRUPTED_STATUS, MANIFEST, MATRIX_STATE, SWEEP_STATE,
                               USER_VARIANT, effective_status)

# A foreign trace's rank where its distributedInfo is missing: from its file name, or the name
# of the folder holding it. Only an explicit "rank" (rank1, rank_1, rank-1, RANK1) counts: the
# profiler's default file name is <host>_<pid>.<time>.pt.trace.json, so a bare "_1." would
# take a pid for a rank.
_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])rank[_-]?(\d+)(?!\d)", re.IGNORECASE)
_INFO = re.compile(rb'"distributedInfo"\s*:\s*')


@dataclass(frozen=True)
class Place:
    path: Path


@dataclass(frozen=True)
class RunPlace(Place):
    """A gapscope run directory: its files found and its manifest read, or why they cannot be."""

    files: Located | None = None
    problem: GapscopeInputError | None = None

    @property
    def manifest(self) -> dict | None:
        return self.files.manifest if self.files is not None else None

    def readable(self) -> Located:
        """Its files; a path that cannot be read (no such file, a FIFO, a corrupt manifest)
        refused with why."""
        if self.problem is not None:
            raise self.problem
        return self.files

    def analysable(self) -> Located:
        """Its files, refused also when the run failed or did not finish."""
        found = self.readable()
        problem = unfinished(found.manifest)
        if problem:
            raise GapscopeInputError(problem)
        return found


@dataclass(frozen=True)
class ForeignTrace(RunPlace):
    """Profiler output gapscope did not capture: a trace file, or a folder holding traces."""


@dataclass(frozen=True)
class JobPlace(Place):
    """A distributed job, in one of the three shapes below."""


@dataclass(frozen=True)
class JobDir(JobPlace):
    """A job directory gapscope wrote: its manifest names the job's ranks."""

    manifest: dict


@dataclass(frozen=True)
class RankDirs(JobPlace):
    """Rank run directories copied together by hand, without a job manifest."""

    ranks: tuple[RunPlace, ...]


@dataclass(frozen=True)
class ForeignRanks(JobPlace):
    """Per-rank torch traces in one folder: (rank, (trace, world size or None)) each."""

    traces: tuple[tuple[int, tuple[Path, int | None]], ...]


@dataclass(frozen=True)
class RunsFolder(Place):
    """A folder of run directories (or jobs), each located."""

    runs: tuple[Place, ...]


@dataclass(frozen=True)
class ABFolder(RunsFolder):
    """The runs of an A/B measurement (ab.json): configurations in interleaved repeats."""


@dataclass(frozen=True)
class MatrixFolder(Place):
    """A matrix's folder (matrix.json): its rows name their runs."""


@dataclass(frozen=True)
class SweepFolder(Place):
    """A sweep's folder (sweep.json): one A/B folder per point."""


def locate(path: str | Path, session: str | None = None) -> Place:
    """What `path` is. Reads each manifest it needs once and keeps it; never raises for what
    a file holds (the Place keeps the problem, for the loader to say when the path is used).
    `session` (--session) makes it a folder of trace sessions, one or all of them chosen."""
    if isinstance(path, Place):
        return path
    path = Path(path)
    if session is not None:
        return _run(path, ForeignTrace, session)
    if not path.is_dir():
        return _run(path, ForeignTrace)
    if (path / MATRIX_STATE).is_file():
        return MatrixFolder(path)
    if (path / SWEEP_STATE).is_file():
        return SweepFolder(path)
    if (path / MANIFEST).is_file():
        return _run(path, RunPlace)
    children = tuple(locate(child) for child in sorted(p for p in path.iterdir() if p.is_dir())
                     if (child / MANIFEST).is_file())
    ranks = tuple(c for c in children if isinstance(c, RunPlace) and c.problem is None
                  and isinstance(c.manifest.get("rank"), int))
    if ranks:
        return RankDirs(path, ranks)
    traces = foreign_ranks(path)
    if len({rank for rank, _ in traces}) >= 2:
        return ForeignRanks(path, tuple(traces))
    if children:
        return (ABFolder if (path / AB_STATE).is_file() else RunsFolder)(path, children)
    return _run(path, ForeignTrace)


def nested_folders(folder: str | Path) -> list[tuple[Path, str]]:
    """(path, kind) of each A/B, matrix or sweep folder directly inside a folder of runs: a
    folder breakdown covers the runs beside them, not theirs, and must say so."""
    folder = Path(folder)
    if not folder.is_dir() or (folder / MANIFEST).is_file():
        return []
    kinds = ((AB_STATE, "an A/B folder"), (MATRIX_STATE, "a matrix folder"), (SWEEP_STATE, "a sweep folder"))
    return [(child, kind) for child in sorted(p for p in folder.iterdir() if p.is_dir())
            for state, kind in kinds if (child / state).is_file()]


def _run(path: Path, kind: type[RunPlace], session: str | None = None) -> Place:
    """A run directory or a foreign trace; a job directory where the manifest says so."""
    try:
        if kind is RunPlace:
            manifest = run_files.read_manifest(path / MANIFEST)
            if isinstance(manifest.get("distributed"), dict):
                return JobDir(path, manifest)
            return RunPlace(path, run_files.run_files(path, manifest))
        return kind(path, run_files.find_files(path, session))
    except GapscopeInputError as exc:
        return kind(path, problem=exc)


def unfinished(manifest: dict | None) -> str | None:
    """Why a run cannot be analysed (failed, still running), or None. A run that ended early
    (stopped_early) is analysed: its steps are what it recorded."""
    if manifest is None:
        return None
    status, error = effective_status(manifest)
    if status == "complete" or stopped_early(manifest):
        return None
    if status == "failed":
        return f"run {manifest['run_id']} failed: {error}"
    return f"run {manifest['run_id']} did not finish (status {status!r}): still running or killed"


def stopped_early(manifest: dict | None) -> str | None:
    """How a run that recorded steps and then stopped ended, in a few words: a capture marked
    `interrupted` (a signal, an exception in the loop), or a capture killed outright, still
    `running` with its process gone (its steps.csv holds the steps flushed by then); None for
    any other run (gapscope's own runs write their steps at their end: a killed one has none)."""
    if not manifest:
        return None
    status, error = effective_status(manifest)
    if status == INTERRUPTED_STATUS:
        signal = manifest.get("stopped_by")
        return f"interrupted ({signal})" if signal else \
            "interrupted" if error in (None, "interrupted") else f"interrupted ({error})"
    if manifest.get("status") == "running" and status == "failed" and manifest.get("variant") == USER_VARIANT:
        return f"killed: {error}"
    return None


def foreign_ranks(folder: Path, read_lone=None) -> list[tuple[int, tuple[Path, int | None]]]:
    """(rank, (trace, world size or None)) for each torch trace under `folder` that says its
    rank; a folder where some trace has none is no foreign job. A folder of one trace is a job
    only as a lone rank: without `read_lone` (distributed_info's read_whole), none is looked at."""
    traces = sorted(p for p in find_torch_traces(folder, lambda p: not _in_run_dir(p, folder))
                    if safe_files.is_readable_regular_file(p))
    if len(traces) == 1 and read_lone is None:
        return []
    found = []
    for trace in traces:
        info = distributed_info(trace, read_lone if len(traces) == 1 else None)
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


def distributed_info(trace: Path, read_whole=None) -> dict | None:
    """The trace's `distributedInfo` object (backend, rank, world_size), read from its head,
    else from its tail: newer Kineto writes it after traceEvents, and a lone or sampled rank
    was missed there. A gzip has no tail to seek to: given `read_whole` (a trace reader whose
    answer its run takes over, kept_traces), a gzip is read whole for it instead of inflated
    twice, once for its tail and once for its run."""
    for read in (safe_files.read_head, safe_files.read_tail):
        try:
            if read is safe_files.read_tail and read_whole is not None and safe_files.is_gzip(trace):
                return read_whole(trace).metadata.get("distributed_info")
            part = read(trace, HEAD_BYTES)
        except GapscopeInputError:
            return None
        match = _INFO.search(part)
        if not match:
            continue
        try:
            info, _ = json.JSONDecoder().raw_decode(part[match.end():].decode("utf-8", "replace"))
        except ValueError:
            return None
        return info if isinstance(info, dict) else None
    return None
