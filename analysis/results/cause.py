"""The biggest cause inside one phase's delta between two runs: its copies by direction, its kernels, its kernel launches or its blocking syncs, whichever changed the most time."""
from __future__ import annotations

import enum
from dataclasses import dataclass

from gapscope.analysis.measures.kernels import WorkSource
from gapscope.analysis.measures.runtime_calls import LAUNCH, SYNC
from gapscope.analysis.results.explain import RunExplanation

# A cause must carry at least this share of its phase's delta to be named: a candidate that
# moved 1 % of it is not why the phase moved, and naming it would mislead.
MIN_SHARE = 0.10


class CauseKind(enum.StrEnum):
    TRANSFERS = "transfers"  # copies (or sets) of one direction: device time + their calls' host time
    KERNELS = "kernels"      # kernels (CPU: the ops standing for them): their time
    LAUNCHES = "launches"    # kernel launch calls: host time in them
    SYNCS = "syncs"          # blocking synchronize calls: host time waiting in them


@dataclass
class Cause:
    phase: str
    phase_delta_ms: float
    kind: CauseKind
    way: str | None          # transfers: H2D, D2H, D2D, P2P, memset or other
    a: dict                  # count_per_step, ms_per_step (+ bytes_per_step for transfers)
    b: dict
    device_kernels: bool     # both runs' kernels are device kernels (not CPU ops standing for them)

    @property
    def delta_ms(self) -> float:
        return round(self.b["ms_per_step"] - self.a["ms_per_step"], 6)

    @property
    def delta_count(self) -> float:
        return round(self.b["count_per_step"] - self.a["count_per_step"], 6)

    @property
    def delta_bytes(self) -> float | None:
        if "bytes_per_step" not in self.a:
            return None
        return round(self.b["bytes_per_step"] - self.a["bytes_per_step"], 3)

    def to_json_dict(self) -> dict:
        return {"phase": self.phase, "phase_delta_ms": self.phase_delta_ms, "kind": str(self.kind),
                "way": self.way, "a": self.a, "b": self.b, "delta_count": self.delta_count,
                "delta_bytes": self.delta_bytes, "delta_ms": self.delta_ms,
                "device_kernels": self.device_kernels}


def biggest_cause(a: RunExplanation, b: RunExplanation, phase: str, phase_delta_ms: float) -> Cause | None:
    """The candidate whose time per step changed the most in the direction the phase moved.

    Ranked by time, not count: the phase's delta is time, and a count says nothing of size
    (a thousand 2 µs launches weigh less than one blocking 30 ms copy). Each candidate's time is
    its own and they do not overlap: a copy's host call goes with the copy, not with the
    launches, so copies that grew do not read as launches that grew. Device time and host time
    are added as alike, because either can hold a phase up (a host waiting on a sync turns
    device time into host time). None where no candidate moved MIN_SHARE of the delta."""
    if not phase_delta_ms:
        return None
    ca, cb = candidates(a, phase), candidates(b, phase)
    found = []
    for key in sorted(set(ca) | set(cb)):
        fa, fb = ca.get(key) or _zero(cb[key]), cb.get(key) or _zero(ca[key])
        delta = fb["ms_per_step"] - fa["ms_per_step"]
        if delta * phase_delta_ms > 0 and abs(delta) >= MIN_SHARE * abs(phase_delta_ms):
            found.append((abs(delta), key, fa, fb))
    if not found:
        return None
    _, (kind, way), fa, fb = max(found, key=lambda f: f[0])
    device = a.kernels.source == b.kernels.source == WorkSource.DEVICE_KERNELS
    return Cause(phase, phase_delta_ms, kind, way or None, fa, fb, device)


def candidates(run: RunExplanation, phase: str) -> dict[tuple[CauseKind, str], dict]:
    """{(kind, direction or ""): {count_per_step, ms_per_step[, bytes_per_step]}} of one phase."""
    found = {}
    for way, t in run.transfers.by_phase.get(phase, {}).items():
        found[(CauseKind.TRANSFERS, way)] = {
            "count_per_step": t["count_per_step"], "bytes_per_step": t["bytes_per_step"],
            "ms_per_step": round(t["ms_per_step"] + t["calls_ms_per_step"], 6)}
    k = run.kernels
    if k.per_phase.get(phase):
        found[(CauseKind.KERNELS, "")] = {"count_per_step": round(k.per_phase[phase], 6),
                                          "ms_per_step": round(k.time_ms_per_phase.get(phase, 0.0), 6)}
    calls = run.attribution.calls_by_phase.get(phase, {})
    for kind, call in ((CauseKind.LAUNCHES, LAUNCH), (CauseKind.SYNCS, SYNC)):
        if call in calls:
            found[(kind, "")] = dict(calls[call])
    return found


def _zero(like: dict) -> dict:
    return {key: 0.0 for key in like}
