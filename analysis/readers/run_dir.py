"""Finds the files of one run (a gapscope run directory, any folder, or one trace file) and reads
the run directory's own files: manifest.json and steps.csv. What a path is (a run, a job, a
folder of runs) is analysis.model.locate's to say."""
from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from gapscope.analysis.readers import safe_files, sessions, step_rows, validate
from gapscope.profilers import state_json
from gapscope.profilers.errors import GapscopeInputError, TraceFormatError
from gapscope.profilers.run_dir import ENDED, MANIFEST, STEPS_CSV, with_marked_failure

TORCH_TRACE_GLOBS = ("*.pt.trace.json", "*.pt.trace.json.gz")
# Other tools name torch traces as they like (HTA's worker0.1629....json, rank-0.json.gz): in a
# folder no gapscope run wrote, such files are traces when their head says so.
CONTENT_GLOBS = ("*.json", "*.json.gz")
# Kineto writes these keys before traceEvents; distributedInfo may list every process group.
HEAD_BYTES = 256 * 1024
# A Kineto trace is an object with traceEvents and one of Kineto's own keys: TensorFlow's trace
# viewer JSON and other Chrome traces hold traceEvents too, but are no torch trace.
_KINETO_KEYS = (b'"schemaVersion"', b'"deviceProperties"', b'"distributedInfo"')
# Those keys may come last (HF-harness/TraceLens traces put a metadata block first and
# schemaVersion at the end): then its events' categories, Kineto's own, say what it is.
_KINETO_EVENT = re.compile(
    rb'"cat"\s*:\s*"(?:cpu_op|user_annotation|gpu_user_annotation|python_function|kernel|cuda_runtime|'
    rb'cuda_driver|gpu_memcpy|gpu_memset|cpu_instant_event|Operator|Runtime|Kernel|Memcpy|Memset)"')
# Each candidate's head is read: a folder with more .json files than this is refused, not searched.
MAX_CANDIDATES = 1000
XPLANE_GLOB = "*.xplane.pb"
# Where gapscope writes a torch run's trace as an XSpace for TensorBoard's profile plugin (a
# session of its own): a view of the run's trace, never taken for the trace itself.
EXPORTED_XSPACE_DIR = ("plugins", "profile", "gapscope")


@dataclass
class Located:
    path: Path
    manifest: dict | None = None
    steps_csv: Path | None = None
    torch_traces: list[Path] = field(default_factory=list)
    xplanes: list[Path] = field(default_factory=list)
    # Files named like traces that are no readable regular file (FIFO, device, bad symlink),
    # with why: never opened, reported instead.
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    # Several sessions chosen together (--session all): torch_traces are read as one trace.
    combined: bool = False
    # .json files of a folder no gapscope run wrote that are no torch trace, with why.
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def trace_files(self) -> list[Path]:
        return self.torch_traces + self.xplanes


def find_files(path: str | Path, session: str | None = None) -> Located:
    """The files of one run: a run directory, a folder holding traces, or one trace file;
    `session` chooses among a folder's several sessions (sessions.choose)."""
    path = Path(path)
    if not path.is_dir():
        if session is not None:
            raise GapscopeInputError(f"--session {session}: {path} is one file; --session chooses "
                                     "among the sessions of a folder")
        if not path.exists() and not path.is_symlink():
            raise GapscopeInputError(f"{path}: no such file or directory")
        problem = safe_files.why_unreadable(path)
        if problem:
            raise TraceFormatError(f"{path}: cannot read ({problem})")
        if path.name.endswith(".xplane.pb"):
            return Located(path, xplanes=[path])
        return Located(path, torch_traces=[path])
    return run_files(path, read_manifest(path / MANIFEST) if _present(path / MANIFEST) else None,
                     session)


def run_files(path: Path, manifest: dict | None, session: str | None = None) -> Located:
    """The files of the run folder `path`, whose manifest has been read already (or is None)."""
    found = _all_files(path, manifest)
    if manifest is None:
        return _one_session(found, session)
    if session is not None:
        raise GapscopeInputError(f"--session {session}: {path} is a gapscope run directory, "
                                 "one session; --session chooses among a folder's sessions")
    return found


def session_files(folder: Path) -> list[Path]:
    """The trace sessions of a folder no gapscope run wrote, one file each, as --session
    numbers them (what a view lists as one run each)."""
    found = _all_files(folder, None)
    return sessions.ordered(getattr(found, _session_kind(found)))


