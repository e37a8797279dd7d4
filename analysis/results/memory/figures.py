"""A run's memory figures: per step and phase from the trace's allocator events, allocation sites, creep, RSS."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from gapscope.analysis.events.memory_event import MemoryEvent
from gapscope.analysis.measures.memory.creep import Creep, LevelChange, trend
from gapscope.analysis.measures.memory.layer_memory import kept_by_layer, layer_of_events
from gapscope.analysis.measures.memory.levels import Levels, main_device
from gapscope.analysis.measures.memory.phase_memory import StepMemory, step_memory
from gapscope.analysis.measures.memory.rss import NEGLIGIBLE_RSS_MB, rss_figures
from gapscope.analysis.measures.memory.sites import enclosing_ops, top_sites
from gapscope.analysis.model.run import Run
from gapscope.profilers.errors import GapscopeInputError, TraceFormatError
from gapscope.profilers.phases import PHASES

MB = 1e6  # figures are in MB of 10^6 bytes
_DIGITS = 3
# A trend smaller than this a step is rounding, not creep (a CPU level moves by a few bytes).
_NEGLIGIBLE_MB = 0.01
# Points of a step's curve in the JSON and the plot at most (a CNN step has some hundreds).
_CURVE_POINTS = 2000


@dataclass
class MemoryFigures:
    source: str | None                    # where the allocator's events came from (None: RSS only)
    device: str | None                    # the allocator the trace figures follow
    steps: list[StepMemory] = field(default_factory=list)
    sites: list[dict] = field(default_factory=list)
    creep: Creep | None = None            # of the level at each traced step's end, bytes a step
    rss: dict | None = None               # rss_figures of the steady steps
    notes: list[str] = field(default_factory=list)
    # One traced step's allocation curve with its phase bands, times in ms from the step's start.
    curve: dict | None = None
    # Per layer, bytes allocated in forward and still held when forward ended (a step's mean).
    layers: dict[str, float] = field(default_factory=dict)
    # The traced steps' level stepped once and stayed (creep.trend), bytes: no creep then.
    level_change: LevelChange | None = None

    def phase_high_water_mb(self) -> dict[str, float | None]:
        """Each phase's high-water mark, the highest over the traced steps."""
        return {p: max(s.high_water[p] for s in self.steps) / MB if self.steps and
                all(p in s.high_water for s in self.steps) else None for p in PHASES}

    def phase_net_mb(self) -> dict[str, float]:
        """Each phase's mean net change a step: forward's is the activations kept for backward."""
        return {p: statistics.fmean(s.net[p] for s in self.steps) / MB for p in PHASES} if self.steps else {}

    def peak_allocated_mb(self) -> float | None:
        return max(s.peak_allocated for s in self.steps) / MB if self.steps else None

    def peak_reserved_mb(self) -> float | None:
        reserved = [s.peak_reserved for s in self.steps if s.peak_reserved is not None]
        return max(reserved) / MB if reserved else None

    def end_of_forward_mb(self) -> float | None:
        """The level when forward ends, on average: what a step holds for backward."""
        ends = [s.after_forward for s in self.steps if s.after_forward is not None]
        return statistics.fmean(ends) / MB if ends else None

    def creep_line(self) -> str | None:
        """"+N MB a step" where a figure grows beyond its interval, else None."""
        lines = []
        if self.creep is not None and self.creep.significant and abs(self.creep.per_step / MB) >= _NEGLIGIBLE_MB:
            lines.append(f"{self.creep.per_step / MB:+.2f} MB a step allocated and kept (95 % "
                         f"interval {_ci_mb(self.creep.ci95)}, {self.creep.steps} traced steps)")
        rss = self.rss and self.rss["creep"]
        if rss is not None and rss.significant and abs(rss.per_step) >= NEGLIGIBLE_RSS_MB:
            lines.append(f"resident memory {rss.per_step:+.2f} MB a step (95 % interval "
                         f"{rss.ci95[0]:+.2f} to {rss.ci95[1]:+.2f}, {rss.steps} steps)")
        return "memory creeps: " + "; ".join(lines) if lines else None

    def level_lines(self) -> list[str]:
        """A one-off level change where a line would have read as creep, and where RSS is too
        short outside the traced window to tell a trend."""
        found = []
        if self.level_change is not None:
            c = self.level_change
            found.append(f"memory level changed once: {(c.after - c.before) / MB:+.2f} MB kept from "
                         f"step {c.step:.0f} on, flat before and after (a one-off, not creep)")
        rss = self.rss or {}
        change = rss.get("level_change")
        if change is not None:
            found.append(f"resident memory changed level once: {change.before:.1f} to {change.after:.1f} MB "
                         f"at step {change.step:.0f}, flat before and after (a one-off, not creep)")
        if rss.get("trend_unknown"):
            found.append(f"resident memory trend: {rss['trend_unknown']}")
        return found

    def lines(self) -> list[str]:
        """The figures as notes: peak, per-phase net change, creep, churn, top sites, RSS."""
        found = []
        if self.steps:
            net = self.phase_net_mb()
            reserved = self.peak_reserved_mb()
            changed = ", ".join(f"{p} {net[p]:+.2f}" for p in PHASES if abs(net[p]) >= 0.005)
            found.append(f"memory ({self.device}, {self.source}): step peak {self.peak_allocated_mb():.2f} MB"
                         + (f", reserved {reserved:.2f} MB" if reserved is not None else "")
                         # every phase under 0.005 MB printed "net a step:  MB"
                         + (f"; net a step: {changed} MB" if changed else "; no phase changes the level a step")
                         + f"; {self.churn_mb():.2f} MB freed and allocated again a step")
            if self.layers:
                found.append("kept from forward for backward, per layer: " + ", ".join(
                    f"{name} {b / MB:.2f} MB" for name, b in self.layers.items()))
            if self.sites:
                found.append("top allocation sites: " + ", ".join(
                    f"{s['op']} ({s['phase']}) {s['bytes_per_step'] / MB:.2f} MB" for s in self.sites[:3]))
        creeping = self.creep_line()
        if creeping:
            found.append(creeping)
        return found + self.level_lines() + self.notes

    def churn_mb(self) -> float:
        return statistics.fmean(s.churn for s in self.steps) / MB if self.steps else 0.0

    def to_json_dict(self) -> dict:
        steps = self.steps
        return {
            "source": self.source, "device": self.device, "unit": "MB (10^6 bytes)",
            "traced_steps": len(steps),
            "peak_allocated_mb": _round(self.peak_allocated_mb()),
            "peak_reserved_mb": _round(self.peak_reserved_mb()),
            "end_of_forward_mb": _round(self.end_of_forward_mb()),
            "phases": {p: {"high_water_mb": _round(self.phase_high_water_mb()[p]),
                           "net_mb": _round(self.phase_net_mb()[p])} for p in PHASES} if steps else None,
            "churn_mb_per_step": _round(self.churn_mb()) if steps else None,
            "creep": _creep_json(self.creep, MB, self.level_change),
            "top_sites": [{**s, "mb_per_step": _round(s["bytes_per_step"] / MB),
                           "bytes_per_step": round(s["bytes_per_step"]),
                           "allocations_per_step": round(s["allocations_per_step"], 2)} for s in self.sites],
            "per_step": [{"step": s.step, "peak_allocated_mb": _round(s.peak_allocated / MB),
                          "peak_reserved_mb": _round(None if s.peak_reserved is None else s.peak_reserved / MB),
                          "start_mb": _round(s.start / MB), "end_mb": _round(s.end / MB),
                          "allocated_mb": _round(s.allocated / MB), "freed_mb": _round(s.freed / MB),
                          "high_water_mb": {p: _round(v / MB) for p, v in s.high_water.items()},
                          "net_mb": {p: _round(v / MB) for p, v in s.net.items()}} for s in steps],
            "rss": None if self.rss is None else {
                **{k: _round(self.rss[k]) for k in ("mean_mb", "peak_mb", "first_mb", "last_mb")},
                "steps": self.rss["steps"], "after_import_mb": _round(self.rss.get("after_import_mb")),
                "creep": _creep_json(self.rss["creep"], 1.0, self.rss.get("level_change")),
                # Unprofiled steps outside the traced window the trend is fitted on, or why none.
                "trend_steps": self.rss.get("trend_steps"), "trend_unknown": self.rss.get("trend_unknown")},
            "creep_line": self.creep_line(),
            "layers_kept_mb": {name: _round(b / MB) for name, b in self.layers.items()},
            "step_curve": self.curve,
            "notes": self.notes,
        }


