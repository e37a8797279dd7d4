"""How many optimizer updates one call of a compiled Keras train function runs."""
from __future__ import annotations


def updates_in_call(first_update: int, steps_per_execution: int, updates_per_epoch: int,
                    total_updates: int) -> int:
    """With steps_per_execution = N a call runs N updates, fewer where the epoch or the run
    ends first: a call never crosses an epoch end."""
    left_in_epoch = updates_per_epoch - first_update % updates_per_epoch
    return max(1, min(steps_per_execution, left_in_epoch, total_updates - first_update))


def first_update_of_call(update: int, steps_per_execution: int, updates_per_epoch: int) -> int:
    """The first update of the call that ran `update` (calls start at each epoch's start)."""
    epoch_start = update - update % updates_per_epoch
    return epoch_start + (update - epoch_start) // steps_per_execution * steps_per_execution