def _all_files(path: Path, manifest: dict | None) -> Located:
    if manifest is not None:
        manifest = with_marked_failure(path, manifest)
    steps = path / STEPS_CSV
    found = Located(path, manifest, steps if _present(steps) else None)
    torch_traces = find_torch_traces(path, by_content=manifest is None, skipped=found.skipped)
    xplanes = [p for p in path.rglob(XPLANE_GLOB) if p.parent.parts[-3:] != EXPORTED_XSPACE_DIR]
    for candidate in torch_traces + xplanes:
        problem = safe_files.why_unreadable(candidate)
        if problem:
            found.unreadable.append((candidate, problem))
    bad = {p for p, _ in found.unreadable}
    # Newest first: a folder written by several profiler cycles holds one file per cycle.
    found.torch_traces = _newest_first(p for p in torch_traces if p not in bad)
    found.xplanes = _newest_first(p for p in xplanes if p not in bad)
    return found


def _one_session(found: Located, session: str | None) -> Located:
    """A folder no gapscope run wrote: its sessions, when several, are the user's to choose
    (never silently the newest); chosen together, torch traces are read as one run."""
    kind = _session_kind(found)
    several = getattr(found, kind)
    if session is None:
        if len(several) > 1:
            raise GapscopeInputError(sessions.refusal(found.path, several))
        return found
    chosen = sessions.choose(found.path, several, session)
    setattr(found, kind, chosen)
    found.combined = len(chosen) > 1
    return found


def find_torch_traces(folder: Path, keep=None, by_content: bool = True,
                      skipped: list | None = None) -> list[Path]:
    """The torch traces under `folder`: named as torch names them, and (by_content) other .json
    and .json.gz files whose head is a Kineto trace's; `keep` drops files before any is read.
    `skipped` gets (file, why) for each .json file read and found to be no trace."""
    keep = keep or (lambda _: True)
    named = {p for g in TORCH_TRACE_GLOBS for p in folder.rglob(g) if keep(p)}
    if not by_content:
        return sorted(named)
    others = sorted({p for g in CONTENT_GLOBS for p in folder.rglob(g)} - named)
    others = [p for p in others if keep(p) and safe_files.is_readable_regular_file(p)]
    if len(others) > MAX_CANDIDATES:
        raise GapscopeInputError(f"{folder}: over {MAX_CANDIDATES:,} .json files to look "
                                 "through for torch traces: give the trace file's path")
    traces = set(named)
    for candidate in others:
        why = kineto_problem(candidate)
        if why is None:
            traces.add(candidate)
        elif skipped is not None:
            skipped.append((candidate, why))
    return sorted(traces)


def traces_by_content(files: list[Path]) -> list[Path]:
    """Of `files`, those named like other tools' traces (*.json, *.json.gz) whose head is a
    Kineto trace's; none where there are more candidates than find_torch_traces reads."""
    candidates = [p for p in files if any(p.match(g) for g in CONTENT_GLOBS)
                  and safe_files.is_readable_regular_file(p)]
    if len(candidates) > MAX_CANDIDATES:
        return []
    return [p for p in candidates if is_kineto_trace(p)]


def _session_kind(found: Located) -> str:
    # TF writes one .xplane.pb per host and session; beside torch traces they are not the trace.
    return "torch_traces" if found.torch_traces else "xplanes"


def is_kineto_trace(path: Path) -> bool:
    return kineto_problem(path) is None


def kineto_problem(path: Path) -> str | None:
    """Why the file's head is no Kineto trace's, None where it is one: a JSON object holding
    traceEvents and one of Kineto's own keys or event categories (whatever the schema version)."""
    try:
        head = safe_files.read_head(path, HEAD_BYTES)
    except GapscopeInputError as exc:
        return str(exc).rpartition(": ")[2] or "cannot read"
    named = validate.other_format(head)
    if named:
        return named
    if head.lstrip()[:1] != b"{":
        return "not a JSON object"
    events = head.find(b'"traceEvents"')
    if events < 0:
        return f"no traceEvents in its first {HEAD_BYTES >> 10} kB"
    if any(key in head for key in _KINETO_KEYS) or _KINETO_EVENT.search(head, events):
        return None
    return "traceEvents without Kineto's keys or event categories (another tool's Chrome trace)"


def exported_xspace_dir(run_dir: Path) -> Path:
    return run_dir.joinpath(*EXPORTED_XSPACE_DIR)


def _present(path: Path) -> bool:
    """Whether the run has this file at all: a dangling symlink counts, so that reading it
    says why it cannot be read instead of acting as if it were not there."""
    return path.exists() or path.is_symlink()


def _newest_first(paths) -> list[Path]:
    return sorted(paths, key=lambda p: (p.stat().st_mtime, str(p)), reverse=True)


