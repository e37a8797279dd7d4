"""The notebook API (load, compare, measure, check): the objects the CLI renders, built as it builds them."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

# As the CLI's --out default (cli.DEFAULT_OUT): read here, not imported, so that this module
# stays off the CLI's import path until a command uses it.
_OUT_ENV = "GAPSCOPE_OUT"
Say = Callable[[str], None]


def _quiet(message: str) -> None:
    pass


def _default_out() -> str:
    return os.environ.get(_OUT_ENV, "traces")


def load(run: str | Path, label: str | None = None):
    """The Run (manifest, steps, trace) of a run directory, a folder with a trace, or a trace
    file, as every command reads it."""
    from gapscope.analysis.model.run import load_run
    return load_run(run, label)


def compare(*runs: str | Path, different_workloads: bool = False):
    """The Comparison `gapscope compare RUNS` prints: the first run is the baseline. RUNS are run
    directories (two or more) or one A/B folder. Its `.verdict` holds the verdict state
    (`verdict`, `inconclusive`, `reason`), `.to_pandas()` a table per phase (by="layer": per
    layer); `gapscope compare --format json` is its JSON."""
    from gapscope.analysis.model.job import is_job
    from gapscope.analysis.model.locate import locate
    from gapscope.analysis.model.run import is_measurement
    from gapscope.analysis.results.measured import compare_measurement
    from gapscope.profilers.errors import GapscopeInputError
    paths = [str(r) for r in runs]
    if len(paths) == 1 and is_measurement(paths[0]):
        return compare_measurement(paths[0])
    places = [locate(p) for p in paths]  # each run's manifest read here, once
    if any(is_job(p) for p in places):
        raise GapscopeInputError("a distributed job: compare it with `gapscope compare` (scaling)")
    return runs_comparison(places, different_workloads)


def runs_comparison(places, different_workloads: bool = False):
    """The comparison of located runs (not an A/B folder, not a job): `compare`'s and the CLI's."""
    from gapscope.analysis.model.run import Runs
    from gapscope.analysis.results.compare import compare as compare_runs
    from gapscope.analysis.results.explain import explain_all
    from gapscope.profilers.errors import GapscopeInputError
    if len(places) < 2:
        raise GapscopeInputError("compare needs at least two runs, or one A/B folder")
    loaded = Runs()
    return compare_runs(explain_all([loaded.load(p) for p in places]),
                        different_workloads=different_workloads)


def measure(*configs: str, repeats: int | None = None, precision: float | None = None,
            budget: float = 10.0, steps: int = 60, warmup: int = 5, trace_steps: int | None = None,
            device: str = "auto", out: str | Path | None = None, say: Say = _quiet,
            progress: Callable[[int, int, str], None] | None = None):
    """`gapscope compare --measure CONFIGS`: the configurations (WORKLOAD:FRAMEWORK[:VARIANT], e.g.
    "mlp:torch", "mlp:keras") run interleaved A B, B A, ..., each repeat a fresh process, into
    one A/B folder under `out`; returns its Comparison. `repeats` per side (default 5; with
    `precision`, e.g. 0.03, the most, default 50: rounds go on until every ratio's 95 % interval
    is within ±precision or `budget` minutes are spent). `say` gets the progress lines the CLI
    prints; `progress(done, total, message)` counts the runs."""
    from gapscope.analysis.results.measured import compare_measurement
    from gapscope.workloads.ab import DEFAULT_REPEATS
    repeats = repeats or (50 if precision is not None else DEFAULT_REPEATS)
    settings = run_length(steps, warmup, trace_steps, device)
    stopped: list[str] = []
    folder = measured_folder(list(configs), repeats, out or _default_out(), settings, say=say,
                             warn=say, precision=precision, budget_s=budget * 60, stopped=stopped,
                             progress=progress)
    comparison = compare_measurement(folder)
    precision_note(comparison, precision, stopped)
    return comparison


def run_length(steps: int = 60, warmup: int = 5, trace_steps: int | None = None,
               device: str = "auto") -> dict:
    """The run-length settings of a measurement, refused as the CLI refuses them; a trace window
    not given is fitted to the steps after the warm-up, as the CLI fits its default."""
    from gapscope.workloads.settings import RunSettings
    if trace_steps is None:
        trace_steps = max(1, min(10, steps - max(1, warmup)))
    settings = {"steps": steps, "warmup_steps": warmup, "trace_steps": trace_steps, "device": device}
    RunSettings(workload="", framework="", **settings).check_lengths()
    return settings


def precision_note(comparison, precision: float | None, stopped: list[str]) -> None:
    """The warning a measurement that stopped short of its precision carries."""
    if precision is not None and stopped and not stopped[0].startswith("precision reached"):
        comparison.warnings.append(f"precision ±{100 * precision:g} % not reached: {stopped[0]}")


def measured_folder(specs: list[str], repeats: int, out_dir: str | Path, settings: dict,
                    say: Say = _quiet, warn: Say = _quiet, precision: float | None = None,
                    budget_s: float = 600.0, stopped: list[str] | None = None,
                    progress: Callable[[int, int, str], None] | None = None) -> Path:
    """Runs an A/B measurement (or resumes one: SPECS is then its folder); returns the folder.
    With `precision`, rounds go on until analysis.results.precision says stop; its reason goes
    to `warn` and `stopped`. Raises workloads.ab.RunFailed (a run failed) and RunInterrupted."""
    from gapscope.analysis.model.run import is_measurement
    from gapscope.profilers.errors import GapscopeInputError
    from gapscope.workloads.ab import Config, measure as measure_ab, planned_repeats, resume
    from gapscope.workloads.settings import RunSettings
    resuming = len(specs) == 1 and is_measurement(specs[0])
    configs = [] if resuming else [Config.parse(spec) for spec in specs]
    repeats = planned_repeats(specs[0]) if resuming else repeats
    most = f"up to {repeats}" if precision is not None else str(repeats)
    total = repeats * (len(configs) or 2)  # a resumed folder: its pair
    done = [0]

    def on_run(repeat, config, outcome):
        if outcome is None:
            say(f"repeat {repeat + 1}/{most}: running {config.label}...")
        else:
            done[0] += 1
            say(f"  {outcome.status}: {outcome.run_dir}")
        if progress is not None:
            progress(done[0], total, f"repeat {repeat + 1}/{most}: {config.label}")
    started = time.monotonic()

    def after_round(runs, rounds):
        from gapscope.analysis.results.precision import progress_of, stop_reason
        try:
            measured = progress_of(runs, time.monotonic() - started)
        except GapscopeInputError as exc:
            reason = f"stopped: a run could not be analysed ({exc})"
        else:
            say(measured.line(precision))
            reason = stop_reason(measured, precision, budget_s, repeats)
        if reason:
            warn(reason)
            if stopped is not None:
                stopped.append(reason)
        return reason
    rounds = after_round if precision is not None else None
    if resuming:
        folder = resume(specs[0], on_run, rounds)
    else:
        folder = measure_ab(configs, repeats, RunSettings(workload="", framework="", **settings),
                            out_dir, on_run, rounds)
    say(f"A/B folder: {folder}")
    return folder


def check(target: str, baseline: str | Path, threshold: float = 0.05, repeats: int = 5,
          config: str | None = None, steps: int = 60, warmup: int = 5, device: str = "auto",
          out: str | Path | None = None, say: Say = _quiet):
    """`gapscope check TARGET --baseline FILE`: TARGET's step time (a configuration measured now
    in `repeats` fresh processes without a profiler, or an A/B folder) against the stored
    baseline; the CheckResult's `verdict` is regression, faster, unchanged or inconclusive."""
    from gapscope.analysis.results.regression import read_baseline
    stored = read_baseline(Path(baseline))
    settings = {"steps": steps, "warmup_steps": warmup, "device": device}
    label, runs, _ = check_runs(target, config or stored.config, repeats, out or _default_out(),
                                settings, say)
    return check_of(stored, label, runs, threshold)


