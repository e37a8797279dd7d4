"""Turns per-call timer rows of Keras' train function into per-update rows.

With steps_per_execution = N, one call runs N optimizer updates and callbacks see only the
call; each update is given an equal share of the call (the mean is what can be known)."""
from __future__ import annotations

from gapscope.profilers.executions import updates_in_call


def expand_executions(rows: list[dict], steps_per_execution: int, updates_per_epoch: int,
                      total_updates: int) -> list[dict]:
    expanded, update = [], 0
    for row in rows:
        count = updates_in_call(update, steps_per_execution, updates_per_epoch, total_updates)
        first = update
        for _ in range(count):
            share = {key: value / count if _call_total(key) and value is not None else value
                     for key, value in row.items()}
            share.update(step=update, execution_first_step=first, epoch=update // updates_per_epoch)
            expanded.append(share)
            update += 1
    return expanded


def _call_total(key: str) -> bool:
    """A cell that sums over the call's updates (its times and page faults), so shared out."""
    return key.endswith("_ms") or key == "minor_faults"
