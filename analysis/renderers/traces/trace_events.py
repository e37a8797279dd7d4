"""A trace as Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev): gapscope's steps, one
track per phase and, where the run names layers, a track of its layers above the original
events, from the phase timeline every analyser reads."""
from __future__ import annotations

from gapscope.analysis.events.timeline import PhaseTimeline
from gapscope.analysis.events.trace import Trace
from gapscope.analysis.renderers.memory.counters import memory_counters
from gapscope.profilers import strict_json
from gapscope.profilers.phases import PHASES

# gapscope's own process, sorted above the trace's: its threads are the steps and the phases.
GAPSCOPE_PID = 0
STEPS_TID = 0
PHASE_TIDS = {phase: i for i, phase in enumerate(PHASES, start=1)}
STEP_CATEGORY, PHASE_CATEGORY, LAYER_CATEGORY = "gapscope.step", "gapscope.phase", "gapscope.layer"
# Below the phases: each layer's time as the layers table counts it (analysis.measures.layer_times).
LAYERS_TID = len(PHASES) + 1
# Facts of the neutral event model worth seeing when an event is clicked.
_ARGS = ("step_num", "correlation", "nbytes", "hlo_op", "hlo_module")


def render(trace: Trace, timeline: PhaseTimeline, title: str, layers: list | None = None,
           memory=None) -> str:
    return strict_json.dumps(document(trace, timeline, title, layers, memory), separators=(",", ":"))


def document(trace: Trace, timeline: PhaseTimeline, title: str, layers: list | None = None,
             memory=None) -> dict:
    """`traceEvents` (complete "X" events, "M" names), times in µs as recorded. `layers`: the
    run's layer spans (layer_times.layer_spans), a track of their own where there are any; with
    `memory` (the trace's MemoryEvents) a counter track per device of the allocator's level."""
    threads = {STEPS_TID: "steps", **{tid: phase for phase, tid in PHASE_TIDS.items()}}
    if layers:
        threads[LAYERS_TID] = "layers"
    events = _names(GAPSCOPE_PID, f"gapscope phases: {title}", -1, threads)
    for index, step in enumerate(timeline.steps):
        number = timeline.step_number(index)
        events.append(_complete(f"step {number}", STEP_CATEGORY, GAPSCOPE_PID, STEPS_TID,
                                step.start_us, step.dur_us, {"step": number}))
        for start, end, phase in timeline.covering(index):
            events.append(_complete(phase, PHASE_CATEGORY, GAPSCOPE_PID, PHASE_TIDS[phase],
                                    start, end - start, {"step": number}))
    for start, end, layer, phase, index in layers or ():
        events.append(_complete(layer, LAYER_CATEGORY, GAPSCOPE_PID, LAYERS_TID, start, end - start,
                                {"step": timeline.step_number(index), "phase": phase}))
    events += memory_counters(memory or [], GAPSCOPE_PID)
    events += _original(trace)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": trace.path, "format": trace.source_format,
                          "exported_by": "gapscope trace", "phases": list(PHASES)}}


def _original(trace: Trace) -> list[dict]:
    """The trace's events on their own tracks ("host/<pid>/<tid>", "device/<id>/<stream>"),
    numbered in order of appearance, since trace viewers want numeric ids."""
    pids: dict[str, int] = {}
    tids: dict[str, int] = {}
    events = []
    for e in trace.events:
        kind, _, rest = e.track.partition("/")
        process, _, thread = rest.partition("/")
        pkey = f"{kind}/{process}"
        if pkey not in pids:
            pids[pkey] = len(pids) + 1
            events += _names(pids[pkey], f"{kind} {process}", len(pids), {})
        if e.track not in tids:
            tids[e.track] = len(tids) + 1
            events += _names(pids[pkey], None, None, {tids[e.track]: thread or kind})
        args = {k: getattr(e, k) for k in _ARGS if getattr(e, k) is not None}
        events.append(_complete(e.name, e.kind, pids[pkey], tids[e.track], e.start_us, e.dur_us, args))
    return events


def _complete(name: str, category: str, pid: int, tid: int, start_us: float, dur_us: float,
              args: dict) -> dict:
    return {"name": name, "cat": category, "ph": "X", "pid": pid, "tid": tid,
            "ts": start_us, "dur": dur_us, "args": args}


def _names(pid: int, process: str | None, sort_index: int | None, threads: dict[int, str]) -> list[dict]:
    events = []
    if process is not None:
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": process}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid,
                       "args": {"sort_index": sort_index}})
    for tid, name in threads.items():
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"sort_index": tid}})
    return events