def check_runs(target: str, label: str | None, repeats: int, out_dir: str | Path, settings: dict,
               say: Say = _quiet):
    """(configuration label, its runs, the settings they ran with) for a check: from an A/B
    folder, or measured now (no profiler: only the step time is wanted). Raises RunFailed."""
    from gapscope.analysis.model.run import is_measurement, load_measurement
    from gapscope.profilers.errors import GapscopeInputError
    if is_measurement(target):
        per_config = load_measurement(target)
        labels = [runs[0].label for runs in per_config]
        label = label or labels[0]
        if label not in labels:
            raise GapscopeInputError(f"{target}: measures {', '.join(labels)}, not {label}")
        runs = per_config[labels.index(label)]
        return label, runs, runs[0].settings
    from gapscope.workloads.ab import Config, measure as measure_ab
    from gapscope.workloads.settings import RunSettings
    config = Config.parse(target)
    base = RunSettings(workload="", framework="", trace=False, **settings)
    base.check_lengths()

    def on_run(repeat, _config, outcome):
        if outcome is None:
            say(f"repeat {repeat + 1}/{repeats}: running {config.label}...")
    folder = measure_ab([config], repeats, base, out_dir, on_run, least=1)
    (runs,) = load_measurement(folder)
    return config.label, runs, runs[0].settings


