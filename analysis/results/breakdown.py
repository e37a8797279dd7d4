"""Breaks a run's steady-state step into the five phases: the step time from unprofiled steps,
each phase from the step timers where they saw it, else from the trace (see phase_estimate)."""
from __future__ import annotations

import enum

import numpy as np

from gapscope.analysis.readers import step_rows
from gapscope.analysis.results.compile_why import run_compile_why
from gapscope.analysis.results.memory.figures import run_memory
from gapscope.analysis.results.phase_estimate import PhaseSamples, estimate
from gapscope.analysis.events.phase_rules import PhaseOrigin
from gapscope.analysis.results.records import Breakdown, PhaseSource, StepBreakdown
from gapscope.analysis.model.run import Run
from gapscope.analysis.measures.blocking import blocking_notes
from gapscope.analysis.measures.hardware import hardware
from gapscope.analysis.measures.kernels import device_not_traced, past_the_host
from gapscope.analysis.measures.other_split import other_shares
from gapscope.analysis.events.timeline import PhaseTimeline, phase_timeline
from gapscope.analysis.events.event import EventKind
from gapscope.analysis.events.columns import code
from gapscope.analysis.events.intervals import covered_within, merge
from gapscope.analysis.events.trace import Trace
from gapscope.analysis.measures import page_faults
from gapscope.analysis.measures.reliability import busy_load, busy_machine, reliability_warnings
from gapscope.analysis.measures.variant_notes import variant_notes
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.executions import updates_in_call
from gapscope.profilers.phases import MARKED_PHASES, PHASES

# Traced steps faster than unprofiled ones by more than this: the machine changed between them
# (a quiet process's steps spread about 4 % here), since a profiler only adds work.
_LEAST_OVERHEAD_PCT = -10.0
# Host-op time outside every step beyond this share, from the first step to the last: the
# steps are not where the work ran (steps that follow each other leave next to nothing out).
_MOST_OUTSIDE = 0.5


class Source(enum.StrEnum):
    """What `gapscope breakdown --source` asks for."""

    AUTO = "auto"                # unprofiled step; timers where they see a phase, else the compensated trace
    TIMERS = "timers"            # step timers only (phases inside a compiled step unseen)
    TRACE = "trace"              # the trace as recorded, profiler cost inside
    COMPENSATED = "compensated"  # every phase from the trace, compensated (checks the method against timers)


def breakdown(run: Run, source: str = Source.AUTO) -> Breakdown:
    source = Source(source)
    if source == Source.TIMERS or run.trace is None:
        if source in (Source.TRACE, Source.COMPENSATED):
            raise GapscopeInputError(f"{run.path}: holds no torch trace or .xplane.pb file")
        if run.rows is None:
            raise GapscopeInputError(f"{run.path}: holds no trace file and no steps.csv")
        result = breakdown_from_timers(run.rows, run.warmup_steps, run.runs_phases,
                                       untraced_rank_reason(run.manifest))
        if run.rules.phases or run.rules.step_marker:
            # Names in a trace: the timers' phases are gapscope's own marks, and no trace is read.
            given = ", ".join([f"--phase {p}={pat!r}" for p, pat in run.rules.phases]
                              + ([f"--step-marker {run.rules.step_marker!r}"] if run.rules.step_marker else []))
            result.notes.append(f"{given} not used: the step timers' phases are gapscope's own marks "
                                "and no trace was read (they apply to a trace's names)")
    else:
        traced, notes = trace_steps(run)
        notes = trace_notes(run.trace, run.timeline) + notes
        timed = _timed_phases(run.rows, run.warmup_steps) if run.rows and source == Source.AUTO else []
        result = _combined(run, traced, timed, raw=source == Source.TRACE)
        result.notes = notes + result.notes
        result.other_shares = other_shares(run.trace, run.timeline)
    requested = run.manifest.get("warmup_steps")
    if isinstance(requested, int) and run.warmup_steps > requested:
        result.notes.append(f"warm-up taken as {run.warmup_steps} updates, not {requested}: it "
                            "ended inside a compiled call of several updates (steps_per_execution)")
    result.reliability_warnings = reliability_warnings(run.manifest, result.step_times_ms)
    result.busy_load = busy_load(run.manifest)
    result.minor_faults_per_step = page_faults.faults_per_step(run.rows, run.warmup_steps)
    faults = page_faults.note(result.minor_faults_per_step, result.step_stats()["mean"],
                              run.manifest.get("variant"))
    result.compile_why = run_compile_why(run, compile_ms(run.rows, run.warmup_steps) if run.rows else None)
    result.memory = run_memory(run, trace=source != Source.TIMERS)
    left_out = compiling_note(run.rows or [], result.compile_why)
    result.notes = ([f"warning: {w}" for w in result.reliability_warnings]
                    + ([result.compile_why.line()] if result.compile_why else [])
                    + ([left_out] if left_out else []) + run.notes + variant_notes(run.manifest)
                    + result.notes + ([faults] if faults else [])
                    + (result.memory.lines() if result.memory is not None else []))
    _label(result, run)
    if result.device is None and source != Source.TIMERS and run.trace is not None:
        result.device = hardware(run.manifest, run.trace).device  # a foreign trace's own word on its GPU
    return result