def run_memory(run: Run, trace: bool = True) -> MemoryFigures | None:
    """The run's memory figures; None where it has neither allocator events nor RSS per step.
    `trace` False: the RSS only (a timers breakdown reads no trace)."""
    rss = rss_figures(run.rows, run.warmup_steps)
    after_import = run.manifest.get("rss_after_import_mb")
    if rss is not None and isinstance(after_import, (int, float)) and not isinstance(after_import, bool):
        rss["after_import_mb"] = float(after_import)  # the framework's footprint (the runner's)
    events, source, notes = allocator_events(run) if trace else ([], None, [])
    if not events:
        if rss is None:
            return None
        return MemoryFigures(None, None, rss=rss, notes=notes)
    device = main_device(events)
    mine = [e for e in events if e.device == device]
    levels = Levels(mine)
    timeline = run.timeline
    steps = step_memory(levels, timeline) if timeline is not None else []
    names = [e.op for e in levels.events]
    if any(n is None for n in names) and run.trace is not None:
        around = enclosing_ops(levels.events, run.trace)
        names = [n if n is not None else a for n, a in zip(names, around)]
    sites = top_sites(levels.events, names, timeline) if timeline is not None else []
    ends, change = trend([float(s.step) for s in steps], [float(s.end) for s in steps],
                         negligible=_NEGLIGIBLE_MB * MB)
    if run.trace.source_format == "torch" and device == "cpu":
        notes.append("memory levels count the bytes allocated since the profiler started (torch's "
                     "CPU allocator reports no earlier blocks): net changes are exact, levels relative")
    if run.trace.source_format == "xplane" and device == "cpu" and _tf_cpu_allocator(run) != "bfc":
        notes.append("memory: TF's CPU allocator reports only its large blocks (oneDNN keeps small "
                     "ones apart, unrecorded): small tensors are missing from these figures")
    elif run.trace.source_format == "xplane" and device == "cpu":
        notes.append("memory: TF's CPU allocator was BFC (TF_CPU_ALLOCATOR_USE_BFC), which records "
                     "every block; TF's default CPU allocator differs")
    if run.trace.source_format == "xplane":
        notes.append("memory: TF's figures count the bytes ops asked for from the profile's start "
                     "(its allocator's blocks may be larger): net changes exact, levels relative")
    curve = step_curve(levels, timeline, len(timeline.steps) - 1) if steps else None
    layers = _layers_kept(run, levels, timeline) if steps else {}
    return MemoryFigures(source, device, steps, sites, ends, rss, notes, curve, layers, change)


