"""Iterations of a trace with no step markers, found at its optimizer steps: each runs from one
optimizer step's end to the next's, and the first (cold) one is left out as warm-up."""
from __future__ import annotations

import re

import numpy as np

from gapscope.analysis.events.columns import code
from gapscope.analysis.events.phase_rules import MODULE_RANGE_PREFIX, annotation_phase, framework_phase
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, STEP, Event, Trace
from gapscope.analysis.events.tracks import outermost

ITERATION = "iteration"
# One name per optimizer update, ending an iteration: torch's Optimizer.step#SGD.step,
# Lightning's optimizer_step action, a user's "optimizer_step" range, Keras/TF ops in an
# optimizer's scope (one per variable: they are gathered into one boundary below).
# Optimizer.zero_grad is left out: it runs at an iteration's start, not its end.
_TORCH_STEP = "Optimizer.step#"
_LIGHTNING_STEP = re.compile(r"(?:\[pl\]\[profile\])?\[(?:Strategy|LightningModule)\][\w.]*\.optimizer_step")
_BOUNDARY_KINDS = (ANNOTATION, HOST_OP)
# Marked ranges that cover less than this share of their span are boundaries between steps
# (Optimizer.step, 24 of 160 ms), not the steps themselves (a train_step range covers nearly all).
BOUNDARY_COVER = 0.5


def is_optimizer_step(name: str) -> bool:
    if name.startswith(_TORCH_STEP) or _LIGHTNING_STEP.fullmatch(name):
        return True
    if name.strip("# ").lower() in ("optimizer_step", "optimizer"):  # a user's own range
        return True
    return ":" in name and framework_phase(name) == "optimizer"


def optimizer_iterations(trace: Trace) -> tuple[list[Event], str | None]:
    """The iterations between optimizer steps, and the note that says how they were found;
    ([], None) where the trace holds fewer than two optimizer steps."""
    columns = trace.columns
    wanted = np.array([is_optimizer_step(name) for name in columns.names], bool)
    boundaries = _outermost(trace, wanted)
    if len(boundaries) < 2:
        return [], None
    name = columns.names[int(columns.name[boundaries[0][2]])]
    return between_boundaries(trace, boundaries, f"optimizer steps ({_short(name)})")


def between_boundaries(trace: Trace, boundaries: list[tuple[float, float, int]],
                       what: str) -> tuple[list[Event], str | None]:
    """Steps from one boundary's end to the next's, for (start, end, row) boundaries in time
    order; boundaries with no backward op between them (a Keras optimizer's per-variable ops)
    are one. The first iteration, from the trace's start to the first boundary's end, is
    left out: it is the cold one (first-call convolution algorithms, loader start-up)."""
    ends = _gathered(trace, boundaries)
    if len(ends) < 2:
        return [], None
    columns = trace.columns
    track = columns.wheres[columns.where[boundaries[0][2]]][1]
    steps = [Event(ITERATION, STEP, lo, hi - lo, track, number)
             for number, (lo, hi) in enumerate(zip(ends[:-1], ends[1:]), start=1)]
    host = columns.on_host()
    first = float(columns.start_us[host].min()) if host.any() else ends[0]
    return steps, (f"no step markers: {len(steps)} iteration(s) taken between {what}, each from "
                   f"one's end to the next's; the first ({(ends[0] - first) / 1000:.3f} ms, from the "
                   "trace's start) left out as warm-up")


def call_cycles(trace: Trace, rows: list[int], what: str) -> tuple[list[Event], str | None]:
    """Steps from one call of a module (its with_modules range, in start order) to the next's
    start: the call's forward, the backward and loading after it. A module's range holds its
    forward only, so the range itself is no step; n calls give n - 1 steps."""
    columns = trace.columns
    starts = sorted(float(columns.start_us[r]) for r in rows)
    if len(starts) < 2:
        return [], None
    track = columns.wheres[columns.where[rows[0]]][1]
    steps = [Event(ITERATION, STEP, lo, hi - lo, track, number)
             for number, (lo, hi) in enumerate(zip(starts[:-1], starts[1:]), start=1)]
    return steps, (f"{len(steps)} step(s) taken between the calls of {what}, each from one call's "
                   "start to the next's; the last call, whose end of step the trace does not show, "
                   "left out")


