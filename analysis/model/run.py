"""One run as every analyzer sees it: located, refused if unfinished, its files read once
(manifest, steps, resources, trace, HLO metadata), labelled, and its phase timeline built once."""
from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path

from gapscope.analysis.model import kept_traces
from gapscope.analysis.readers.compile_records import read_compile_records, steps_compiling_after
from gapscope.analysis.readers.resources_csv import RESOURCES_CSV, read_resources_csv
from gapscope.analysis.readers import step_rows
from gapscope.analysis.model.locate import (JobPlace, MatrixFolder, Place, RunPlace, RunsFolder, SweepFolder, locate,
                                   stopped_early, unfinished)
from gapscope.analysis.readers import run_dir as run_files
from gapscope.analysis.readers.run_dir import Located, read_steps
from gapscope.analysis.events.timeline import PhaseTimeline, phase_timeline
from gapscope.analysis.events.trace import Trace
from gapscope.analysis.events.trace_rules import TraceRules
from gapscope.profilers import state_json
from gapscope.profilers.errors import GapscopeInputError, TraceFormatError
from gapscope.profilers.executions import warmup_updates
from gapscope.profilers.phases import MARKED_PHASES
from gapscope.profilers.run_dir import AB_STATE, MATRIX_STATE, effective_status, inside

XLA_DUMP_DIR = "xla_dump"
# What the command line says about the traces' own names (--phase, --step-marker): set once
# around a command, so that every run it loads, however deep in an analyzer, reads its trace
# by them; the job workers take them over with use_rules.
_RULES: contextvars.ContextVar[TraceRules] = contextvars.ContextVar("trace_rules", default=TraceRules())


def current_rules() -> TraceRules:
    return _RULES.get()


def use_rules(rules: TraceRules) -> None:
    """The rules for the rest of this process (a job worker's initializer)."""
    _RULES.set(rules)


@contextlib.contextmanager
def reading_rules(rules: TraceRules):
    """Runs loaded inside read their traces by `rules`."""
    token = _RULES.set(rules)
    try:
        yield
    finally:
        _RULES.reset(token)


@dataclass
class Run:
    located: Located
    label: str
    rows: list[dict] | None = None        # steps.csv, every valid step of the run
    notes: list[str] = field(default_factory=list)
    # The warm-up steps.csv's own `warmup` column records: what a run without manifest uses.
    rows_warmup: int | None = None
    place: RunPlace | None = field(default=None, repr=False)  # as located, for a worker to load again
    rules: TraceRules = field(default_factory=current_rules)  # --phase, --step-marker

    @property
    def path(self) -> Path:
        return self.located.path

    @property
    def manifest(self) -> dict:
        return self.located.manifest or {}

    @property
    def run_id(self) -> str:
        return self.manifest.get("run_id") or self.path.name

    @property
    def settings(self) -> dict:
        settings = self.manifest.get("settings")
        return settings if isinstance(settings, dict) else {}

    @property
    def warmup_steps(self) -> int:
        """Updates before the steady state: the warm-up, rounded up to a whole call where one
        compiled call runs several updates (a call that compiled is not steady anywhere)."""
        warmup = _int_field(self.manifest, "warmup_steps", self.rows_warmup or 0)
        spe = self.settings.get("steps_per_execution", 1)
        per_epoch = _int_field(self.manifest, "steps_per_epoch", 0)
        if not isinstance(spe, int) or spe <= 1 or per_epoch <= 0 or warmup == 0:
            return warmup
        return warmup_updates(warmup, spe, per_epoch, _int_field(self.manifest, "steps_run", warmup))

    @property
    def runs_phases(self) -> tuple[str, ...]:
        """An inference run has no backward or optimizer."""
        return ("data_load", "forward") if self.settings.get("inference") else MARKED_PHASES

    @property
    def framework(self) -> str | None:
        framework = self.manifest.get("framework")
        if framework:
            return framework
        if self.located.torch_traces:
            return "torch"
        if not self.located.xplanes:
            return None
        # An XSpace is TensorFlow's unless its reader found JAX's marks (once it has been read).
        trace = self.__dict__.get("trace")
        return (trace.metadata.get("framework") if trace is not None else None) or "tensorflow"

    @property
    def trace_file(self) -> Path | None:
        return self.located.trace_files[0] if self.located.trace_files else None

    @functools.cached_property
    def trace(self) -> Trace | None:
        """Read on first use only: a timer breakdown needs no trace."""
        unreadable = self.located.unreadable
        if self.trace_file is None:
            if unreadable:  # named as a trace, so meant as one: say why it cannot be read
                path, why = unreadable[0]
                raise TraceFormatError(f"{path}: cannot read ({why})")
            skipped = self.located.skipped
            if skipped and not self.manifest and self.rows is None:  # a folder of .json files
                raise TraceFormatError(
                    f"{self.path}: holds no trace file; skipped " + "; ".join(
                        f"{p.name} ({why})" for p, why in skipped[:5])
                    + (f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""))
            return None
        if unreadable:
            self.notes.append(f"skipped {len(unreadable)} file(s) named like traces that cannot "
                              f"be read: " + ", ".join(f"{p.name} ({why})" for p, why in unreadable[:3]))
        if self.located.combined:
            from gapscope.analysis.readers.sessions import read_combined
            trace, note = read_combined(self.located.torch_traces, read_trace)
            self.notes.append(note)
            return trace
        if len(self.located.trace_files) > 1:
            self.notes.append(f"{len(self.located.trace_files)} trace files found; "
                              f"used {self.trace_file.name}")
        return read_trace(self.trace_file)

    @functools.cached_property
    def timeline(self) -> PhaseTimeline | None:
        return None if self.trace is None else phase_timeline(self.trace, self.rules)

    @functools.cached_property
    def hlo(self):
        """HLO metadata of the XLA ops in the trace: the HloProto inside the profile (parsed
        once, by the reader), else the run's XLA text dump; None when no XLA program ran."""
        trace = self.trace
        if trace is None or not any(e.hlo_op for e in trace.events):
            return None
        if trace.metadata.get("hlo_modules") is not None:
            return trace.metadata["hlo_modules"]
        dump = self.path / XLA_DUMP_DIR
        if self.path.is_dir() and dump.is_dir():
            from gapscope.analysis.readers.hlo_text import read_hlo_dump_dir
            return read_hlo_dump_dir(dump)
        return None

    @functools.cached_property
    def compile_records(self) -> dict | None:
        """compile.json: what torch.compile or tf.function compiled, step by step; None without."""
        return read_compile_records(self.path) if self.path.is_dir() else None

    @functools.cached_property
    def resources(self) -> list[dict] | None:
        path = self.path / RESOURCES_CSV
        return read_resources_csv(path) if self.path.is_dir() and path.exists() else None


