"""Host calls inside the steps that wait for the device (a blocking copy, a synchronize, .item()):
their time per step and the phase each sits in, named in the run's notes."""
from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from gapscope.analysis.events.batch_copy import COPY_OPS
from gapscope.analysis.events.columns import code
from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.trace import HOST_OP, RUNTIME, Trace
from gapscope.analysis.events.tracks import outermost, track_ids
from gapscope.analysis.measures.runtime_calls import waits_for_device

# The ops a wait is named after where it runs inside one: a copy (COPY_OPS), or a read of a
# device scalar.
SCALAR_OPS = frozenset({"aten::item", "aten::_local_scalar_dense"})
SHOWN = 3  # the notes name the longest few
# A wait under this share of the mean step is named nowhere: a few microseconds of sync in a
# step are the usual cost of a loop, not a finding.
NOTABLE_SHARE = 0.05


@dataclass
class Blocking:
    what: str            # "blocking copy aten::to", "sync aten::item", "sync cudaDeviceSynchronize"
    phase: str
    ms_per_step: float
    count_per_step: float


def blocking_calls(trace: Trace, timeline: PhaseTimeline) -> list[Blocking]:
    """Each wait inside a step, counted once under the outermost copy or scalar op around it
    on its thread (that op's time is the wait's cost: the copy cannot finish earlier), else as
    the bare runtime call; per (what, phase), longest first."""
    steps = len(timeline.steps)
    if not steps:
        return []
    columns = trace.columns
    kinds = columns.kind_codes()
    is_wait = np.array([waits_for_device(name) for name in columns.names], bool)
    waits = np.flatnonzero((kinds == code(RUNTIME)) & is_wait[columns.name])
    if not len(waits):
        return []
    wrapping = np.array([name in COPY_OPS or name in SCALAR_OPS for name in columns.names], bool)
    tracks = track_ids(columns)
    outer = outermost(columns, tracks, np.flatnonzero((kinds == code(HOST_OP)) & wrapping[columns.name]))
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    counted = set()
    for row in waits.tolist():
        start = float(columns.start_us[row])
        unit = _around(columns, outer.get(int(tracks[row]), ([], [])), start)
        unit = row if unit is None else unit
        if unit in counted:
            continue
        counted.add(unit)
        unit_start = float(columns.start_us[unit])
        step, phase = timeline.locate(unit_start)
        if step is None:
            continue
        name = columns.names[columns.name[unit]]
        what = (f"blocking copy {name}" if name in COPY_OPS else f"sync {name}")
        total = totals[(what, phase)]
        total[0] += float(columns.dur_us[unit]) / 1000.0
        total[1] += 1
    found = [Blocking(what, phase, ms / steps, n / steps) for (what, phase), (ms, n) in totals.items()]
    return sorted(found, key=lambda b: -b.ms_per_step)


def _around(columns, ops: tuple[list[float], list[int]], t: float) -> int | None:
    """The op of `ops` (disjoint, sorted) whose time holds instant t, else None."""
    starts, rows = ops
    i = bisect.bisect_right(starts, t) - 1
    if i >= 0 and t < starts[i] + float(columns.dur_us[rows[i]]):
        return rows[i]
    return None


def blocking_notes(trace: Trace, timeline: PhaseTimeline) -> list[str]:
    """One line naming the longest waits, each at least NOTABLE_SHARE of the mean step."""
    steps = timeline.steps
    step_ms = sum(s.dur_us for s in steps) / 1000.0 / len(steps) if steps else 0.0
    found = [b for b in blocking_calls(trace, timeline) if b.ms_per_step >= NOTABLE_SHARE * step_ms]
    if not found:
        return []
    return ["the host waits for the device: " + "; ".join(
        f"{b.what} {b.ms_per_step:.3f} ms per step in {b.phase}"
        + (f" ({b.count_per_step:g} a step)" if b.count_per_step != 1 else "")
        for b in found[:SHOWN])]
