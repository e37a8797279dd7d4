"""The host's CUDA/HIP runtime calls inside the steps by what they do (launch a kernel, queue a copy, wait for the device), per phase."""
from __future__ import annotations

import re
from collections import defaultdict

from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.trace import Event

LAUNCH, COPY, SYNC = "launch", "copy", "sync"

# The calls that return only once the device is done: every synchronize, and the memcpy that is
# not Async (cudaMemcpy, cudaMemcpy2D, cudaMemcpyPeer, but not cudaMemcpy2DAsync; torch's
# blocking copies call cudaMemcpyAsync then cudaStreamSynchronize). A stream waiting on an event
# is the device's wait, not the host's: cudaStreamWaitEvent returns at once.
_HOST_WAITS = re.compile(r"Synchronize|(?:cuda|hip)Memcpy(?!\w*Async)")


def call_kind(name: str) -> str | None:
    """cudaLaunchKernel / hipLaunchKernel / cudaGraphLaunch queue kernels; cudaMemcpy(Async) and
    cudaMemset queue copies and sets; cuda{Stream,Device,Event}Synchronize block the host until
    the device is done. Anything else (allocation, queries, event records) is none of them."""
    if "Synchronize" in name:
        return SYNC
    if "Memcpy" in name or "Memset" in name:
        return COPY
    if "Launch" in name:
        return LAUNCH
    return None


def waits_for_device(name: str) -> bool:
    """Whether the host is blocked in this runtime call until the device has caught up."""
    return bool(_HOST_WAITS.search(name))


def queued(calls: list[Event]) -> list[Event]:
    """The calls that put work on a device queue: kernel launches, copies and sets."""
    return [e for e in calls if call_kind(e.name) in (LAUNCH, COPY)]


def calls_by_phase(calls: list[Event], timeline: PhaseTimeline, steps: int) -> dict[str, dict]:
    """{phase: {kind: {count_per_step, ms_per_step}}}: each call in the phase its host time began
    in (the timeline's, so it agrees with every other per-phase figure), means per step."""
    n = max(steps, 1)
    count: dict[tuple[str, str], int] = defaultdict(int)
    time_us: dict[tuple[str, str], float] = defaultdict(float)
    for call in calls:
        kind = call_kind(call.name)
        step, phase = timeline.locate(call.start_us)
        if kind is None or step is None:
            continue
        count[(phase, kind)] += 1
        time_us[(phase, kind)] += call.dur_us
    found: dict[str, dict] = {}
    for (phase, kind), c in sorted(count.items()):
        found.setdefault(phase, {})[kind] = {"count_per_step": round(c / n, 6),
                                             "ms_per_step": round(time_us[(phase, kind)] / n / 1000.0, 6)}
    return found
