"""Attributes the step-time gap between runs to phases, and explains the biggest deltas with
evidence from the per-run analyzers (kernels, fusion, transfers, dispatch, compile)."""
from __future__ import annotations

from dataclasses import dataclass, field

from analysis.explain import RunExplanation
from analysis.hlo_metadata import MIXED, UNATTRIBUTED
from profilers.errors import GapscopeInputError
from profilers.phases import MARKED_PHASES

_DIGITS = 6
# Phases whose delta is explained line by line: the biggest, down to this share of the gap.
_EVIDENCE_SHARE = 0.10
_EVIDENCE_PHASES = 3


@dataclass
class PhaseGap:
    phase: str
    a_ms: float
    b_ms: float
    delta_ms: float
    ratio: float | None          # b / a
    share_of_gap: float | None   # delta / gap; the five add up to 1


@dataclass
class Evidence:
    """One finding behind a delta: what was measured in each run, and a line saying it."""

    kind: str                    # kernels | transfers | dispatch | compile | fusion | mixed_fusion | unattributed
    phase: str | None
    a: dict
    b: dict
    text: str
    delta_ms: float | None = None
    share_of_gap: float | None = None


@dataclass
class PairComparison:
    a: str                       # run ids (baseline first)
    b: str
    a_label: str
    b_label: str
    a_step_ms: float
    b_step_ms: float
    gap_ms: float                # b - a; equals the sum of the phase deltas
    phases: list[PhaseGap]
    evidence: list[Evidence]
    devices_differ: bool

    def to_json_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "a_label": self.a_label, "b_label": self.b_label,
                "a_step_ms": self.a_step_ms, "b_step_ms": self.b_step_ms, "gap_ms": self.gap_ms,
                "ratio": _ratio(self.b_step_ms, self.a_step_ms),
                "phases": {g.phase: {"a_ms": g.a_ms, "b_ms": g.b_ms, "delta_ms": g.delta_ms,
                                     "ratio": g.ratio, "share_of_gap": g.share_of_gap}
                           for g in self.phases},
                "evidence": [e.__dict__ for e in self.evidence],
                "devices_differ": self.devices_differ}


@dataclass
class Comparison:
    runs: list[RunExplanation]
    pairs: list[PairComparison]  # the first run against each other one
    warnings: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict:
        return {"baseline": self.pairs[0].a if self.pairs else None,
                "runs": [r.to_json_dict() for r in self.runs],
                "comparisons": [p.to_json_dict() for p in self.pairs],
                "warnings": self.warnings}


def run_label(run: RunExplanation) -> str:
    b = run.breakdown
    parts = [b.framework or "?", b.variant if b.variant not in (None, "default") else None]
    return " ".join(p for p in parts if p)


def compare(runs: list[RunExplanation]) -> Comparison:
    if len(runs) < 2:
        raise GapscopeInputError("compare needs at least two runs")
    base = runs[0]
    warnings = []
    for other in runs[1:]:
        wa, wb = base.breakdown.workload, other.breakdown.workload
        if wa and wb and wa != wb:
            raise GapscopeInputError(
                f"cannot compare different workloads: {base.breakdown.run_id} runs {wa!r}, "
                f"{other.breakdown.run_id} runs {wb!r}")
        if not (wa and wb):
            warnings.append(f"workload of {other.breakdown.run_id if wa else base.breakdown.run_id} "
                            "unknown (not a gapscope run directory): make sure both ran the same model")
        if _devices_differ(base, other):
            warnings.append(f"different devices: {base.breakdown.device} ({base.breakdown.run_id}) vs "
                            f"{other.breakdown.device} ({other.breakdown.run_id}): the gap includes the hardware")
    return Comparison(runs, [compare_pair(base, other) for other in runs[1:]], warnings)


def compare_pair(a: RunExplanation, b: RunExplanation) -> PairComparison:
    da, db = a.breakdown.to_json_dict(), b.breakdown.to_json_dict()
    a_step, b_step = da["step_ms"]["mean"], db["step_ms"]["mean"]
    gap = round(b_step - a_step, _DIGITS)
    phases = []
    for phase in MARKED_PHASES:
        am, bm = da["phases"][phase]["ms"], db["phases"][phase]["ms"]
        phases.append(PhaseGap(phase, am, bm, round(bm - am, _DIGITS), _ratio(bm, am), None))
    # `other` takes what the four leave of the gap, so the five deltas add up to it exactly.
    am, bm = da["phases"]["other"]["ms"], db["phases"]["other"]["ms"]
    phases.append(PhaseGap("other", am, bm, round(gap - sum(g.delta_ms for g in phases), _DIGITS),
                           _ratio(bm, am), None))
    for g in phases:
        g.share_of_gap = round(g.delta_ms / gap, 4) if gap else None
    return PairComparison(da["run_id"], db["run_id"], run_label(a), run_label(b), a_step, b_step,
                          gap, phases, _evidence(a, b, phases, gap), _devices_differ(a, b))


