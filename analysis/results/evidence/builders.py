"""The evidence behind a compared pair's deltas: per-run findings (kernels, dispatch, copies,
fusion, compile, page faults) set side by side, each with its share of the gap."""
from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass

from gapscope.analysis.events.hlo_metadata import MIXED, UNATTRIBUTED
from gapscope.analysis.measures import page_faults
from gapscope.analysis.measures.fusion import fused_apart, summary as fusion_summary
from gapscope.analysis.measures.runtime_calls import LAUNCH, SYNC
from gapscope.analysis.results.amortisation import amortisation
from gapscope.analysis.results.explain import RunExplanation
from gapscope.analysis.results.records import Breakdown

_DIGITS = 6
# Phases whose delta is explained line by line: the biggest, down to this share of the gap.
EVIDENCE_SHARE = 0.10
_EVIDENCE_PHASES = 3


class EvidenceKind(enum.StrEnum):
    KERNELS = "kernels"            # ops/kernels of the phase with the delta
    TRANSFERS = "transfers"        # host<->device copies
    DISPATCH = "dispatch"          # host time not overlapped by kernel work (other)
    COMPILE = "compile"            # one-time warm-up cost
    FUSION = "fusion"              # kernels per step and their fused share
    FUSED_OPS = "fused_ops"        # a phase's fused ops in the faster run, run apart in the slower
    MIXED_FUSION = "mixed_fusion"  # fused ops spanning phases, counted in none
    UNATTRIBUTED = "unattributed"  # kernels from no phase scope
    PAGE_FAULTS = "page_faults"    # fresh pages the steps took from the kernel (steps.csv)


@dataclass
class Evidence:
    """One finding behind a delta: what was measured in each run (the renderers say it)."""

    kind: EvidenceKind
    phase: str | None
    a: dict
    b: dict
    delta_ms: float | None = None
    share_of_gap: float | None = None


def build_evidence(a: RunExplanation, b: RunExplanation, pair: "PairComparison") -> list[Evidence]:
    """The findings behind a pair's deltas: the biggest phases' kernels (or dispatch, copies),
    fusion, compile (its amortisation point with the gap's interval), mixed and unattributed work."""
    phases, gap = pair.phases, pair.gap_ms
    found = []
    ranked = sorted(phases, key=lambda g: -abs(g.delta_ms))
    chosen = [g for g in ranked[:_EVIDENCE_PHASES]
              if g.share_of_gap is None or abs(g.share_of_gap) >= EVIDENCE_SHARE] or ranked[:1]
    for g in chosen:
        if g.phase == "other":
            found.append(_dispatch(a, b, g))
        else:
            found.append(_phase_kernels(a, b, g))
            found += [e for e in [_fused_ops(a, b, g, gap)] if e]
        if g.phase == "data_load":
            found.append(_transfers(a, b, g))
    found.append(_fusion(a, b))
    found.append(_compile(a, b, pair))
    found += [e for e in (_mixed(run, side) for run, side in ((a, "a"), (b, "b"))) if e]
    found += [e for e in (_unattributed(run, side) for run, side in ((a, "a"), (b, "b"))) if e]
    if not any(e.kind == EvidenceKind.TRANSFERS for e in found):
        found.append(_transfers(a, b, None))
    return found


def explains(e: Evidence, share: float) -> bool:
    """Whether a finding's time moves with the gap and carries at least `share` of it."""
    return e.share_of_gap is not None and e.share_of_gap >= share


def page_fault_evidence(side_a: list[Breakdown], side_b: list[Breakdown]) -> Evidence | None:
    """Each side's page faults per step (mean over its repeats, with their range): said where
    either side takes enough to cost time. A process's allocator state decides how many it
    takes, so repeats that differ in them differ in speed for that reason."""
    def facts(side):
        counts = [b.minor_faults_per_step for b in side]
        if any(c is None for c in counts):
            return None
        return {"minor_faults_per_step": round(statistics.fmean(counts), 1),
                "min": round(min(counts), 1), "max": round(max(counts), 1), "repeats": len(counts),
                "estimated_ms": round(page_faults.estimated_cost_ms(statistics.fmean(counts)), 3)}
    fa, fb = facts(side_a), facts(side_b)
    if (fa is None or fb is None
            or max(fa["minor_faults_per_step"], fb["minor_faults_per_step"]) < page_faults.MANY_PER_STEP):
        return None
    return Evidence(EvidenceKind.PAGE_FAULTS, None, fa, fb,
                    round(fb["estimated_ms"] - fa["estimated_ms"], _DIGITS))


