"""Reads a run directory's compile.json (workloads.runners.dynamo_records): the compiles, graph breaks
and what the torch of the run could not record, refused in one line when malformed."""
from __future__ import annotations

from pathlib import Path

from gapscope.profilers import state_json
from gapscope.profilers.run_dir import COMPILE_JSON
from gapscope.profilers.errors import GapscopeInputError


def read_compile_records(run_dir: str | Path) -> dict | None:
    """{"torch", "compiles": [...], "graph_breaks": [...], "unavailable": [...]}; None when the run
    has no compile.json (it compiled nothing, or an older gapscope wrote it)."""
    path = Path(run_dir) / COMPILE_JSON
    try:
        data = state_json.load(path)
    except FileNotFoundError:
        return None
    lists = ("compiles", "graph_breaks", "unavailable")
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in lists):
        raise GapscopeInputError(f"{path}: no gapscope compile record (needs the lists {', '.join(lists)})")
    for key in ("compiles", "graph_breaks"):
        if not all(isinstance(item, dict) for item in data[key]):
            raise GapscopeInputError(f"{path}: {key} holds an entry that is no object")
    return data


def steps_compiling_after(records: dict | None, warmup_steps: int) -> list[int]:
    """The steps after the warm-up in which something compiled (a Dynamo recompile or a new
    frame), a tf.function traced again or JAX traced or compiled: events, not steady time."""
    if not records:
        return []
    entries = [*records["compiles"], *(t for key in ("tf_traces", "jax_events")
                                       for t in records.get(key) or [] if isinstance(t, dict))]
    return sorted({s for e in entries if isinstance(s := e.get("step"), int) and not isinstance(s, bool)
                   and s >= warmup_steps})