def _evidence(a: RunExplanation, b: RunExplanation, phases: list[PhaseGap], gap: float) -> list[Evidence]:
    found = []
    ranked = sorted(phases, key=lambda g: -abs(g.delta_ms))
    chosen = [g for g in ranked[:_EVIDENCE_PHASES]
              if g.share_of_gap is None or abs(g.share_of_gap) >= _EVIDENCE_SHARE] or ranked[:1]
    for g in chosen:
        if g.phase == "other":
            found.append(_dispatch(a, b, g))
        else:
            found.append(_phase_kernels(a, b, g))
        if g.phase == "data_load":
            found.append(_transfers(a, b, g))
    found.append(_fusion(a, b))
    found.append(_compile(a, b))
    found += [e for e in (_mixed(run, side) for run, side in ((a, "a"), (b, "b"))) if e]
    found += [e for e in (_unattributed(run, side) for run, side in ((a, "a"), (b, "b"))) if e]
    if not any(e.kind == "transfers" for e in found):
        found.append(_transfers(a, b, None))
    return found


def _phase_kernels(a: RunExplanation, b: RunExplanation, g: PhaseGap) -> Evidence:
    def facts(run):
        k = run.kernels
        count = k.per_phase.get(g.phase, 0.0)
        time_ms = k.time_ms_per_phase.get(g.phase, 0.0)
        return {"kernels_per_step": round(count, 3), "kernel_source": k.source,
                "mean_kernel_us": round(1000.0 * time_ms / count, 3) if count else None,
                "device_ms": round(run.attribution.device_ms.get(g.phase, 0.0), _DIGITS),
                "host_ms": round(run.attribution.host_ms.get(g.phase, 0.0), _DIGITS)}
    fa, fb = facts(a), facts(b)
    unit = "device kernels" if a.kernels.source == b.kernels.source == "device kernels" else "ops/kernels"
    text = (f"{g.phase} {_signed(g.delta_ms)} ms{_share(g)}: {_n(fa['kernels_per_step'])} vs "
            f"{_n(fb['kernels_per_step'])} {unit} per step, mean {_us(fa['mean_kernel_us'])} vs "
            f"{_us(fb['mean_kernel_us'])}; time in them {fa['device_ms']:.3f} vs {fb['device_ms']:.3f} ms")
    return Evidence("kernels", g.phase, fa, fb, text, g.delta_ms, g.share_of_gap)


def _dispatch(a: RunExplanation, b: RunExplanation, g: PhaseGap) -> Evidence:
    def facts(run):
        at = run.attribution
        return {"dispatch_ms": round(at.dispatch_ms, _DIGITS), "device_busy_ms": round(at.device_busy_ms, _DIGITS),
                "launches_per_step": at.launches_per_step,
                "launch_ms": None if at.launch_ms is None else round(at.launch_ms, _DIGITS),
                "device_kind": at.device_kind}
    fa, fb = facts(a), facts(b)
    text = (f"other {_signed(g.delta_ms)} ms{_share(g)}: host time not overlapped by kernel work "
            f"{fa['dispatch_ms']:.3f} vs {fb['dispatch_ms']:.3f} ms per step")
    if fa["launches_per_step"] is not None and fb["launches_per_step"] is not None:
        text += (f"; {_n(fa['launches_per_step'])} vs {_n(fb['launches_per_step'])} launches "
                 f"({fa['launch_ms']:.3f} vs {fb['launch_ms']:.3f} ms in runtime calls)")
    return Evidence("dispatch", "other", fa, fb, text, g.delta_ms, g.share_of_gap)


def _transfers(a: RunExplanation, b: RunExplanation, g: PhaseGap | None) -> Evidence:
    fa, fb = a.transfers.to_json_dict(), b.transfers.to_json_dict()

    def say(t):
        if t["note"]:
            return t["note"]
        parts = []
        for way, d in t["by_direction"].items():
            memory = "/".join(k for k in d["host_memory"] if k != "n/a")
            parts.append(f"{_n(d['count_per_step'])} {way} of {_bytes(d['bytes_per_step'])} per step"
                         + (f" from {memory} memory" if memory and way == "H2D" else "")
                         + (f" at {d['gb_per_s']:.1f} GB/s" if d["gb_per_s"] else ""))
        return "; ".join(parts)
    head = f"transfers (data_load {_signed(g.delta_ms)} ms): " if g else "transfers: "
    sa, sb = say(fa), say(fb)
    text = head + (sa if sa == sb else f"{sa} vs {sb}")
    return Evidence("transfers", g.phase if g else None, fa, fb, text,
                    g.delta_ms if g else None, g.share_of_gap if g else None)