def module_iterations(trace: Trace) -> tuple[list[Event], str | None]:
    """Iterations of a trace whose loop runs forward and backward with no optimizer step (the
    gradients kept, or stepped outside the trace): from each outermost call of the model's
    module (with_modules' `nn.Module: Net_0`) to the next call (the loading between them
    included, as between optimizer steps), the last to its backward's end. The first is left
    out as warm-up, as between optimizer steps. ([], None) where the model is
    called fewer than twice or no backward follows (inference: each call is no training step)."""
    columns = trace.columns
    module = np.array([n.startswith(MODULE_RANGE_PREFIX) for n in columns.names], bool)
    rows = np.flatnonzero(module[columns.name] & columns.on_host())
    if len(rows) < 2:
        return [], None
    _, kept = outermost(columns, np.zeros(len(columns.start_us), np.int64), rows).get(0, ([], []))
    names = [int(columns.name[r]) for r in kept]
    first = {}
    for r, n in zip(kept, names):
        first.setdefault(n, float(columns.start_us[r]))
    # The most called; of equals (the model and its loss module), the first called: the model.
    top = max(first, key=lambda n: (names.count(n), -first[n]))
    calls = [r for r, n in zip(kept, names) if n == top]
    if len(calls) < 2:
        return [], None
    backward = np.array([framework_phase(n) == "backward" or annotation_phase(n) == "backward"
                         for n in columns.names], bool)
    ops = backward[columns.name] & columns.on_host()
    op_starts = columns.start_us[ops]
    op_ends = op_starts + columns.dur_us[ops]
    starts = [float(columns.start_us[r]) for r in calls]
    steps = []
    for number, (lo, hi) in enumerate(zip(starts, starts[1:] + [np.inf])):
        after = (op_starts >= lo) & (op_starts < hi)
        if not after.any():
            return [], None  # a call with no backward after it: no training iteration
        end = hi if hi < np.inf else float(op_ends[after].max())
        steps.append(Event(ITERATION, STEP, lo, end - lo, columns.wheres[columns.where[calls[0]]][1], number))
    cold, steps = steps[0], steps[1:]
    name = columns.names[top]
    return steps, (f"no step markers: {len(steps)} iteration(s) taken at the {len(calls)} calls of "
                   f"{_short(name)!r} (forward and backward, no optimizer step), each from a call's "
                   f"start to the next's (the last to its backward's end); the first "
                   f"({cold.dur_us / 1000:.3f} ms) left out as warm-up (--step-marker {name!r} "
                   "keeps it)")


def marked_boundaries(trace: Trace, rows: list[int]) -> list[tuple[float, float, int]] | None:
    """The --step-marker ranges as boundaries, where they cover under BOUNDARY_COVER of their
    span (each is a part of a step, not the step); None where they enclose the steps."""
    columns = trace.columns
    if len(rows) < 2:
        return None
    starts = columns.start_us[rows]
    ends = starts + columns.dur_us[rows]
    span = float(ends.max() - starts.min())
    if span <= 0 or float(columns.dur_us[rows].sum()) >= BOUNDARY_COVER * span:
        return None
    return [(float(s), float(e), int(r)) for s, e, r in zip(starts, ends, rows)]


def _outermost(trace: Trace, wanted: np.ndarray) -> list[tuple[float, float, int]]:
    columns = trace.columns
    kinds = columns.kind_codes()
    rows = np.flatnonzero(wanted[columns.name] & columns.on_host()
                          & np.isin(kinds, [code(k) for k in _BOUNDARY_KINDS]))
    # Boundaries follow one another whichever thread runs them: all count as one track.
    _, kept = outermost(columns, np.zeros(len(kinds), np.int64), rows).get(0, ([], []))
    return [(float(columns.start_us[r]), float(columns.start_us[r] + columns.dur_us[r]), r) for r in kept]


def _gathered(trace: Trace, boundaries: list[tuple[float, float, int]]) -> list[float]:
    """The end of each run of boundaries with no backward op started between them."""
    columns = trace.columns
    backward = np.array([framework_phase(n) == "backward" or annotation_phase(n) == "backward"
                         for n in columns.names], bool)
    rows = backward[columns.name] & columns.on_host()
    starts = np.sort(columns.start_us[rows])
    ends = [boundaries[0][1]]
    for start, end, _ in boundaries[1:]:
        between = np.searchsorted(starts, ends[-1]) < np.searchsorted(starts, start)
        if between or not len(starts):
            ends.append(end)
        else:
            ends[-1] = max(ends[-1], end)
    return ends


def _short(name: str) -> str:
    return name if len(name) <= 60 else name[:57] + "..."