def compiling_note(rows: list[dict], why) -> str | None:
    """The steps after the warm-up that compiled or retraced (step_rows.mark_compiling): named,
    with what compiled and what they took, since the steady figures leave them out."""
    events = step_rows.compiling(rows)
    if not events:
        return None
    words = why.steady_events if why is not None else {}
    parts = [f"step {r['step']} {r['step_ms']:.1f} ms"
             + (f" ({words[r['step']]})" if r["step"] in words else "") for r in events[:5]]
    more = f"; and {len(events) - 5} more" if len(events) > 5 else ""
    return (f"{'steps' if len(events) > 1 else 'step'} left out of the steady steps as compile "
            f"events, not steady time: {'; '.join(parts)}{more}")


def breakdown_from_trace(trace: Trace, runs_phases=MARKED_PHASES,
                         timeline: PhaseTimeline | None = None) -> Breakdown:
    """The trace's figures as recorded (a trace with no unprofiled steps beside it)."""
    timeline = timeline or phase_timeline(trace)
    steps, origins, notes = _trace_steps(trace, timeline, runs_phases)
    result = _from_samples(PhaseSamples(None, {}, _phase_matrix(steps)), steps, origins,
                           trace_notes(trace, timeline) + notes, raw=True)
    result.other_shares = other_shares(trace, timeline)
    return result


def trace_notes(trace: Trace, timeline: PhaseTimeline) -> list[str]:
    """What the reader dropped, how the steps were found, where the host waits for the device,
    and device work that outlives the host's window (said here, so every view prints it)."""
    outside = outside_steps(trace, timeline)
    late, untraced = past_the_host(trace), device_not_traced(trace)
    return (reader_notes(trace) + timeline.notes + ([outside] if outside else [])
            + ([untraced] if untraced else [])
            + blocking_notes(trace, timeline) + ([late.note] if late else []))


def outside_steps(trace: Trace, timeline: PhaseTimeline) -> str | None:
    """A warning where most host-op time lies outside every step: steps of 1 ns (or 1e-300)
    gave 'step 0.000 ms' and exit 0 while every op ran beside them, so the step figures are
    about the markers, not the work."""
    steps = timeline.steps
    # From the columns: a 1 GB trace's millions of host ops are never made objects here.
    columns = trace.columns
    kinds = columns.kind_codes()
    if not (kinds == code(EventKind.STEP)).any():
        return None  # iterations found between optimizer steps leave the cold first one out by design
    ops = columns.union((kinds == code(EventKind.HOST_OP)) & columns.on_host())
    if not steps:
        return None
    lo, hi = (steps[0].start_us, max(s.end_us for s in steps)) if len(steps) > 1 else (-np.inf, np.inf)
    # Between the first step and the last: a cold iteration left out before is no fault.
    busy = covered_within(*ops, [(lo, hi)])
    if busy <= 0:
        return None
    inside = covered_within(*ops, merge([(max(s.start_us, lo), min(s.end_us, hi)) for s in steps]))
    share = 1 - inside / busy
    if share <= _MOST_OUTSIDE:
        return None
    return (f"warning: {100 * share:.0f} % of the host ops' time lies outside every step: the "
            f"step events do not hold the work, so the step figures are not the run's")


