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


def warmup_updates(warmup_steps: int, steps_per_execution: int, updates_per_epoch: int,
                   total_updates: int) -> int:
    """Updates before the steady state: the warm-up, rounded up to a whole call where one
    compiled call runs several updates (a call that compiled is not steady anywhere)."""
    if steps_per_execution <= 1 or updates_per_epoch <= 0 or warmup_steps == 0:
        return warmup_steps
    first_of_call = first_update_of_call(warmup_steps, steps_per_execution, updates_per_epoch)
    if first_of_call == warmup_steps:
        return warmup_steps
    return first_of_call + updates_in_call(first_of_call, steps_per_execution, updates_per_epoch,
                                           total_updates)
