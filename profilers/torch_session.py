"""torch.profiler over a scheduled window, written where TensorBoard's pytorch_profiler plugin looks."""
from __future__ import annotations

import errno
import gzip
import socket
from pathlib import Path

from profilers.trace_window import TraceWindow


def torch_profiler(run_dir: Path, window: TraceWindow, cuda: bool):
    """A profiler to call .step() on once per step; it records exactly `window`.

    One profiler-warm-up step precedes the window (kineto needs it to start up), so that
    cost lands on a step that is already excluded as warm-up."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(
        activities=activities,
        schedule=schedule(skip_first=window.first - 1, wait=0, warmup=1, active=window.steps,
                          repeat=1),
        on_trace_ready=_checked(tensorboard_trace_handler(
            str(run_dir), worker_name=socket.gethostname(), use_gzip=True), run_dir),
        # Shapes and stacks slow a small step ~1.7x; the breakdown needs neither.
        record_shapes=False, with_stack=False, profile_memory=False,
        acc_events=False,
    ) if window.steps > 0 else None


def _checked(handler, run_dir: Path):
    """The trace handler, then a look at what it wrote: kineto writes the JSON from C++ and
    ignores a failed write, so a full disk leaves a truncated trace behind a run that would
    otherwise say `complete`."""
    def on_trace_ready(prof) -> None:
        before = set(run_dir.glob("*.pt.trace.json*"))
        handler(prof)
        for path in set(run_dir.glob("*.pt.trace.json*")) - before:
            if not _complete_json(path):
                raise OSError(errno.EIO, "the profiler wrote a truncated trace (is the disk full?)",
                              str(path))
    return on_trace_ready


def _complete_json(path: Path, chunk: int = 1 << 20) -> bool:
    """Whether the trace ends as a JSON object does: its last non-blank character is `}`."""
    last = b""
    try:
        with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as handle:
            while block := handle.read(chunk):
                last = (last + block)[-64:]
    except (OSError, EOFError):  # a gzip stream cut short
        return False
    return last.rstrip().endswith(b"}")