def read_trace(path: Path) -> Trace:
    """The reader for the file's format: the only place that picks one (a trace read ahead of
    its run, to tell whether it is a lone rank, is taken over)."""
    kept = kept_traces.take(path)
    if kept is not None:
        return kept
    if path.name.endswith(".xplane.pb"):
        from gapscope.analysis.readers.xplane import read_xplane
        return read_xplane(path)
    from gapscope.analysis.readers.torch_trace import read_torch_trace
    return read_torch_trace(path)


def load_run(path: str | Path | Place, label: str | None = None) -> Run:
    """The run at `path` (a run directory, a folder holding a trace, or a trace file, or its
    Place as located); a run that failed or did not finish is refused with the reason."""
    place = locate(path)
    if isinstance(place, JobPlace):  # its ranks' traces would be taken for one run's
        raise GapscopeInputError(f"{place.path}: a distributed job of several ranks: name one "
                                 "rank's directory, or use breakdown, compare or report on the job")
    # A folder of runs named as one run is read as a folder holding traces.
    found = place.analysable() if isinstance(place, RunPlace) else _folder_files(place.path)
    rows, dropped = read_steps(found.steps_csv) if found.steps_csv else (None, None)
    run = Run(found, label or run_label(found.manifest, found.path), rows,
              place=place if isinstance(place, RunPlace) else None)
    stopped = stopped_early(found.manifest)
    if stopped:
        run.notes += _stopped_notes(run, stopped)
    if dropped:
        run.notes.append(f"steps.csv: {sum(dropped.values()):,} invalid row(s) dropped "
                         f"({step_rows.describe(dropped)})")
    if rows and found.manifest is None:
        run.rows_warmup = step_rows.warmup_from_rows(rows)
        if run.rows_warmup is None:
            run.notes.append("no manifest.json and no warmup column in steps.csv: the warm-up is "
                             "unknown, so every step counts as steady (compile time included)")
    if rows:
        step_rows.mark_compiling(rows, steps_compiling_after(run.compile_records, run.warmup_steps))
    return run


def _stopped_notes(run: Run, how: str) -> list[str]:
    """What a run that stopped early can still say: its recorded steps, and where the trace its
    window was to write is missing (a process killed inside the window writes none)."""
    if not run.rows and run.trace_file is None:
        raise GapscopeInputError(f"run {run.run_id} {how} before it recorded a whole step: "
                                 "nothing to analyse")
    if not run.rows:
        return [f"run {how} before its steps.csv was written: figures from its trace alone"]
    notes = [f"run {how}: these figures are of the {len(run.rows):,} steps it recorded"]
    window = run.settings.get("trace_steps")
    if run.trace_file is None and isinstance(window, list) and window and isinstance(window[0], int) \
            and max(r["step"] for r in run.rows) >= window[0]:
        notes.append("no trace file: the run stopped inside its trace window before the trace "
                     "was written; figures from steps.csv alone")
    return notes


