"""A run's results as TensorBoard summary events: per-step scalars of the step and each phase,
and the breakdown as Markdown for the Text dashboard. Pure: the writer lives in analysis.tensorboard.summaries."""
from __future__ import annotations

from gapscope.analysis.renderers import registry
from gapscope.analysis.results.records import Breakdown
from gapscope.profilers.phases import MARKED_PHASES, PHASES

# The same tags in every run, so TensorBoard overlays runs in one chart per tag.
STEP_TAG = "step_ms"
PHASE_TAG = "phase_ms/{}"
LOSS_TAG = "loss"
BREAKDOWN_TAG = "breakdown"
RUN_TAG = "run"


def scalar_points(rows: list[dict], breakdown: Breakdown | None) -> list[tuple[str, int, float]]:
    """(tag, step, value) of every step.

    The step time comes from the step timers, warm-up included, so the first steps' compile
    cost shows. Phases come from the timers where they timed all four (eager loops), else from
    the breakdown's steps (a trace, which sees inside compiled steps the timers cannot)."""
    points = [(STEP_TAG, int(r["step"]), float(r["step_ms"])) for r in rows]
    points += [(LOSS_TAG, int(r["step"]), float(r["loss"])) for r in rows if r.get("loss") is not None]
    if rows and all(r.get(f"{p}_ms") is not None for r in rows for p in MARKED_PHASES):
        for r in rows:
            marked = {p: float(r[f"{p}_ms"]) for p in MARKED_PHASES}
            marked["other"] = float(r["step_ms"]) - sum(marked.values())
            points += [(PHASE_TAG.format(p), int(r["step"]), marked[p]) for p in PHASES]
    elif breakdown is not None:
        for s in breakdown.steps:
            points += [(PHASE_TAG.format(p), int(s.step), float(s.phase_ms[p])) for p in PHASES]
    return points


def breakdown_text(breakdown: Breakdown | None, problem: str | None = None) -> str:
    if breakdown is None:
        return f"No breakdown for this run: {problem}"
    return registry.BREAKDOWN["markdown"].render([breakdown])


def run_text(manifest: dict) -> str:
    """What ran where, as a two-column Markdown table."""
    versions = manifest.get("versions") or {}
    facts = [("run", manifest.get("run_id")), ("workload", manifest.get("workload")),
             ("framework", manifest.get("framework")), ("variant", manifest.get("variant")),
             ("device", manifest.get("device")), ("host", manifest.get("host")),
             ("status", manifest.get("status")), ("started", manifest.get("started_at"))]
    facts += [(name, version) for name, version in versions.items() if version]
    lines = ["| | |", "|---|---|"]
    lines += [f"| {key} | {'' if value is None else value} |" for key, value in facts]
    return "\n".join(lines) + "\n"


def summary_events(points: list[tuple[str, int, float]], texts: dict[str, str],
                   start_wall_time: float, step_ms: dict[int, float]) -> list:
    """Event protos; each step's wall time is the run's start plus the steps before it, so
    TensorBoard's relative axis shows how the run spent its time."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.scalar.summary_v2 import scalar_pb
    from tensorboard.plugins.text.summary_v2 import text_pb

    elapsed, wall = 0.0, {}
    for step in sorted(step_ms):
        elapsed += step_ms[step] / 1000.0
        wall[step] = start_wall_time + elapsed
    events = [event_pb2.Event(wall_time=wall.get(step, start_wall_time), step=step,
                              summary=scalar_pb(tag, value))
              for tag, step, value in sorted(points, key=lambda p: (p[1], p[0]))]
    events += [event_pb2.Event(wall_time=start_wall_time + elapsed, step=0,
                               summary=text_pb(tag, text)) for tag, text in texts.items()]
    return events