def read_manifest(path: Path) -> dict:
    try:
        manifest = state_json.load(path)
    except state_json.StateFileError as exc:
        raise TraceFormatError(f"unreadable manifest: {exc}") from None
    except OSError as exc:
        raise TraceFormatError(f"{path}: unreadable manifest ({exc.strerror or exc})") from None
    if not isinstance(manifest, dict) or "run_id" not in manifest:
        raise TraceFormatError(f"{path}: not a gapscope manifest (no run_id)")
    for key, kinds in _FIELD_TYPES.items():
        value = manifest.get(key)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)
                                  and bool not in kinds):
            raise TraceFormatError(f"{path}: field {key!r} should be {_KIND_NAMES[kinds]}, "
                                   f"not {_shown(value)}")
    if manifest.get("status") not in (None, "running", *ENDED):
        raise TraceFormatError(f"{path}: unknown status {_shown(manifest['status'])}")
    _check_values(path, manifest)
    return manifest


# The framework paths gapscope writes runs of (workloads.registry.FRAMEWORKS; the reader does
# not import the runners' side).
FRAMEWORKS = ("torch", "keras", "keras-torch", "keras-jax", "tf")
# No run has more steps than --steps allows (10,000,000).
MAX_STEPS = 10**9


def _check_values(path: Path, manifest: dict) -> None:
    """Values of the right type that no run writes (-5 warm-up steps, framework "jax", a trace
    window that ends before it starts): refused, since every figure would rest on them."""
    for key in ("warmup_steps", "steps_run", "steps_per_epoch"):
        value = manifest.get(key)
        if value is not None and not 0 <= value <= MAX_STEPS:
            raise TraceFormatError(f"{path}: field {key!r} should be 0 to {MAX_STEPS:,}, "
                                   f"not {_shown(value)}")
    framework = manifest.get("framework")
    if framework is not None and framework not in FRAMEWORKS:
        raise TraceFormatError(f"{path}: unknown framework {_shown(framework)} "
                               f"(gapscope writes {', '.join(FRAMEWORKS)})")
    window = manifest.get("trace_window")
    if window is not None and not (
            isinstance(window, list) and len(window) == 2
            and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= MAX_STEPS
                    for n in window) and window[0] <= window[1]):
        raise TraceFormatError(f"{path}: field 'trace_window' should be [first, last] steps, "
                               f"not {_shown(window)}")


# What the analyzers read from a manifest, checked once here: a hand-edited or foreign manifest
# is refused in one line rather than failing deep inside an analyzer.
_INT, _TEXT, _TABLE, _NUMBER = (int,), (str,), (dict,), (int, float)
_FIELD_TYPES = {
    "run_id": _TEXT, "status": _TEXT, "error": _TEXT, "workload": _TEXT, "framework": _TEXT,
    "variant": _TEXT, "device": _TEXT, "host": _TEXT, "started_at": _TEXT, "ended_at": _TEXT,
    "warmup_steps": _INT, "steps_run": _INT, "steps_per_epoch": _INT, "pid": _INT,
    "settings": _TABLE, "resources": _TABLE, "versions": _TABLE, "workload_spec": _TABLE,
    "final_loss": _NUMBER,
}
_KIND_NAMES = {_INT: "a whole number", _TEXT: "text", _TABLE: "a JSON object", _NUMBER: "a number"}


def _shown(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:40]}..."


def read_steps_csv(path: Path) -> list[dict]:
    """Rows of steps.csv that are valid measurements, numbers parsed (see read_steps)."""
    return read_steps(path)[0]


def read_steps(path: Path) -> tuple[list[dict], Counter]:
    """Rows of steps.csv with numbers parsed (an empty phase cell, a phase not timed, is None),
    checked as the trace readers check events (step_rows), and the rows dropped, by why."""
    try:
        text = safe_files.read_bytes(path, safe_files.MAX_SIDE_FILE_BYTES).decode()
        rows = step_rows.plain_table(text)
        if rows is not None:
            return rows, Counter()
        with io.StringIO(text, newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is None or not {"step", "step_ms"} <= set(header):
                raise TraceFormatError(f"{path}: not a gapscope steps.csv (no step and step_ms columns)")
            raw = [row for row in reader if row]
        # An unreadable last line with no line end: a run killed while appending it (live steps).
        partial = bool(raw) and not text.endswith("\n") \
            and step_rows.row_problem(step_rows.as_dict(header, raw[-1])) is not None
        rows, dropped = step_rows.checked_table(path, header, raw[:-1] if partial else raw)
        if partial:
            dropped[step_rows.PARTIAL_LINE] += 1
        return rows, dropped
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except (ValueError, csv.Error) as exc:  # UnicodeDecodeError; a cell over csv's field limit
        raise TraceFormatError(f"{path}: corrupt steps.csv ({str(exc)[:160]})") from None