def _folder_files(path: Path) -> Located:
    found = run_files.find_files(path)
    problem = unfinished(found.manifest)
    if problem:
        raise GapscopeInputError(problem)
    return found


class Runs:
    """The runs one command reads: a path named twice (a run compared with itself) gives one
    Run, so its trace is read and segmented once per command."""

    def __init__(self):
        self._loaded: dict[tuple[str, str | None], Run] = {}

    def load(self, path: str | Path | Place, label: str | None = None) -> Run:
        where = path.path if isinstance(path, Place) else path
        key = (os.path.realpath(where), label)  # realpath: a symlink loop stays a key, not an error
        if key not in self._loaded:
            self._loaded[key] = load_run(path, label)
        return self._loaded[key]


def run_label(manifest: dict | None, path: Path) -> str:
    """workload, framework and variant, the name people use for a run."""
    if not manifest:
        return path.name
    parts = [manifest.get("workload"), manifest.get("framework"), manifest.get("variant")]
    return " ".join(str(p) for p in parts if p and p not in ("default",))


def unique_labels(labels: list[str], ids: list[str], files: list | None = None) -> list[str]:
    """Two runs of the same configuration: their ids' random tails tell them apart, and a
    number where even those agree (the same trace named twice). Two trace files of one name
    (`files`: each run's trace file), labelled by that name, are told apart by their folders."""
    def counted(names):
        return {n: names.count(n) for n in names}
    counts = counted(labels)
    if files:
        folders = [Path(f).parent.name if f else "" for f in files]
        by_folder = [f"{folder}/{label}" if counts[label] > 1 and f and Path(f).name == label
                     and folder else label for label, f, folder in zip(labels, files, folders)]
        if len(set(by_folder)) > len(set(labels)):
            labels = by_folder
            counts = counted(labels)
    tailed = [f"{label} #{str(run_id).rsplit('-', 1)[-1]}" if counts[label] > 1 else label
              for label, run_id in zip(labels, ids)]
    counts = counted(tailed)
    return [f"{name} ({i + 1})" if counts[name] > 1 else name for i, name in enumerate(tailed)]


@dataclass
class RunEntry:
    """One run named on a command line: its path and what it is (located once), or why there is
    none (a matrix row that was skipped or failed before it made a run directory)."""

    label: str | None
    path: Path | None
    problem: str | None = None
    place: Place | None = None

    def __post_init__(self):
        if self.path is not None and self.place is None:
            self.place = locate(self.path)


def expand_runs(paths) -> list[RunEntry]:
    """Each path as given, except a folder that is not itself a run: a matrix or A/B folder
    gives its runs in order, any other folder the run directories it holds, in name order."""
    entries = []
    for path in map(Path, paths):
        if not path.exists() and not path.is_symlink():  # a bad symlink: load_run says why
            raise GapscopeInputError(f"{path}: no such file or directory")
        place = locate(path)
        if isinstance(place, MatrixFolder):
            entries += _matrix_rows(path)
        elif isinstance(place, SweepFolder):
            # Its runs hold other batch sizes or widths: one table over them all would mix
            # points, and its first trace alone is not the sweep.
            points = sorted(p.name for p in path.iterdir() if (p / AB_STATE).is_file())
            one = f"; one point's runs: gapscope compare {path / points[0]}" if points else ""
            raise GapscopeInputError(f"{path} is a sweep: gapscope sweep {path} reports it{one}")
        elif isinstance(place, RunsFolder):  # an A/B folder too
            entries += [RunEntry(None, child.path, place=child) for child in place.runs]
        else:  # a run, a foreign trace or a job: one entry (a job's rank directories are no runs)
            entries.append(RunEntry(None, path, place=place))
    if not entries:
        raise GapscopeInputError("no runs given")
    return entries


def is_measurement(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / AB_STATE).is_file()


def load_measurement(folder: str | Path) -> list[list[Run]]:
    """The runs of an A/B folder, per configuration in repeat order (repeat i of every
    configuration ran side by side in time)."""
    folder = Path(folder)
    configs, names = measurement_names(folder)
    return [[load_run(inside(folder, name), label=config) for name in repeat_names]
            for config, repeat_names in zip(configs, names)]


# Far above what `compare --measure --repeats` allows (200): room for a hand-made folder.
MAX_AB_REPEATS = 10_000