def _fusion(a: RunExplanation, b: RunExplanation) -> Evidence:
    def facts(run):
        k = run.kernels
        return {"kernels_per_step": round(k.per_step, 3), "fused_share": k.fused_share,
                "fused_time_share": k.fused_time_share, "mean_kernel_us": k.mean_us,
                "kernel_ms_per_step": round(k.time_ms_per_step, _DIGITS), "source": k.source}
    fa, fb = facts(a), facts(b)
    text = (f"fusion: {_n(fa['kernels_per_step'])} vs {_n(fb['kernels_per_step'])} kernels per step "
            f"({fa['source']} vs {fb['source']}), fused {_pct(fa['fused_share'])} vs {_pct(fb['fused_share'])} "
            f"of them ({_pct(fa['fused_time_share'])} vs {_pct(fb['fused_time_share'])} of kernel time), "
            f"mean kernel {_us(fa['mean_kernel_us'])} vs {_us(fb['mean_kernel_us'])}")
    return Evidence("fusion", None, fa, fb, text)


def _compile(a: RunExplanation, b: RunExplanation) -> Evidence:
    fa, fb = a.compile.to_json_dict(), b.compile.to_json_dict()

    def say(run, c):
        once = f"{_ms(c['warmup_excess_ms'])} once" if c["warmup_excess_ms"] is not None else "n/a"
        details = []
        if c["first_step_ms"] is not None and c["steady_median_ms"]:
            details.append(f"first step {_ms(c['first_step_ms'])}, steady median {c['steady_median_ms']:.2f} ms")
        if c["compiled_calls_per_step"]:
            details.append(f"Dynamo guards {1000 * c['guard_ms_per_step']:.0f} µs/step")
        if c["tf_tracing_count"] is not None:
            details.append(f"tf.function traced {c['tf_tracing_count']}x")
        if c["xla_modules"]:
            details.append(f"{len(c['xla_modules'])} XLA program(s)")
        if c["compile_in_window_ms"]:
            details.append(f"recompiled {_ms(c['compile_in_window_ms'])} inside traced steps")
        return f"{run_label(run)} {once}" + (f" ({'; '.join(details)})" if details else "")
    text = f"compile: {say(a, fa)} vs {say(b, fb)}; excluded from steps"
    return Evidence("compile", None, fa, fb, text)


def _mixed(run: RunExplanation, side: str) -> Evidence | None:
    mixed = run.kernels.mixed_ops
    if not mixed:
        return None
    names = ", ".join(f"{m['name']} ({'+'.join(m['phases'])})" for m in mixed[:4])
    ms = run.attribution.device_ms.get(MIXED, 0.0)
    facts = {"mixed_ops": mixed, "ms_per_step": round(ms, _DIGITS)}
    text = (f"{run_label(run)}: {len(mixed)} fused op(s) mix phases, {ms:.3f} ms per step counted "
            f"in no phase: {names}")
    return Evidence("mixed_fusion", None, facts if side == "a" else {}, facts if side == "b" else {}, text)


def _unattributed(run: RunExplanation, side: str) -> Evidence | None:
    ms = run.attribution.device_ms.get(UNATTRIBUTED, 0.0)
    count = run.kernels.per_phase.get(UNATTRIBUTED, 0.0)
    if not count:
        return None
    facts = {"kernels_per_step": round(count, 3), "ms_per_step": round(ms, _DIGITS)}
    text = (f"{run_label(run)}: {_n(count)} kernels per step ({ms:.3f} ms) come from no phase "
            "scope (e.g. metric updates, copies XLA added): unattributed")
    return Evidence("unattributed", None, facts if side == "a" else {}, facts if side == "b" else {}, text)


def _devices_differ(a: RunExplanation, b: RunExplanation) -> bool:
    da, db = a.breakdown.device, b.breakdown.device
    return bool(da and db and da != db)


def _ratio(b: float, a: float) -> float | None:
    return round(b / a, 4) if a else None


def _signed(ms: float) -> str:
    return f"{ms:+.3f}"


def _share(g: PhaseGap) -> str:
    return "" if g.share_of_gap is None else f", {100 * g.share_of_gap:.0f} % of the gap"


def _n(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} µs"


def _ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value / 1000:.1f} s" if value >= 1000 else f"{value:.1f} ms"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f} %"


def _bytes(value: float) -> str:
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"