def reader_notes(trace: Trace) -> list[str]:
    """What the reader dropped or flagged as invalid, said beside the figures it shaped."""
    notes = []
    dropped = trace.metadata.get("dropped_events")
    if dropped:
        notes.append(f"{sum(dropped.values()):,} invalid trace event(s) dropped: "
                     + ", ".join(f"{n:,} {why}" for why, n in dropped.items()))
    fields = trace.metadata.get("dropped_fields")
    if fields:
        notes.append(f"{sum(fields.values()):,} trace field value(s) of the wrong type left out: "
                     + ", ".join(f"{n:,} {path}" for path, n in fields.items()))
    step_note = trace.metadata.get("step_note")
    if step_note:
        notes.append(step_note)
    problems = trace.metadata.get("step_problems")
    if problems:
        notes.append("step events flagged: " + ", ".join(f"{n:,} {why}" for why, n in problems.items())
                     + "; their times may count the same work twice")
    return notes


def untraced_rank_reason(manifest: dict) -> str | None:
    """Why a rank of a traced multi-worker run holds no trace: TF jobs trace their chief only
    (workloads.runners.tf_distribute.traces_rank); None for any other run."""
    ranks, rank = manifest.get("traced_ranks"), manifest.get("rank")
    if not isinstance(ranks, list) or not ranks or rank in ranks:
        return None
    return (f"rank {rank} was not traced: a TensorFlow multi-worker run traces rank "
            f"{', '.join(map(str, ranks))} only (TF 2.21's profiler crashes the other workers)")


def breakdown_from_timers(rows: list[dict], warmup_steps: int,
                          runs_phases=MARKED_PHASES, why_untraced: str | None = None) -> Breakdown:
    """Steps from the per-step timers (steps.csv rows); warm-up steps become compile_ms.
    `why_untraced`: why the run holds no trace where it was asked for one."""
    steady = _steady(rows, warmup_steps)
    traced = step_rows.flagged(steady, "traced")
    untraced = step_rows.where(steady, ~traced) if not traced.all() else steady
    timed = _timed_phases(rows, warmup_steps)
    per_step = [StepBreakdown.from_marked(int(r["step"]), r["step_ms"],
                                          {p: r[f"{p}_ms"] or 0.0 for p in timed}, r.get("loss"))
                for r in untraced]
    samples = PhaseSamples(step_rows.column(untraced, "step_ms"),
                           {p: _phase_column(untraced, p) for p in timed})
    origins = {p: PhaseOrigin.MARKED if p in timed else PhaseOrigin.MISSING for p in MARKED_PHASES}
    notes = []
    if any(p not in timed for p in runs_phases):
        notes.append("phases inside a compiled step are not visible to host timers; "
                     + (why_untraced or "run with --trace for them"))
    result = _from_samples(samples, per_step, origins, notes, runs_phases=runs_phases)
    result.compile_ms = compile_ms(rows, warmup_steps)
    result.unprofiled = not traced.all()
    return result


def _phase_column(rows: list[dict], phase: str) -> np.ndarray:
    """A timed phase's ms over `rows`, 0 where a row has none (as `r[f"{phase}_ms"] or 0.0`)."""
    return np.nan_to_num(step_rows.column(rows, f"{phase}_ms"), nan=0.0)


def _combined(run: Run, traced: list[StepBreakdown], timed: list[str], raw: bool) -> Breakdown:
    """Unprofiled step times from the timers, phases from timers and the compensated trace."""
    rows = run.rows
    notes = []
    origins = dict(run.timeline.origins)
    steady = _steady(rows, run.warmup_steps) if rows else []
    untraced = step_rows.where(steady, ~step_rows.flagged(steady, "traced")) if rows else []
    traced_rows = recorded_rows(steady, run.manifest.get("trace_window"),
                                run.settings.get("steps_per_execution", 1))
    samples = PhaseSamples(
        step_rows.column(untraced, "step_ms") if untraced else None,
        {p: _phase_column(untraced, p) for p in timed} if untraced else {},
        _phase_matrix(traced),
        step_rows.column(traced_rows, "step_ms") if traced_rows else None)
    if rows and not untraced and not raw:
        notes.append("no unprofiled steady steps: figures are the trace's, profiler cost inside; "
                     "run more steps than --warmup + --trace-steps")
    result = _from_samples(samples, traced, origins, notes + _origin_notes(origins, run.runs_phases),
                           raw=raw, runs_phases=run.runs_phases)
    if rows:
        result.compile_ms = compile_ms(rows, run.warmup_steps)
        result.trace_overhead_pct = trace_overhead_pct(rows, run.warmup_steps)
        unmeasured = _overhead_unmeasured(result.trace_overhead_pct, run.manifest)
        if unmeasured:
            result.notes.append(unmeasured)
            result.trace_overhead_pct = None
        elif result.trace_overhead_pct is not None:
            where = ("inside these figures" if raw
                     else "not in these figures (step timers on unprofiled steps)"
                     if result.source == PhaseSource.TIMERS else "taken out of the phases")
            result.notes.append(f"traced steps took {result.trace_overhead_pct:+.0f}% against "
                                f"unprofiled ones: the profiler's own cost, {where}")
    return result



