"""The plugin's JSON documents, built by the CLI's own loader and analysers and written from their
to_json_dict(): the runs under the logdir with their breakdowns (or why not), one run's steps,
and the comparison of runs."""
from __future__ import annotations

import copy
import threading
import time
import weakref
from collections import Counter
from pathlib import Path

from gapscope.analysis.results.compare import compare
from gapscope.analysis.results.explain import RunExplanation, explain
from gapscope.analysis.results.measured import compare_measurement
from gapscope.analysis.results.panels.compile_panel import compile_panel
from gapscope.analysis.results.panels.layer_panel import layer_panel
from gapscope.analysis.results.panels.pair_panels import pair_panels
from gapscope.analysis.renderers import compare_json
from gapscope.analysis.renderers.compare_columns import table_cells, verdict_lines
from gapscope.analysis.renderers.plots import PHASE_COLOURS
from gapscope.analysis.model.run import RunEntry, is_measurement, load_run, repeats_by_name
from gapscope.analysis.results.distributed_breakdown import job_breakdown
from gapscope.analysis.renderers.job_render import summary_lines
from gapscope.analysis.tensorboard.plugin.analysis_pool import AnalysisPool
from gapscope.analysis.tensorboard.plugin.run_analysis import (Analysed, analyse_run, one_line, problem_line,
                                                            signature)
from gapscope.analysis.tensorboard.plugin.runs import find_runs
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.phases import PHASES

# What each step was, as the steps view colours it.
WARMUP, TRACED, UNPROFILED = "warm-up", "traced", "unprofiled"


class UnknownRun(KeyError):
    """A request named no run under the logdir (a typo, or a run removed since)."""


