"""Turns per-call timer rows of Keras' train function into per-update rows.

With steps_per_execution = N, one call runs N optimizer updates and callbacks see only the
call; each update is given an equal share of the call (the mean is what can be known)."""
from __future__ import annotations


def expand_executions(rows: list[dict], steps_per_execution: int, updates_per_epoch: int,
                      total_updates: int) -> list[dict]:
    expanded, update = [], 0
    for row in rows:
        # A call never crosses an epoch end: the last call of an epoch may run fewer updates.
        left_in_epoch = updates_per_epoch - update % updates_per_epoch
        count = max(1, min(steps_per_execution, left_in_epoch, total_updates - update))
        first = update
        for _ in range(count):
            share = {key: value / count if key.endswith("_ms") and value is not None else value
                     for key, value in row.items()}
            share.update(step=update, execution_first_step=first, epoch=update // updates_per_epoch)
            expanded.append(share)
            update += 1
    return expanded
