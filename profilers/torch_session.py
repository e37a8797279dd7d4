"""torch.profiler over a scheduled window, written where TensorBoard's pytorch_profiler plugin looks."""
from __future__ import annotations

import os
import socket
from pathlib import Path

from gapscope.profilers.trace_window import TraceWindow
from gapscope.profilers.written_traces import checked_writes, whole_json


PROFILE_MEMORY_ENV = "GAPSCOPE_PROFILE_MEMORY"


def torch_profiler(run_dir: Path, window: TraceWindow, cuda: bool):
    """A profiler to call .step() on once per step; it records exactly `window`.

    One profiler-warm-up step precedes the window (kineto needs it to start up), so that
    cost lands on a step that is already excluded as warm-up."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

    # Kineto prints 'USDT:... profiler_start' and '... profiler_stop' on stderr at every
    # window, into the user's own loop's output. Its level is read when the profiler first
    # starts; the USDT lines rank above errors, so only 6 silences them. A failed trace write
    # is still caught below, and a level the user set is kept.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(
        activities=activities,
        schedule=schedule(skip_first=window.first - 1, wait=0, warmup=1, active=window.steps,
                          repeat=1),
        on_trace_ready=_checked(tensorboard_trace_handler(
            str(run_dir), worker_name=socket.gethostname(), use_gzip=True), run_dir),
        # Shapes and stacks slow a small step ~1.7x; the breakdown needs neither. The
        # allocator's events (profile_memory) give the memory per phase, in the window only;
        # PROFILE_MEMORY_ENV=0 leaves them out (their cost in the window is not measured yet).
        record_shapes=False, with_stack=False,
        profile_memory=os.environ.get(PROFILE_MEMORY_ENV, "1").strip() != "0",
        acc_events=False,
    ) if window.steps > 0 else None


def _checked(handler, run_dir: Path):
    """The trace handler, then a look at what it wrote (kineto ignores a failed write)."""
    def on_trace_ready(prof) -> None:
        checked_writes(lambda: handler(prof), run_dir, "*.pt.trace.json*", whole_json)
    return on_trace_ready