class Views:
    """The documents over one logdir; a run is analysed again only when its files change."""

    def __init__(self, logdir: str | Path):
        self.logdir = Path(logdir)
        self._cache: dict[str, Analysed] = {}
        self._jobs: dict[str, tuple[tuple, dict]] = {}
        # TensorBoard answers requests on several threads: one analysis at a time, and a
        # run is never read twice because two requests asked at once.
        self._lock = threading.Lock()
        # Runs a page asked for that are still to be analysed (runs(wait_s)), and the thread
        # that analyses them.
        self._queue_lock = threading.Lock()
        self._queued: dict[str, RunEntry] = {}
        self._worker: threading.Thread | None = None
        # Runs to analyse are analysed in worker processes, one batch at a time.
        self._pool = AnalysisPool()
        weakref.finalize(self, self._pool.close)
        self._batch_lock = threading.Lock()

    def has_runs(self) -> bool:
        return bool(find_runs(self.logdir))

    def runs(self, wait_s: float | None = None) -> dict:
        """Every run with its breakdown (per-step detail left out), or its one-line problem.
        With `wait_s`, the runs not analysed by then are listed as pending and analysed on a
        thread meanwhile, for the page to ask again: 200 runs took 16 s, past a page's patience."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        with self._lock:
            found_jobs: dict = {}
            entries = find_runs(self.logdir, found_jobs)
        if deadline is not None:
            # Every run not current goes to the thread, and this request waits for it until its
            # deadline: an analysis begun here ran past it (wait=2 answered in 5 s).
            for name, entry in entries.items():
                self._known_or_queued(name, entry)
            while time.monotonic() < deadline and self._queue_busy():
                time.sleep(0.05)
        else:
            self._analyse_all(entries)
        analysed = []
        for name, entry in entries.items():
            if deadline is None:
                with self._lock:
                    analysed.append(self._analysed(name, entry))
            else:
                analysed.append(self._known_or_queued(name, entry))
        labels = folder_labels([a.label for a in analysed], [a.name for a in analysed])
        configs = _measurement_configs(entries.values())
        documents = []
        for a, label in zip(analysed, labels):
            path = entries[a.name].path
            measurement, config = configs.get(path, (None, None))
            document = {"name": a.name, "label": label, "problem": a.problem,
                        "framework": a.framework, "traced": a.traced, "pending": a.pending,
                        # An A/B folder's runs: one comparison of its configurations, the CLI's.
                        "measurement": measurement and _name_under(self.logdir, measurement),
                        "config": config, "breakdown": None}
            if a.breakdown is not None:
                try:
                    document["breakdown"] = a.breakdown.to_json_dict()
                    del document["breakdown"]["per_step"]  # the steps view has its own document
                except Exception as exc:  # noqa: BLE001 - one run's problem, never a 500 for all
                    document.update(breakdown=None, problem=problem_line(a.name, exc))
            documents.append(document)
        with self._lock:
            jobs = [self._job(name, path, job) for name, (path, job) in found_jobs.items()]
        # The logdir's name only: the machine's paths are not the page's to give away.
        return {"logdir": self.logdir.name, "phases": list(PHASES), "colours": PHASE_COLOURS,
                "runs": documents, "jobs": jobs, "pending": sum(a.pending for a in analysed)}

    def _known_or_queued(self, name: str, entry: RunEntry) -> Analysed:
        """The run's analysis where it is current; else a pending one, and the run queued for
        the thread that analyses runs between requests."""
        cached = self._cache.get(name)
        if cached is not None and cached.signature == signature(entry.path):
            return cached
        with self._queue_lock:
            if name not in self._queued:
                self._queued[name] = entry
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._analyse_queued, daemon=True,
                                                name="gapscope-runs")
                self._worker.start()
        return Analysed(name, (), entry.label or (entry.path.name if entry.path else name),
                        pending=True)

    def _queue_busy(self) -> bool:
        with self._queue_lock:
            return bool(self._queued)

    def _analyse_queued(self) -> None:
        while True:
            with self._queue_lock:
                if not self._queued:
                    self._worker = None
                    return
                batch = dict(self._queued)
            self._analyse_all(batch, finished=self._unqueue)

    def _unqueue(self, name: str) -> None:
        with self._queue_lock:
            self._queued.pop(name, None)

    def _analyse_all(self, entries: dict[str, RunEntry], finished=lambda name: None) -> None:
        """Every run of `entries` not current, analysed in worker processes where there are
        enough; `finished(name)` as each is done."""
        def keep(a: Analysed) -> None:
            with self._lock:
                self._cache[a.name] = a
            finished(a.name)

        with self._batch_lock:  # a run is never read twice because two requests asked at once
            with self._lock:
                todo = [(name, entry) for name, entry in entries.items()
                        if not self._current(name, entry)]
            for name, entry in self._pool.map(todo, keep):
                # Analysed outside the lock: a request waiting for it (a page's /runs?wait=2)
                # took 49 s to get it back from a thread that retook it run after run.
                keep(analyse_run(name, entry))
            for name in entries.keys() - {name for name, _ in todo}:
                finished(name)

    def _current(self, name: str, entry: RunEntry) -> bool:
        cached = self._cache.get(name)
        return cached is not None and cached.signature == signature(entry.path)

    def _job(self, name: str, path: Path, job) -> dict:
        """A distributed job's own figures (job step, skew, straggler, communication per rank)
        and the CLI's lines on them; its ranks are runs of the list above. `job`: as find_runs
        loaded it, or why it could not."""
        files = signature(path)
        cached = self._jobs.get(name)
        if cached is not None and cached[0] == files:
            return cached[1]
        document = {"name": name, "label": name, "problem": None, "job": None, "lines": []}
        try:
            if isinstance(job, Exception):
                raise job
            jb = job_breakdown(job)
            document.update(label=jb.label, job=jb.to_json_dict(), lines=summary_lines(jb))
        except Exception as exc:  # noqa: BLE001 - listed with its problem, never a 500
            document["problem"] = problem_line(name, exc)
        self._jobs[name] = (files, document)
        return document

    def steps(self, name: str) -> dict:
        """Every step of the run in order, each a warm-up, traced or unprofiled step: from
        steps.csv, or for a trace without one (a foreign trace) its traced steps."""
        with self._lock:
            a = self._analysed(name, self._entry(name))
        document = {"name": name, "label": a.label, "problem": a.problem, "source": None,
                    "warmup_steps": 0, "compile_ms": None, "steps": []}
        if a.breakdown is None:
            return document
        document["compile_ms"] = a.breakdown.compile_ms
        if a.rows:
            warmup = a.warmup_steps
            document.update(source="steps.csv", warmup_steps=warmup, steps=[
                {"step": int(r["step"]), "step_ms": r["step_ms"],
                 "kind": WARMUP if r["step"] < warmup else TRACED if r.get("traced") else UNPROFILED}
                for r in a.rows])
        else:
            document.update(source="trace", steps=[
                {"step": s.step, "step_ms": s.step_ms, "kind": TRACED} for s in a.breakdown.steps])
        return document

    def details(self, name: str) -> dict:
        """What `compare` draws its evidence from, for one run: kernels per phase and the top
        ones, host against device time, compile, transfers and resources (explain's JSON)."""
        with self._lock:
            entry = self._entry(name)
            a = self._analysed(name, entry)
            if not a.problem and a.explanation is None and a.explain_problem is None:
                a.explanation, a.explain_problem = _explain(entry)
        document = {"name": name, "label": a.label, "problem": a.problem or a.explain_problem}
        if a.explanation is not None and not document["problem"]:
            explained = a.explanation.to_json_dict()
            document.update({k: explained[k] for k in
                             ("kernels", "attribution", "compile", "transfers", "resources")})
            # The layers and compile views' figures, as the report has them.
            memory = a.explanation.breakdown.memory
            document["panels"] = {"layers": layer_panel(a.explanation.layers),
                                  "compile": compile_panel(a.explanation.breakdown.compile_why),
                                  "memory": None if memory is None else memory.to_json_dict()}
        return document

    def compare(self, names: list[str]) -> dict:
        """The CLI's comparison of the runs (`gapscope compare --format json`, plus its verdict
        lines), the first the baseline; {"error": why} where the runs cannot be compared (one
        untraced, different workloads, fewer than two)."""
        if len(names) < 2:
            return {"error": "select two or more runs to compare"}
        folder = self._one_measurement(names)
        if folder is not None:
            try:
                with self._lock:
                    comparison = compare_measurement(folder)
            except GapscopeInputError as exc:
                return {"error": one_line(exc)}
            return _compared(comparison)
        explanations = []
        with self._lock:
            every = {name: self._analysed(name, entry) for name, entry in find_runs(self.logdir).items()}
            labels = dict(zip(every, folder_labels([a.label for a in every.values()], list(every))))
            for name in names:
                entry = self._entry(name)
                a = self._analysed(name, entry)
                if a.problem:
                    return {"error": f"{name}: {a.problem}"}
                if a.explanation is None and a.explain_problem is None:
                    a.explanation, a.explain_problem = _explain(entry)
                if a.explain_problem:
                    return {"error": f"{name}: {a.explain_problem}"}
                # compare() relabels the breakdowns it is given: keep the cached ones as read.
                explanations.append(copy.copy(a.explanation))
                explanations[-1].breakdown = copy.copy(a.explanation.breakdown)
                # Named as the runs list names it, so compare() has no two alike to tell apart.
                explanations[-1].breakdown.label = labels.get(name, a.label)
        mixed = _workloads_apart(names, explanations)
        if mixed:
            return {"error": mixed}
        try:
            comparison = compare(explanations)
        except GapscopeInputError as exc:
            return {"error": one_line(exc)}
        return _compared(comparison)

    def _one_measurement(self, names: list[str]) -> Path | None:
        """The A/B folder that holds every run named, where they are runs of two or more of its
        configurations; else None (runs compared as they are)."""
        entries = [self._entry(name) for name in names]
        paths = [e.path for e in entries]
        if None in paths or len({p.parent for p in paths}) != 1 or not is_measurement(paths[0].parent):
            return None
        configs = _measurement_configs(entries)
        named = {configs[p][1] for p in paths if p in configs}
        return paths[0].parent if len(named) >= 2 else None

    def _entry(self, name: str) -> RunEntry:
        entry = find_runs(self.logdir).get(name)
        if entry is None:
            raise UnknownRun(name)
        return entry

    def _analysed(self, name: str, entry: RunEntry) -> Analysed:
        cached = self._cache.get(name)
        if cached is not None and cached.signature == signature(entry.path):
            return cached
        self._cache[name] = a = analyse_run(name, entry)
        return a

    def close(self) -> None:
        self._pool.close()


def _workloads_apart(names: list[str], explanations) -> str | None:
    """compare's refusal of runs of different models, in the tab's words: each workload with
    its ticked runs (some may sit out of view) and what to untick; the CLI's flag for it
    (--different-workloads) is no choice the tab offers."""
    by_workload: dict[str, list[str]] = {}
    for name, e in zip(names, explanations):
        if e.breakdown.workload:
            by_workload.setdefault(e.breakdown.workload, []).append(name)
    if len(by_workload) < 2:
        return None
    ticked = "; ".join(f"{w}: {', '.join(runs)}" for w, runs in by_workload.items())
    return (f"the ticked runs run different workloads ({ticked}): a gap between different models "
            "is no framework's; untick the runs of all workloads but one")


def _compared(comparison) -> dict:
    """The compare JSON, the CLI's own verdict lines ("... is 1.30x slower ...", "within noise")
    and each pair's layers and compile views."""
    return {**compare_json.document(comparison), "verdicts": verdict_lines(comparison),
            "cells": [table_cells(pair) for pair in comparison.pairs],
            "panels": pair_panels(comparison)}


def _measurement_configs(entries) -> dict[Path, tuple[Path, str]]:
    """Each run path inside a finished A/B folder -> (the folder, its configuration)."""
    found, seen = {}, set()
    for entry in entries:
        folder = entry.path and entry.path.parent
        if folder is None or folder in seen or not is_measurement(folder):
            continue
        seen.add(folder)
        try:
            repeats = repeats_by_name(folder)
        except GapscopeInputError:  # an unfinished or corrupt one: its runs stand alone
            continue
        found.update({folder / name: (folder, config) for name, (config, _) in repeats.items()})
    return found


def _name_under(logdir: Path, folder: Path) -> str:
    try:
        return str(folder.relative_to(logdir))
    except ValueError:
        return folder.name


def folder_labels(labels: list[str], names: list[str]) -> list[str]:
    """Two runs of one configuration are told apart by their folder under the logdir (their name,
    unique there), not by a run id's random tail that names no folder."""
    counts = Counter(labels)
    return [f"{label} ({name})" if counts[label] > 1 else label
            for label, name in zip(labels, names)]


def _explain(entry: RunEntry) -> tuple[RunExplanation | None, str | None]:
    try:
        return explain(load_run(entry.place, entry.label)), None
    except Exception as exc:  # noqa: BLE001 - as in _analysed
        return None, problem_line(str(entry.label or entry.path), exc)