def _layers_kept(run: Run, levels: Levels, timeline) -> dict[str, float]:
    """Bytes each layer keeps from forward for backward, in the spec's layer order where the
    manifest lists them; empty where the trace names no layer."""
    specs = run.manifest.get("layers") if isinstance(run.manifest.get("layers"), list) else None
    names = [s["name"] for s in specs if isinstance(s, dict) and "name" in s] if specs else None
    kept = kept_by_layer(levels, layer_of_events(levels.events, run.trace, names, run.rules.layer_depth), timeline)
    order = [n for n in names if n in kept] if names else sorted(kept, key=kept.get, reverse=True)
    return {name: kept[name] for name in order}


def step_curve(levels: Levels, timeline, index: int) -> dict:
    """The level through one step (the last traced one, the steadiest) as a staircase: the level
    at the step's start, after each event, and at its end; the phases as bands."""
    window = timeline.steps[index]
    origin = window.start_us
    inside = levels.between(window.start_us, window.end_us)
    times = [0.0] + [(levels.times[i] - origin) / 1000 for i in inside] + [window.dur_us / 1000]
    values = [levels.at(window.start_us)] + [levels.allocated[i] for i in inside] + [levels.at(window.end_us)]
    if len(times) > _CURVE_POINTS:  # a big model's step: every k-th point, and the peak kept
        stride = -(-len(times) // _CURVE_POINTS)
        keep = sorted(set(range(0, len(times), stride)) | {len(times) - 1, values.index(max(values))})
        times, values = [times[i] for i in keep], [values[i] for i in keep]
    return {"step": timeline.step_number(index), "t_ms": [round(t, 4) for t in times],
            "allocated_mb": [round(v / MB, 4) for v in values],
            "phases": [[round((a - origin) / 1000, 4), round((b - origin) / 1000, 4), phase]
                       for a, b, phase in timeline.covering(index)]}


def allocator_events(run: Run) -> tuple[list[MemoryEvent], str | None, list[str]]:
    """The trace's allocator events, what recorded them, and a line where it has none."""
    try:
        trace = run.trace
    except (GapscopeInputError, TraceFormatError):
        return [], None, []
    if trace is None:
        return [], None, []
    if trace.source_format == "xplane":
        events = trace.metadata.get("memory_events") or []
        if events:
            return events, "TF allocator events", []
        if trace.metadata.get("framework") == "jax":
            return [], None, [
                "memory: the XSpace holds no allocator events (JAX's CPU client reports none, nor "
                "memory_stats()): only the process's RSS is known"]
        if _tf_cpu_allocator(run) == "default":
            return [], None, [
                "memory: no allocator events: this TensorFlow ran without oneDNN, and its default "
                "CPU allocator records none (set TF_CPU_ALLOCATOR_USE_BFC=true before TensorFlow "
                "starts to record them, with another allocator than the default)"]
        return [], None, ["memory: the XSpace holds no allocator events (TF records them for its BFC "
                          "allocators only: on the CPU, blocks of the oneDNN allocator)"]
    events = trace.metadata.get("memory_events") or []  # decoded with the trace's events
    return events, "torch profiler (profile_memory)", [] if events else [
        "memory: the trace holds no [memory] events (recorded without profile_memory): "
        "only the process's RSS is known"]


def _tf_cpu_allocator(run: Run) -> str | None:
    """environment.tf_cpu_allocator as the run recorded it (None for runs from before)."""
    versions = run.manifest.get("versions")
    return versions.get("tf_cpu_allocator") if isinstance(versions, dict) else None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, _DIGITS)


def _ci_mb(interval) -> str:
    return f"{interval[0] / MB:+.2f} to {interval[1] / MB:+.2f} MB"


def _creep_json(found: Creep | None, unit: float, change: LevelChange | None = None) -> dict | None:
    if found is None:
        return None
    return {"mb_per_step": _round(found.per_step / unit),
            "ci95": None if found.ci95 is None else [_round(found.ci95[0] / unit), _round(found.ci95[1] / unit)],
            "steps": found.steps, "grows": found.significant and found.ci95[0] > 0,
            # A one-off level change where the figure stepped once and stayed: no creep.
            "level_change": None if change is None else {
                "step": change.step, "before_mb": _round(change.before / unit),
                "after_mb": _round(change.after / unit)}}
