"""What `gapscope watch` shows of a run at one moment: its status, its latest steps, the steady
mean of its unprofiled steps so far, and whether other processes are taking the cores."""
from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from gapscope.analysis.measures.reliability import BUSY_OTHERS_PCT
from gapscope.profilers.phases import MARKED_PHASES, PHASES

LAST_STEPS = 8      # the latest steps shown one by one
STEADY_WINDOW = 200  # the unprofiled steps the running means take


@dataclass
class WatchState:
    run_id: str
    status: str
    steps: int                      # steps in steps.csv so far
    latest: list[dict]              # the last LAST_STEPS rows
    steady_ms: float | None         # mean step of the latest unprofiled steady steps
    steady_steps: int
    phases_ms: dict[str, float | None] = field(default_factory=dict)  # their phases, other included
    others_cpu_pct: float | None = None  # other processes' share of the cores, since the last look

    @property
    def busy(self) -> bool:
        return self.others_cpu_pct is not None and self.others_cpu_pct > BUSY_OTHERS_PCT

    def to_json_dict(self) -> dict:
        return {"run_id": self.run_id, "status": self.status, "steps": self.steps,
                "latest": self.latest, "steady_ms": self.steady_ms, "steady_steps": self.steady_steps,
                "phases_ms": self.phases_ms, "others_cpu_pct": self.others_cpu_pct, "busy": self.busy}


class StepWindow:
    """The rows watch keeps of a run: how many there were, the latest, and the latest
    unprofiled steady ones; bounded however long the run (a 100k-step job's rows are not held)."""

    def __init__(self):
        self.count, self.last_step = 0, None
        self.latest: deque[dict] = deque(maxlen=LAST_STEPS)
        self.steady: deque[dict] = deque(maxlen=STEADY_WINDOW)

    def add(self, rows: list[dict], restarted: bool = False) -> list[dict]:
        """Takes rows read in order; returns those past the last step seen. `restarted`: the
        file was rewritten whole (the run's end), so `rows` are all of its rows."""
        last = self.last_step
        if restarted:
            self.__init__()
        for row in rows:
            self.count += 1
            self.latest.append(row)
            if not row.get("warmup") and not row.get("traced"):
                self.steady.append(row)
        if rows:
            self.last_step = rows[-1]["step"]
        return [r for r in rows if last is None or r["step"] > last]


def watch_state(manifest: dict, window: StepWindow, others_cpu_pct: float | None) -> WatchState:
    steady = list(window.steady)
    phases: dict[str, float | None] = {}
    if steady:
        for phase in MARKED_PHASES:
            values = [r.get(f"{phase}_ms") for r in steady]
            phases[phase] = None if any(v is None for v in values) else statistics.fmean(values)
        step = statistics.fmean(r["step_ms"] for r in steady)
        known = [v for v in phases.values() if v is not None]
        phases["other"] = step - sum(known) if len(known) == len(MARKED_PHASES) else None
    return WatchState(str(manifest.get("run_id") or ""), str(manifest.get("status") or "running"),
                      window.count, list(window.latest),
                      statistics.fmean(r["step_ms"] for r in steady) if steady else None,
                      len(steady), {p: phases.get(p) for p in PHASES} if steady else {},
                      others_cpu_pct)
