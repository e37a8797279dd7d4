"""The batch's host-to-device copy after the data loader's range: data_load's time, as the
phases are defined (next batch ready on the device), though the loop runs it outside that range."""
from __future__ import annotations

import numpy as np

from gapscope.analysis.events.columns import NONE, code
from gapscope.analysis.events.intervals import Interval
from gapscope.analysis.events.trace import ANNOTATION, HOST_OP, MEMCPY, RUNTIME, Trace
from gapscope.analysis.events.tracks import outer_first, track_ids

# The ops a `.to(device)` / `.cuda()` of the batch runs as.
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_"})


def batch_copies(trace: Trace, data: list[Interval], data_rows: np.ndarray) -> list[Interval]:
    """After each of the merged `data` intervals (found from the rows `data_rows`): the copy ops
    that follow it one after another on a data loader's thread, each launching a host-to-device
    memcpy, up to the first other range or op. A copy the user wrapped in a range of their
    own (TorchRec's `## sparse_data_dist ##`) comes after that range, so it stays the range's;
    a copy inside forward is nested there, never the first op after the data."""
    columns = trace.columns
    kinds = columns.kind_codes()
    tracks = track_ids(columns)
    launches = _h2d_launches(columns, kinds, tracks)
    if not launches or not data:
        return []
    is_copy = np.array([name in COPY_OPS for name in columns.names], bool)[columns.name]
    ops = np.isin(kinds, [code(HOST_OP), code(ANNOTATION)])
    windows = [(end, after) for (_, end), (after, _) in zip(data, data[1:] + [(np.inf, np.inf)])]
    starts, ends = columns.start_us, columns.start_us + columns.dur_us
    found = []
    for track in np.unique(tracks[data_rows]).tolist():
        rows = np.flatnonzero(ops & (tracks == track))
        rows = rows[outer_first(starts[rows], columns.dur_us[rows])]
        found += _copies_after(starts[rows], ends[rows], is_copy[rows],
                               np.asarray(launches.get(track, [])), windows)
    return found


def _copies_after(starts: np.ndarray, ends: np.ndarray, is_copy: np.ndarray,
                  launches: np.ndarray, windows: list[Interval]) -> list[Interval]:
    """One thread's ops (sorted by start, outer before inner): per window, the outermost ops
    from its start that are copies launching a memcpy (a start in `launches`), up to the first
    that is not. Only those few ops are looked at, one by one: a 1 GB trace holds millions."""
    found = []
    for lo, hi in windows:
        reach = lo
        for i in range(int(np.searchsorted(starts, lo)), len(starts)):
            start, end = float(starts[i]), float(ends[i])
            if start >= hi:
                break
            if start < reach:  # nested in the copy before
                continue
            j = int(np.searchsorted(launches, start))
            if not (is_copy[i] and j < len(launches) and launches[j] < end):
                break
            found.append((start, min(end, hi)))
            reach = end
    return found


def _h2d_launches(columns, kinds: np.ndarray, tracks: np.ndarray) -> dict[int, list[float]]:
    """Per host track, the sorted start times of the runtime calls whose correlation id a
    host-to-device memcpy on the device carries."""
    h2d_name = np.array(["HtoD" in name or "H2D" in name for name in columns.names], bool)
    copies = (kinds == code(MEMCPY)) & h2d_name[columns.name] & (columns.correlation != NONE)
    if not copies.any():
        return {}
    calls = np.flatnonzero((kinds == code(RUNTIME)) & np.isin(columns.correlation, columns.correlation[copies]))
    found: dict[int, list[float]] = {}
    for row in calls[np.argsort(columns.start_us[calls], kind="stable")].tolist():
        found.setdefault(int(tracks[row]), []).append(float(columns.start_us[row]))
    return found

