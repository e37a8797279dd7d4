"""Where a trace's steps are: the user's --step-marker, else its step events, else its iterations
between optimizer steps, else the whole trace as one window; and the last step, where the
profiler stopped inside it."""
from __future__ import annotations

import re
import statistics

import numpy as np

from gapscope.analysis.events.columns import code
from gapscope.analysis.events.iterations import (between_boundaries, call_cycles, marked_boundaries, module_iterations,
                                                 optimizer_iterations)
from gapscope.analysis.events.phase_rules import MODULE_RANGE_PREFIX
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, OTHER, STEP, Event, Trace
from gapscope.analysis.events.trace_rules import TraceRules
from gapscope.analysis.events.tracks import outermost

WHOLE_TRACE = "whole trace"
ONE_WINDOW = "is analysed as one step"  # in the warning of a trace read as one window
_MARKER_KINDS = (ANNOTATION, HOST_OP, STEP)
_NUMBER = re.compile(r"#(\d{1,18})$")


def step_windows(trace: Trace, rules: TraceRules) -> tuple[list[Event], list[str]]:
    """The steps in time order, and the warnings on how they were found (without steps: what
    was looked for)."""
    columns = trace.columns
    if rules.step_marker is not None:
        steps, rows = marked_steps(trace, rules)
        boundaries = marked_boundaries(trace, rows)
        called = len(rows) and columns.names[int(columns.name[rows[0]])].startswith(MODULE_RANGE_PREFIX)
        if called:
            steps, note = call_cycles(trace, rows, f"--step-marker {rules.step_marker!r}")
            if steps:
                return steps, [note]
        elif boundaries:
            # Ranges that are a part of each step (Optimizer.step): the steps lie between them.
            steps, note = between_boundaries(trace, boundaries, f"--step-marker {rules.step_marker!r} "
                                             "ranges (too short to enclose a step)")
            if steps:
                return steps, [note]
        elif steps:
            return steps, []
        why = (f"--step-marker {rules.step_marker!r} matches one module call: a step runs from one "
               "call to the next" if called else f"no host event matches --step-marker {rules.step_marker!r}")
    else:
        rows = np.flatnonzero(columns.kind_codes() == code(STEP))
        if len(rows):
            return sorted((columns.event(int(row)) for row in rows), key=lambda e: e.start_us), []
        steps, note = optimizer_iterations(trace)
        if steps:
            return steps, [note]
        steps, note = module_iterations(trace)
        if steps:
            return steps, [note]
        why = ("the trace holds no step markers (ProfilerStep#N, a TF step_num) nor two optimizer "
               "steps or model calls with their backward")
    host = np.flatnonzero(columns.on_host())
    # A device-only capture still has its kernels and copies to measure: its window is the
    # span of the device events, and no host phase can be found in it.
    rows, what = (host, "host events") if len(host) else (np.arange(len(columns.start_us)), "device events only")
    if not len(rows):
        marker = f" or --step-marker {rules.step_marker!r}" if rules.step_marker is not None else ""
        return [], [f"looked for ProfilerStep#N, a TF step_num{marker}, then any event to "
                    "analyse as one window: the trace holds none"]
    start = float(columns.start_us[rows].min())
    end = float((columns.start_us[rows] + columns.dur_us[rows]).max())
    track = columns.wheres[columns.where[rows[0]]][1]
    window = Event(WHOLE_TRACE, STEP, start, end - start, track)
    return [window], [f"warning: {why}: the whole trace ({(end - start) / 1000:.3f} ms of {what}) "
                      f"{ONE_WINDOW}; name the range or op that marks a step with --step-marker"]


def single_window_warnings(breakdowns) -> list[str]:
    """For a compare: each run whose trace was analysed as one window, whose "step" is then
    the whole trace, cold start included, so that the verdict may be reversed."""
    return [f"{b.name} has no steps: its whole trace {ONE_WINDOW}, cold start included, so this "
            "verdict may be wrong (give --step-marker)"
            for b in breakdowns if any(ONE_WINDOW in note for note in b.notes)]


def marked_steps(trace: Trace, rules: TraceRules) -> tuple[list[Event], list[int]]:
    """Each outermost host range or op named like --step-marker is one step (a marker that also
    names ranges nested in a step counts that step once); its number is a '#N' the name ends in.
    Also their rows, which may be boundaries between steps rather than steps."""
    columns = trace.columns
    kinds = columns.kind_codes()
    wanted = np.array([rules.is_step_marker(name) for name in columns.names], bool)
    module = np.array([name.startswith(MODULE_RANGE_PREFIX) for name in columns.names], bool)
    # A module's with_modules range (python_function) may mark steps too (call_cycles).
    rows = np.flatnonzero(wanted[columns.name] & columns.on_host()
                          & (np.isin(kinds, [code(k) for k in _MARKER_KINDS])
                             | (module[columns.name] & (kinds == code(OTHER)))))
    # Steps follow one another whichever thread marks them: all markers count as one track.
    _, kept = outermost(columns, np.zeros(len(kinds), np.int64), rows).get(0, ([], []))
    steps = []
    for row in kept:
        event = columns.event(row)
        number = _NUMBER.search(event.name)
        steps.append(Event(event.name, STEP, event.start_us, event.dur_us, event.track,
                           int(number.group(1)) if number else None))
    return steps, kept


def cut_off_last(steps: list[Event], phase_ms: list[dict[str, float]]) -> str | None:
    """Why the last step is one the profiler stopped inside, or None where it is whole. It is
    cut off where it is under half the median of the other steps AND holds none of a phase
    (backward, optimizer) that every other step holds: the trace then shows what it misses.
    A short step that holds every phase (a small last batch), or a trace whose steps show
    neither phase, keeps its last step: nothing in the trace says it was cut."""
    if len(steps) < 2:
        return None
    last, others = steps[-1], steps[:-1]
    median = statistics.median(s.dur_us for s in others)
    if not last.dur_us < median / 2:
        return None
    missing = [p for p in ("backward", "optimizer")
               if phase_ms[-1][p] == 0 and all(ms[p] > 0 for ms in phase_ms[:-1])]
    if not missing:
        return None
    return (f"last step {last.name} left out ({last.dur_us / 1000:.3f} ms against a median of "
            f"{median / 1000:.3f} ms): it holds no {' or '.join(missing)}, which every other step "
            "holds, so the profiler stopped inside it")
