"""Writes TensorBoard summaries into a finished run directory with TensorBoard's own event writer
(no TensorFlow or torch import), so its steps and breakdown sit beside the profiler plugins' data."""
from __future__ import annotations

import os
import socket
import time
from datetime import datetime
from pathlib import Path

from gapscope.analysis.model.locate import RunPlace, locate
from gapscope.analysis.readers.run_dir import read_steps_csv
from gapscope.analysis.tensorboard.summary_events import (BREAKDOWN_TAG, RUN_TAG, breakdown_text,
                                                      run_text, scalar_points, summary_events)
from gapscope.profilers.errors import GapscopeInputError

# gapscope's own event files end in this suffix: rewriting replaces them and nothing else.
SUFFIX = ".gapscope"


def write_run_summaries(run_dir: str | Path, run=None) -> Path:
    """Scalars per step and the breakdown text of `run_dir`; returns the event file. `run`: the
    run there, loaded already, so that its trace is read once for every view written after it.

    Idempotent: an earlier gapscope event file of the run is replaced, never doubled."""
    from gapscope.analysis.results.breakdown import breakdown
    from gapscope.analysis.results.distributed_breakdown import breakdown_of

    place = locate(run_dir) if run is None else None
    found = run.located if run is not None else place.readable() if isinstance(place, RunPlace) else None
    if found is None or found.manifest is None or found.steps_csv is None:
        raise GapscopeInputError(f"{run_dir}: not a gapscope run directory (no manifest or steps.csv)")
    rows = read_steps_csv(found.steps_csv) if run is None else run.rows
    try:
        result, problem = (breakdown_of(place) if run is None else breakdown(run)), None
    except GapscopeInputError as exc:  # too few steps, say: the scalars are still worth having
        result, problem = None, str(exc)
    points = scalar_points(rows, result)
    texts = {BREAKDOWN_TAG: breakdown_text(result, problem), RUN_TAG: run_text(found.manifest)}
    start = _start_time(found.manifest)
    events = summary_events(points, texts, start,
                            {int(r["step"]): float(r["step_ms"]) for r in rows})
    for old in found.path.glob(f"events.out.tfevents.*{SUFFIX}"):
        old.unlink()
    path = found.path / (f"events.out.tfevents.{int(start):010d}.{socket.gethostname()}."
                         f"{os.getpid()}{SUFFIX}")
    _write_events(path, events)
    return path


def _write_events(path: Path, events: list) -> None:
    """TensorBoard's own record framing on a plain file, written beside the target and then
    renamed so TensorBoard never reads half a file. Its EventFileWriter would do the same
    through `tensorboard.compat.tf`, which imports all of TensorFlow where it is installed."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    version = event_pb2.Event(wall_time=events[0].wall_time if events else 0.0,
                              file_version="brain.Event:2")
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        writer = RecordWriter(handle)
        for event in [version, *events]:
            writer.write(event.SerializeToString())
    os.replace(tmp, path)


def _start_time(manifest: dict) -> float:
    try:
        return datetime.fromisoformat(manifest["started_at"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return time.time()