def _overhead_unmeasured(pct: float | None, manifest: dict) -> str | None:
    """Why traced against unprofiled steps is no measure of the profiler's cost, where it is
    not: a busy machine (-58 % and +29533 % were printed as that cost), or traced steps faster
    by more than steps vary (a profiler adds work, it takes none away)."""
    if pct is None:
        return None
    if busy_machine(manifest):
        return (f"traced steps took {pct:+.0f}% against unprofiled ones on a busy machine: "
                "no measure of the profiler's own cost")
    if pct < _LEAST_OVERHEAD_PCT:
        return (f"traced steps took {pct:+.0f}% against unprofiled ones: faster with the profiler, "
                "so the machine changed between them; no measure of the profiler's own cost")
    return None


def trace_steps(run: Run) -> tuple[list[StepBreakdown], list[str]]:
    """The run's traced steps as recorded, one per optimizer update, and notes on them."""
    steps, _, _ = _trace_steps(run.trace, run.timeline, run.runs_phases)
    # A traced step that recompiled or retraced is no steady step, as in the timers' rows.
    events = {r["step"] for r in step_rows.compiling(run.rows or [])}
    steps = [s for s in steps if s.step not in events] or steps
    spe = run.settings.get("steps_per_execution", 1)
    notes = []
    if isinstance(spe, int) and spe > 1 and run.trace_file in run.located.xplanes:
        steps = per_update(steps, spe, run.manifest["steps_run"], run.manifest["steps_per_epoch"])
        notes.append(f"each traced call ran up to {spe} updates (steps_per_execution); "
                     "figures are per update")
        # A call that ran a warm-up update compiled: it is not a steady step.
        steady = [s for s in steps if s.step >= run.warmup_steps]
        if steady:
            steps = steady
        elif steps and steps[0].step == 0:
            notes.append("the traced call began at the first update, so its figures include "
                         "warm-up (tracing, compilation): run more steps than "
                         "steps_per_execution for a steady state")
    return steps, notes


def _trace_steps(trace: Trace, timeline: PhaseTimeline, runs_phases):
    if not timeline.steps:  # the timeline's notes say what was looked for
        raise GapscopeInputError(f"{trace.path}: no training steps found: " + "; ".join(timeline.notes))
    per_step = []
    for index, step in enumerate(timeline.steps):
        number = step.step_num if step.step_num is not None else index
        per_step.append(StepBreakdown.from_marked(number, step.dur_us / 1000.0,
                                                  timeline.phase_ms(index)))
    return per_step, dict(timeline.origins), _origin_notes(timeline.origins, runs_phases)


def _origin_notes(origins: dict, runs_phases) -> list[str]:
    notes = []
    annotated = [p for p in runs_phases if origins.get(p) == PhaseOrigin.ANNOTATED]
    if annotated:
        notes.append(f"from the trace's own ranges (record_function): {', '.join(annotated)}")
    inference = origins.get("backward") == origins.get("optimizer") == PhaseOrigin.NOT_APPLICABLE
    if inference:
        notes.append("inference: no backward or optimizer op in this trace (backward and optimizer "
                     "not applicable)")
    if origins.get("forward") == PhaseOrigin.INFERRED:
        notes.append("forward inferred: host ops after data load to the step's end" if inference
                     else "forward inferred: host ops between data load and the first backward op")
    missing = [p for p in runs_phases if origins.get(p) == PhaseOrigin.MISSING]
    if missing:
        notes.append(f"not identified in this trace (counted in other): {', '.join(missing)}")
    return notes


def _phase_matrix(steps: list[StepBreakdown]) -> np.ndarray:
    return np.array([[s.phase_ms[p] for p in PHASES] for s in steps], float).reshape(-1, 5)