def _phase_kernels(a: RunExplanation, b: RunExplanation, g: "PhaseGap") -> Evidence:
    def facts(run):
        k = run.kernels
        count = k.per_phase.get(g.phase, 0.0)
        time_ms = k.time_ms_per_phase.get(g.phase, 0.0)
        calls = run.attribution.calls_by_phase.get(g.phase, {})
        return {"kernels_per_step": round(count, 3), "kernel_source": k.source,
                "mean_kernel_us": round(1000.0 * time_ms / count, 3) if count else None,
                # Their time: count x mean, the figure the cause's `ms_per_step` is (cause.py).
                "kernel_ms": round(time_ms, _DIGITS),
                "device_ms": round(run.attribution.device_ms.get(g.phase, 0.0), _DIGITS),
                "host_ms": round(run.attribution.host_ms.get(g.phase, 0.0), _DIGITS),
                # What else the phase's host code put on the device, or waited for (GPU).
                "transfers": run.transfers.by_phase.get(g.phase, {}),
                "launches": calls.get(LAUNCH), "syncs": calls.get(SYNC)}
    return Evidence(EvidenceKind.KERNELS, g.phase, facts(a), facts(b), g.delta_ms, g.share_of_gap)


def _dispatch(a: RunExplanation, b: RunExplanation, g: "PhaseGap") -> Evidence:
    def facts(run):
        at = run.attribution
        return {"dispatch_ms": round(at.dispatch_ms, _DIGITS), "device_busy_ms": round(at.device_busy_ms, _DIGITS),
                "launches_per_step": at.launches_per_step,
                "launch_ms": None if at.launch_ms is None else round(at.launch_ms, _DIGITS),
                # Device work the step queued that ran after its host side: not the host's.
                "device_after_ms": round(at.late_ms, _DIGITS),
                "device_kind": at.device_kind}
    return Evidence(EvidenceKind.DISPATCH, "other", facts(a), facts(b), g.delta_ms, g.share_of_gap)


def _transfers(a: RunExplanation, b: RunExplanation, g: "PhaseGap | None") -> Evidence:
    return Evidence(EvidenceKind.TRANSFERS, g.phase if g else None, a.transfers.to_json_dict(),
                    b.transfers.to_json_dict(), g.delta_ms if g else None,
                    g.share_of_gap if g else None)


def _fusion(a: RunExplanation, b: RunExplanation) -> Evidence:
    def facts(run):
        k = run.kernels
        return {"kernels_per_step": round(k.per_step, 3), "fused_share": k.fused_share,
                "fused_time_share": k.fused_time_share, "mean_kernel_us": k.mean_us,
                "kernel_ms_per_step": round(k.time_ms_per_step, _DIGITS),
                "busy_ms_per_step": round(run.attribution.device_busy_ms, _DIGITS), "source": k.source,
                "by_phase": fusion_summary(k.fusion_by_phase)}
    return Evidence(EvidenceKind.FUSION, None, facts(a), facts(b))


def _fused_ops(a: RunExplanation, b: RunExplanation, g: "PhaseGap", gap: float) -> Evidence | None:
    """The faster run's fused ops in the phase against the slower's ops of the same parts run
    apart; delta_ms: the time of the slower's apart bias and activation ops (+ when b is slower)."""
    slower_b = g.delta_ms > 0
    fast, slow = (a, b) if slower_b else (b, a)
    found = fused_apart(fast.kernels.fusion_by_phase, slow.kernels.fusion_by_phase, g.phase)
    if found is None:
        return None
    fast_facts, slow_facts, extra = found
    delta = extra if slower_b else -extra
    facts_a, facts_b = (fast_facts, slow_facts) if slower_b else (slow_facts, fast_facts)
    return Evidence(EvidenceKind.FUSED_OPS, g.phase, facts_a, facts_b, round(delta, _DIGITS),
                    round(delta / gap, 4) if gap else None)


def _compile(a: RunExplanation, b: RunExplanation, pair: "PairComparison") -> Evidence:
    # Each side's compile record (compile_why) and the pair's amortisation point, on both sides,
    # its interval from the gap's; none where a side's step time is no fact.
    pays = amortisation(a.breakdown, b.breakdown, (a.compile.guard_ms_per_step, b.compile.guard_ms_per_step),
                        pair.gap_ci95, untrusted=pair.untrusted)
    return Evidence(EvidenceKind.COMPILE, None, *(
        {**run.compile.to_json_dict(), "amortisation": pays,
         **({"why": run.breakdown.compile_why.to_json_dict()} if run.breakdown.compile_why else {})}
        for run in (a, b)))


def _mixed(run: RunExplanation, side: str) -> Evidence | None:
    mixed = run.kernels.mixed_ops
    if not mixed:
        return None
    facts = {"mixed_ops": mixed, "ms_per_step": round(run.attribution.device_ms.get(MIXED, 0.0), _DIGITS)}
    return Evidence(EvidenceKind.MIXED_FUSION, None, facts if side == "a" else {},
                    facts if side == "b" else {})


def _unattributed(run: RunExplanation, side: str) -> Evidence | None:
    count = run.kernels.per_phase.get(UNATTRIBUTED, 0.0)
    if not count:
        return None
    facts = {"kernels_per_step": round(count, 3),
             "ms_per_step": round(run.attribution.device_ms.get(UNATTRIBUTED, 0.0), _DIGITS),
             "framework": run.breakdown.framework}
    return Evidence(EvidenceKind.UNATTRIBUTED, None, facts if side == "a" else {},
                    facts if side == "b" else {})
