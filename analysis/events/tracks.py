"""Per event, a number for its track alone: one thread's events come under several kinds (ops,
ranges, runtime calls), each kind with its own id in EventColumns.wheres."""
from __future__ import annotations

import numpy as np


def track_ids(columns) -> np.ndarray:
    """Per row of `columns` (an EventColumns), the number of its track; equal tracks, equal numbers."""
    ids: dict[str, int] = {}
    per_where = np.array([ids.setdefault(track, len(ids)) for _, track in columns.wheres], np.int64)
    return per_where[columns.where] if len(per_where) else np.zeros(len(columns), np.int64)