def repeats_by_name(folder: str | Path) -> dict[str, tuple[str, int]]:
    """Each run folder's name in a finished A/B folder -> (its configuration, its repeat from 1)."""
    configs, names = measurement_names(folder)
    return {name: (config, i) for config, repeat_names in zip(configs, names)
            for i, name in enumerate(repeat_names, start=1)}


def measurement_names(folder: str | Path) -> tuple[list[str], list[list[str]]]:
    """An A/B folder's configurations, and per configuration its runs' folder names in repeat
    order; one line where its state is corrupt or the measurement did not finish."""
    folder = Path(folder)
    try:
        state = state_json.load(folder / AB_STATE)
        configs, runs = state["configs"], state["runs"]
        # Shapes first: a list indexed by a config (`runs: []`, `configs: [false]`) raised
        # IndexError past this check (found by test_property_run_files).
        if not (isinstance(configs, list) and isinstance(runs, dict)
                and all(isinstance(c, str) and isinstance(runs.get(c), list) for c in configs)):
            raise ValueError("configs must name lists of runs")
        names = [[str(n) for n in runs[c]] for c in configs]
    except (OSError, ValueError, KeyError, TypeError):
        raise GapscopeInputError(f"{folder / AB_STATE}: corrupt A/B state") from None
    if state.get("status") != "complete":
        raise GapscopeInputError(f"{folder}: the A/B measurement did not finish "
                                 f"({state.get('error') or state.get('status')}); resume it with "
                                 f"`gapscope compare --measure {folder}`")
    if len({len(n) for n in names}) != 1 or not names[0]:
        raise GapscopeInputError(f"{folder}: configurations have different numbers of repeats")
    repeats = state.get("repeats")
    # The repeats asked for (or made, when stopped early): no fewer than the runs listed, and
    # a count a measurement can reach (1e40 was taken as it stood).
    if not (isinstance(repeats, int) and not isinstance(repeats, bool)
            and len(names[0]) <= repeats <= MAX_AB_REPEATS):
        raise GapscopeInputError(f"{folder / AB_STATE}: corrupt A/B state (repeats must be a whole "
                                 f"number from {len(names[0])} to {MAX_AB_REPEATS}, not {repeats!r})")
    return configs, names


def _matrix_rows(folder: Path) -> list[RunEntry]:
    try:
        state = state_json.load(folder / MATRIX_STATE)
        rows = state["rows"]
        if not isinstance(rows, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        raise GapscopeInputError(f"{folder / MATRIX_STATE}: corrupt matrix state") from None
    entries = []
    repeats = state.get("repeats")
    repeats = repeats if isinstance(repeats, int) and not isinstance(repeats, bool) and repeats > 0 else 1
    for row_id, row in rows.items():
        stored = row.get("run_dir") if isinstance(row, dict) else None
        runs = stored if isinstance(stored, list) else [stored] if stored else []
        if not runs:
            reason = f"{row.get('status')}: {row.get('reason') or ''}".strip(": ") \
                if isinstance(row, dict) else "corrupt row"
            entries.append(RunEntry(str(row_id), None, reason))
        for i, run in enumerate(runs):
            label = str(row_id) if len(runs) == 1 and repeats == 1 else f"{row_id} #{i + 1}"
            try:
                entries.append(RunEntry(label, inside(folder, run)))
            except GapscopeInputError as exc:  # this row's problem, listed with it
                entries.append(RunEntry(label, None, str(exc)))
        if runs and row.get("status") in ("running", "complete") and len(runs) < repeats:
            entries.append(_missing_repeats(folder, state, str(row_id), len(runs), repeats))
    return entries


def _missing_repeats(folder: Path, state: dict, row_id: str, recorded: int, repeats: int) -> RunEntry:
    """A row that has some of its repeats: the matrix stopped (or is still going) between
    them. Its runs are real, but the row's mean and interval would be over fewer repeats than
    the others': said as a problem of its own, not left for the reader to count."""
    alive, _ = effective_status({"status": "running", "pid": state.get("pid"),
                                 "host": state.get("host"), "started_at": state.get("started_at")})
    why = ("the matrix is still running" if alive == "running" else
           "the matrix was interrupted; run the same gapscope matrix command again to resume it")
    missing = ", ".join(f"#{i + 1}" for i in range(recorded, repeats))
    return RunEntry(f"{row_id} {missing}", None,
                    f"repeat {missing} of {repeats} missing ({recorded} of {repeats} recorded): {why}")


def _int_field(manifest: dict, key: str, default: int) -> int:
    value = manifest.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise GapscopeInputError(f"manifest field {key!r} should be a whole number, not {value!r}")
    return value