def check_of(baseline, config: str, runs, threshold: float):
    """The CheckResult of `runs` against `baseline`: inconclusive where a run saw a busy machine."""
    from gapscope.analysis.measures.reliability import busy_machine
    from gapscope.analysis.results.regression import check as check_against
    means, within, unreliable = process_means(runs)
    busy = any(busy_machine(run.manifest) for run in runs)
    result = check_against(baseline, config, means, within, threshold, machine(), busy)
    result.warnings += unreliable
    return result


def process_means(runs) -> tuple[list[float], list[float], list[str]]:
    """Each run's mean unprofiled steady step, the variance of that mean from its steps, and
    the reasons not to trust a run's figure (a busy machine), named by repeat."""
    from gapscope.analysis.measures.stats import mean_variance
    from gapscope.analysis.results.breakdown import Source, breakdown
    results = [breakdown(r, Source.TIMERS) for r in runs]
    warnings = [f"repeat {i}: {w}" for i, b in enumerate(results, start=1)
                for w in b.reliability_warnings]
    times = [b.step_times_ms for b in results]
    return [sum(t) / len(t) for t in times], [mean_variance(t) for t in times], warnings


def machine() -> dict:
    """Where a check measured: what makes two step times incomparable if it differs."""
    from gapscope.profilers.environment import cpu_name, host, omp_num_threads, versions
    found = versions()
    return {"host": host(), "cpu": cpu_name(), "cores": os.cpu_count(),
            "torch": found.get("torch"), "tensorflow": found.get("tensorflow"),
            "OMP_NUM_THREADS": omp_num_threads()}


def breakdowns(entries, source: str = "auto", layers: bool = False):
    """`gapscope breakdown`'s reading of run entries (analysis.model.run.expand_runs): each run's
    Breakdown, each job's JobBreakdown, a line per entry that could not be read (one entry:
    raised instead) and, with `layers`, each run's LayerBreakdown."""
    from gapscope.analysis.model.job import is_job
    from gapscope.analysis.model.run import Runs
    from gapscope.analysis.results.breakdown import breakdown as breakdown_run
    from gapscope.analysis.results.distributed_breakdown import breakdown_of
    from gapscope.analysis.results.layers import layer_breakdown
    from gapscope.profilers.errors import GapscopeInputError
    runs = Runs()
    results, jobs, problems, layer_results = [], [], [], []
    for entry in entries:
        try:
            if entry.path is None:
                raise GapscopeInputError(entry.problem)
            if is_job(entry.place, lone=True):  # a lone rank of a larger job too
                jobs.append(breakdown_of(entry.place, source))
            else:
                run = runs.load(entry.place, entry.label)
                results.append(breakdown_run(run, source))
                if layers:
                    layer_results.append(layer_breakdown(run, results[-1].name,
                                                         len(results[-1].steps)))
        except GapscopeInputError as exc:
            if len(entries) == 1:
                raise
            problems.append(f"{entry.label or entry.path}: {exc}")
    return results, jobs, problems, layer_results


def breakdowns_json(results, jobs, layer_results=None) -> str:
    """The text `gapscope breakdown --format json` prints: one run's object, several runs' list,
    a job's document, or runs and jobs as one list."""
    import json

    from gapscope.analysis.renderers import registry
    from gapscope.profilers import strict_json
    if results and jobs:  # one JSON document: the runs' and the jobs'
        docs = [json.loads(registry.BREAKDOWN["json"].render([r])) for r in results]
        docs += [json.loads(registry.JOB_BREAKDOWN["json"].render([j])) for j in jobs]
        return strict_json.dumps(docs, indent=2) + "\n"
    if results:
        return registry.BREAKDOWN["json"].render(results, layers=layer_results)
    return registry.JOB_BREAKDOWN["json"].render(jobs)
