"""Small ranks sent in batches: on an engine with a cost per task (Dask: the scheduler's round
trip and the worker's bookkeeping; Ray: its wait between tasks; a few ms a task) one task runs
several ranks of a few MB, so that cost stays a few % of the work; a rank's failure stays its own."""
from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable

from gapscope.analysis.results.engines.faults import inject_fault

# Batches kept per worker at the least: the job's last ranks must not wait behind one worker's
# long batch while the others idle.
BATCHES_PER_WORKER = 4


def group(keys: Iterable[int], sizes: dict[int, int] | None, batch_bytes: int,
          workers: int) -> list[list[int]]:
    """Consecutive keys gathered until their files hold `batch_bytes` together, at most
    keys / (BATCHES_PER_WORKER x workers) a batch; each key alone where batch_bytes is 0 or
    the sizes are unknown."""
    keys = list(keys)
    if not batch_bytes or not sizes:
        return [[key] for key in keys]
    most = max(1, len(keys) // (BATCHES_PER_WORKER * max(1, workers)))
    groups, current, held = [], [], 0
    for key in keys:
        current.append(key)
        held += sizes.get(key, batch_bytes)
        if held >= batch_bytes or len(current) >= most:
            groups.append(current)
            current, held = [], 0
    if current:
        groups.append(current)
    return groups


def call_batch(fn: Callable, calls: list[tuple[int, tuple]],
               fault: tuple[str, int] | None) -> list[tuple]:
    """What a worker runs for a batch: each call in turn, (key, value, None) or (key, None,
    error), so one rank raising fails that rank alone and the others' results come back."""
    done = []
    for key, args in calls:
        try:
            inject_fault(key, fault)
            done.append((key, fn(*args), None))
        except Exception as error:  # noqa: BLE001 - the retry loop decides what it means
            done.append((key, None, _travels(error)))
    return done


def _travels(error: Exception) -> Exception:
    """The error itself where it pickles (the batch's result must), else its type and message."""
    try:
        pickle.dumps(error)
        return error
    except Exception:  # noqa: BLE001 - any error pickling: sent as text
        return RuntimeError(f"{type(error).__name__}: {error}")