def _from_samples(samples: PhaseSamples, steps: list[StepBreakdown], origins: dict,
                  notes: list[str], raw: bool = False, runs_phases=MARKED_PHASES) -> Breakdown:
    result = estimate(samples, raw=raw)
    origins = dict(origins)
    for phase in MARKED_PHASES:
        if phase not in runs_phases:
            origins[phase] = PhaseOrigin.NOT_APPLICABLE
    unprofiled = result.source != PhaseSource.RAW
    times = list(samples.untraced_step_ms) if unprofiled else [s.step_ms for s in steps]
    if raw and samples.untraced_step_ms is not None and len(samples.untraced_step_ms):
        notes = notes + ["figures as the profiler recorded them, its own cost inside"]
    elif not unprofiled:
        notes = notes + ["no unprofiled steps: the profiler's own cost is inside these figures"]
    return Breakdown(result.source, steps, [float(t) for t in times], result.phases,
                     step_ci95=result.step_ci95, unprofiled=unprofiled,
                     phase_sources=origins, notes=notes, replicates=result.replicates,
                     bootstrap=(samples, raw))


def _steady(rows: list[dict], warmup_steps: int) -> list[dict]:
    steady = step_rows.steady(rows, warmup_steps)
    if not steady:
        raise GapscopeInputError(
            f"only {len(rows)} timed steps, all of them warm-up ({warmup_steps}): run more steps")
    return steady


def recorded_rows(rows: list[dict], trace_window, steps_per_execution=1) -> list[dict]:
    """The traced rows whose steps the trace holds: not the profiler's warm-up step before its
    window nor the teardown step after it, which also count as traced (not unprofiled). Where a
    call runs several updates the trace holds whole calls, which the window's update numbers do
    not bound: all traced rows then."""
    traced = step_rows.where(rows, step_rows.flagged(rows, "traced"))
    if steps_per_execution != 1 or not (isinstance(trace_window, list) and len(trace_window) == 2
            and all(isinstance(n, int) for n in trace_window)):
        return traced
    first, last = trace_window
    return [r for r in traced if first <= r["step"] <= last] or traced


def _timed_phases(rows: list[dict], warmup_steps: int) -> list[str]:
    """Phases the step timers measured on the unprofiled steady steps."""
    steady = step_rows.steady(rows, warmup_steps)
    untraced = ~step_rows.flagged(steady, "traced")
    return [p for p in MARKED_PHASES
            if untraced.any() and not np.isnan(step_rows.column(steady, f"{p}_ms")[untraced]).any()]


def compile_ms(rows: list[dict], warmup_steps: int) -> float | None:
    """One-time cost of the warm-up steps: what they took beyond a steady-state step."""
    steady = step_rows.steady(rows, warmup_steps)
    if warmup_steps == 0 or not steady:
        return None
    median = float(np.median(step_rows.column(steady, "step_ms")))
    return sum(max(0.0, r["step_ms"] - median) for r in step_rows.warm_up(rows, warmup_steps))


def per_update(steps: list[StepBreakdown], steps_per_execution: int, steps_run: int,
               steps_per_epoch: int) -> list[StepBreakdown]:
    """With steps_per_execution = N, one traced step event is one call running up to N updates
    (fewer at an epoch's end): split each into its updates, each an equal share."""
    updates = []
    for call in steps:
        first = call.step
        count = updates_in_call(first, steps_per_execution, steps_per_epoch, steps_run)
        updates += [StepBreakdown(first + i, call.step_ms / count,
                                  {p: ms / count for p, ms in call.phase_ms.items()}, call.loss)
                    for i in range(count)]
    return updates


def trace_overhead_pct(rows: list[dict], warmup_steps: int) -> float | None:
    """Profiling distorts small steps: median traced step against median untraced step."""
    steady = step_rows.steady(rows, warmup_steps)
    step_ms, traced = step_rows.column(steady, "step_ms"), step_rows.flagged(steady, "traced")
    if traced.all() or not traced.any():
        return None
    return 100.0 * (float(np.median(step_ms[traced])) / float(np.median(step_ms[~traced])) - 1.0)


def _label(result: Breakdown, run: Run) -> None:
    manifest = run.manifest
    result.run_id = run.run_id
    result.workload = manifest.get("workload")
    result.framework = run.framework
    result.variant = manifest.get("variant")
    result.device = manifest.get("device")
    result.label = run.label


def step_times_of(run) -> list[float]:
    """A run's (or run directory's) unprofiled steady step times (ms), from its step timers
    alone: the trace is not read, so a measurement can ask this between rounds."""
    from gapscope.analysis.model.run import load_run
    return breakdown(run if isinstance(run, Run) else load_run(run), Source.TIMERS).step_times_ms
