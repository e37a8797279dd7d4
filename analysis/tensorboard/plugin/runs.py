"""Finds the runs under a TensorBoard logdir, each named by its path relative to it, through the
CLI's own expansion of folders (matrix, A/B and run folders: analysis.model.run.expand_runs); a
distributed job as its ranks."""
from __future__ import annotations

import os
from pathlib import Path

from gapscope.analysis.model.job import is_job, load_job
from gapscope.analysis.model.locate import ForeignTrace, Place, locate
from gapscope.analysis.readers.run_dir import TORCH_TRACE_GLOBS, XPLANE_GLOB, session_files, traces_by_content
from gapscope.analysis.model.run import RunEntry, expand_runs
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.run_dir import AB_STATE, MANIFEST, MATRIX_STATE

# Where the TF profiler writes its sessions inside a logdir (TensorBoard's profile layout).
PROFILE_DIR = Path("plugins", "profile")


def find_runs(logdir: str | Path, jobs: dict | None = None) -> dict[str, RunEntry]:
    """Every run under `logdir` by name, in path order. A folder gapscope cannot expand (a
    corrupt matrix state) is an entry with its problem, so the views can say why. `jobs`, where
    given, receives each distributed job by name: (its path, the Job as loaded or why not)."""
    logdir = Path(logdir)
    found: dict[str, RunEntry] = {}
    for folder in run_folders(logdir):
        try:
            entries = expand_runs([folder])
        except Exception as exc:  # noqa: BLE001 - one folder's problem, never the whole list's
            found[_name(logdir, folder)] = RunEntry(None, None, _reason(exc))
            continue
        for entry in entries:
            if entry.path is None:  # a matrix row that never made a run directory
                found[f"{_name(logdir, folder)}/{entry.label}"] = entry
            elif is_job(entry.place):
                found.update(_ranks(logdir, entry.place, {} if jobs is None else jobs))
            else:
                found.update(_sessions(logdir, entry) or {_name(logdir, entry.path): entry})
    return found


def _ranks(logdir: Path, place: Place, jobs: dict) -> dict[str, RunEntry]:
    """A distributed job as its ranks, `<job>/rank<r>` each, labelled with the job: the views
    show them side by side like any runs. A job that failed is one entry saying which rank."""
    name = _name(logdir, place.path)
    try:
        job = load_job(place)
    except Exception as exc:  # noqa: BLE001 - as in find_runs
        jobs[name] = (place.path, exc)
        return {name: RunEntry(None, None, _reason(exc))}
    jobs[name] = (place.path, job)
    return {f"{name}/rank{r}": RunEntry(f"{job.label} rank{r}", run.located.path, place=run.place)
            for r, run in zip(job.rank_numbers, job.ranks)}


def _sessions(logdir: Path, entry: RunEntry) -> dict[str, RunEntry]:
    """A folder of several profiler sessions (not a job's ranks) as one run per session, each
    named by its file: the CLI asks which one is meant, the tab shows them all."""
    place = entry.place
    if not (isinstance(place, ForeignTrace) and place.problem is not None and place.path.is_dir()):
        return {}
    traces = session_files(place.path)
    if len(traces) < 2:
        return {}
    return {_name(logdir, trace): RunEntry(None, trace, place=locate(trace)) for trace in traces}


def _reason(exc: Exception) -> str:
    """The one line a view shows: the input's own fault as said, anything else named as ours."""
    text = " ".join(str(exc).split())[:300]
    if isinstance(exc, GapscopeInputError):
        return text
    return f"gapscope could not read this folder ({type(exc).__name__}: {text})"


def run_folders(logdir: Path):
    """Folders that are runs or hold runs the CLI knows how to expand: a gapscope run
    directory, a matrix or A/B folder, or any folder with profiler output of its own (a
    torch.profiler trace beside it, or the TF profiler's plugins/profile). Not descended into."""
    for folder, subfolders, files in os.walk(logdir):
        here = Path(folder)
        if (MANIFEST in files or MATRIX_STATE in files or AB_STATE in files
                or _holds_traces(here, files)):
            subfolders.clear()
            yield here
        else:
            subfolders.sort()


def _holds_traces(folder: Path, files: list[str]) -> bool:
    if any(Path(name).match(glob) for name in files for glob in TORCH_TRACE_GLOBS):
        return True
    # Other tools' names (HTA's worker0.1629....json, rank-0.json.gz): a trace by its head, as
    # the CLI's finder takes it; a folder of more candidates than it reads is not searched.
    if traces_by_content([folder / name for name in files]):
        return True
    profile = folder / PROFILE_DIR
    return profile.is_dir() and next(profile.rglob(XPLANE_GLOB), None) is not None


def _name(logdir: Path, path: Path) -> str:
    """The run's name in the views and in requests: its path under the logdir ('.' for the
    logdir itself), the way TensorBoard names runs."""
    return path.relative_to(logdir).as_posix()
