"""Attributes the step-time gap between runs to phases, with its interval, and sets the evidence
behind the biggest deltas beside it (evidence.builders) with the cause the headline names."""
from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass, field

import numpy as np

from gapscope.analysis.measures import page_faults
from gapscope.analysis.measures.reliability import busy_warning, is_load_warning
from gapscope.analysis.results.amortisation import compile_behind
from gapscope.analysis.results.cause import MIN_SHARE, Cause, CauseKind, biggest_cause
from gapscope.analysis.results.evidence.builders import (EVIDENCE_SHARE, Evidence, EvidenceKind, build_evidence,
                                              explains, page_fault_evidence)
from gapscope.analysis.results.layers import LayerCause, layer_cause, layer_pairs
from gapscope.analysis.results.explain import RunExplanation
from gapscope.analysis.events.step_windows import single_window_warnings
from gapscope.analysis.results.records import Breakdown
from gapscope.analysis.model.run import unique_labels
from gapscope.analysis.measures.stats import (Interval, RepeatRatio, contains_one, contains_zero, mean_variance,
                                     percentile_interval, repeat_ratio, welch_difference)
from gapscope.analysis.results.suggestions import Suggestion, config_of, same_config, suggest
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.phases import MARKED_PHASES, PHASES

_DIGITS = 6
# A step-level finding (page faults) named in the headline beside the leading phase: a quarter
# of the gap is as much as a phase's cause usually carries there.
_HEADLINE_SHARE = 0.25


@dataclass
class PhaseGap:
    phase: str
    a_ms: float
    b_ms: float
    delta_ms: float
    ratio: float | None          # b / a
    share_of_gap: float | None   # delta / gap; the five add up to 1
    delta_ci95: Interval | None = None

    @property
    def within_noise(self) -> bool:
        return contains_zero(self.delta_ci95)


class IntervalMethod(enum.StrEnum):
    BOOTSTRAP = "bootstrap over steps"      # one run a side: its steps resampled
    REPEATS = "two-level t over interleaved repeats"  # fresh processes: their spread included


_PANDAS_COLUMNS = {
    "phase": ["run", "phase", "a_ms", "b_ms", "delta_ms", "delta_ci95_low_ms", "delta_ci95_high_ms",
              "within_noise", "share_of_gap"],
    "layer": ["run", "layer", "a_forward_ms", "b_forward_ms", "a_backward_ms", "b_backward_ms",
              "delta_ms"]}


@dataclass(frozen=True)
class VerdictState:
    """A verdict as fields (an agent or a notebook branches on them, never on prose): `verdict`
    is slower, faster, within_noise (of the later run against the first), inconclusive (a busy
    machine: no verdict is a fact, the CLI's exit 3) or no_verdict; `reason` says why not."""

    verdict: str
    inconclusive: bool
    reason: str | None

    def __str__(self) -> str:
        return self.verdict

    def to_json_dict(self) -> dict:
        return {"verdict": self.verdict, "inconclusive": self.inconclusive, "reason": self.reason}


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
    ratio: float | None = None   # b / a step time
    ratio_ci95: Interval | None = None
    gap_ci95: Interval | None = None
    interval_method: "IntervalMethod | None" = None
    repeats: int = 1
    unprofiled: bool = True      # both step times from unprofiled steps
    suggestions: list[Suggestion] = field(default_factory=list)  # for the slower run
    repeat_ratio: RepeatRatio | None = None   # with repeats: pair ratios, spread, repeats needed
    cause: Cause | None = None   # the biggest cause inside the leading phase's delta
    # Why the pair's step times are no fact (a side ran on a busy machine): then no verdict.
    inconclusive: str | None = None
    # A side's step time cannot be trusted (a busy machine, steps in two levels).
    untrusted: bool = False
    layer: LayerCause | None = None  # the layer carrying >= 40 % of the leading phase's delta
    # The compiled side is the slower: its graph breaks and recompiles (amortisation.compile_behind).
    compile_behind: dict | None = None
    # Device work each step queued that ran after the step's host side ended (a graph replay,
    # a serving engine): {a_ms, b_ms, delta_ms} per step, where it is a share of a side's step.
    device_after: dict | None = None

    @property
    def device_leads(self) -> bool:
        """The device's work after the host windows moved more than the host's gap did: the
        verdict names it, not a host phase (the step times are host windows)."""
        return bool(self.device_after) and abs(self.device_after["delta_ms"]) > abs(self.gap_ms)

    @property
    def leading_phase(self) -> PhaseGap | None:
        """The phase that carries most of the gap, beyond noise: the one the headline names."""
        shares = [g for g in self.phases if g.share_of_gap and g.share_of_gap > 0 and not g.within_noise]
        return max(shares, key=lambda g: g.share_of_gap) if shares else None

    @property
    def verdict(self) -> "VerdictState":
        """How the second run stands against the first, as a state to branch on."""
        if self.inconclusive:
            return VerdictState("inconclusive", True, self.inconclusive)
        if self.ratio is None:
            return VerdictState("no_verdict", False, "no step time on a side")
        if self.within_noise:
            return VerdictState("within_noise", False, None)
        return VerdictState("slower" if self.ratio > 1 else "faster", False, None)

    @property
    def pair_ratios(self) -> list[float]:
        return self.repeat_ratio.pair_ratios if self.repeat_ratio else []

    @property
    def pairs_agreeing(self) -> int:
        """Pairs whose own ratio lies on the same side of 1 as the overall one."""
        if self.ratio is None or self.ratio == 1.0:
            return 0
        return sum((r > 1.0) == (self.ratio > 1.0) for r in self.pair_ratios)

    @property
    def repeats_to_decide(self) -> int | None:
        """Within noise: repeats per side after which a gap this size would be told apart."""
        if not self.within_noise or self.repeat_ratio is None:
            return None
        return self.repeat_ratio.repeats_to_decide(self.repeats)

    @property
    def within_noise(self) -> bool:
        """The gap in ms or the ratio may hold no change: one verdict, the weaker of the two
        (over repeats they come from two models, ms and logs, and may disagree at the edge)."""
        return contains_zero(self.gap_ci95) or contains_one(self.ratio_ci95)

    @property
    def fusion_behind_gap(self) -> Evidence | None:
        """The leading phase's fused ops run apart in the slower run, where the apart ops' time
        carries a cause's share of the phase's delta (cause.MIN_SHARE)."""
        top = self.leading_phase
        return next((e for e in self.evidence if top and e.kind == EvidenceKind.FUSED_OPS
                     and e.phase == top.phase and e.delta_ms * top.delta_ms > 0
                     and abs(e.delta_ms) >= MIN_SHARE * abs(top.delta_ms)), None)

    @property
    def faults_behind_gap(self) -> Evidence | None:
        """The page faults, where their estimated cost carries a headline's share of the gap."""
        return next((e for e in self.evidence if e.kind == EvidenceKind.PAGE_FAULTS
                     and explains(e, _HEADLINE_SHARE)), None)

    @property
    def layer_leads(self) -> bool:
        """Whether the verdict names the layer: not where a cause outside layers (copies,
        launches, syncs, page faults) moved more time; ops/kernels are the layers' own time."""
        if self.layer is None:
            return False
        outside = [self.faults_behind_gap and self.faults_behind_gap.delta_ms,
                   self.cause and self.cause.kind != CauseKind.KERNELS and self.cause.delta_ms]
        return all(not ms or abs(ms) <= abs(self.layer.delta_ms) for ms in outside)

    def to_json_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "a_label": self.a_label, "b_label": self.b_label,
                "a_step_ms": self.a_step_ms, "b_step_ms": self.b_step_ms, "gap_ms": self.gap_ms,
                "gap_ci95": _rounded(self.gap_ci95), "ratio": self.ratio,
                "ratio_ci95": _rounded(self.ratio_ci95, 4), "within_noise": self.within_noise,
                "interval_method": self.interval_method and str(self.interval_method), "repeats": self.repeats,
                "unprofiled": self.unprofiled, "inconclusive": self.inconclusive,
                "pair_ratios": [round(r, 4) for r in self.pair_ratios],
                "pairs_agreeing": self.pairs_agreeing if self.pair_ratios else None,
                "repeats_to_decide": self.repeats_to_decide,
                "phases": {g.phase: {"a_ms": g.a_ms, "b_ms": g.b_ms, "delta_ms": g.delta_ms,
                                     "delta_ci95": _rounded(g.delta_ci95),
                                     "within_noise": g.within_noise,
                                     "ratio": g.ratio, "share_of_gap": g.share_of_gap}
                           for g in self.phases},
                "evidence": [{**e.__dict__, "kind": str(e.kind)} for e in self.evidence],
                "suggestions": [x.to_json_dict() for x in self.suggestions],
                "devices_differ": self.devices_differ,
                "cause": _with_layer(self.cause.to_json_dict() if self.cause else None, self.layer),
                "fusion_behind_gap": None if self.fusion_behind_gap is None else {
                    "phase": self.fusion_behind_gap.phase, "delta_ms": self.fusion_behind_gap.delta_ms},
                # The page faults the headline names beside the cause (their facts are in evidence).
                "faults_behind_gap": None if self.faults_behind_gap is None else {
                    "delta_ms": self.faults_behind_gap.delta_ms,
                    "share_of_gap": self.faults_behind_gap.share_of_gap},
                # Only where a slower compiled side breaks its graph or recompiles.
                **({"compile_behind": self.compile_behind} if self.compile_behind else {}),
                **({"device_after_host": {**self.device_after, "leads": self.device_leads}}
                   if self.device_after else {})}


@dataclass
class Comparison:
    runs: list[RunExplanation]
    pairs: list[PairComparison]  # the first run against each other one
    warnings: list[str] = field(default_factory=list)
    # Warnings that change how the verdict reads (a run analysed as one window): said before
    # it, and first among the warnings.
    headline: list[str] = field(default_factory=list)

    @property
    def inconclusive(self) -> bool:
        """A pair's step times are no fact (a busy machine): the command says so in its exit code."""
        return any(p.inconclusive for p in self.pairs)

    @property
    def verdict(self) -> VerdictState:
        """The pair's verdict with two runs; with more, the first inconclusive pair's, else the
        first pair's (each pair has its own: `pairs[i].verdict`)."""
        if not self.pairs:
            return VerdictState("no_verdict", False, "no pair to compare")
        return next((p.verdict for p in self.pairs if p.inconclusive), self.pairs[0].verdict)

    def to_pandas(self, by: str = "phase"):
        """A DataFrame per pair (index: the later run's label, then the phase or layer): by="phase"
        one row per phase (a_ms, b_ms, delta_ms, its interval, within_noise, share_of_gap);
        by="layer" one row per layer the two runs line up (forward and backward ms a side).
        pandas is imported only here (gapscope does not depend on it)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Comparison.to_pandas() needs pandas: pip install pandas") from None
        if by not in ("phase", "layer"):
            raise GapscopeInputError(f"to_pandas(by={by!r}): give by='phase' or by='layer'")
        rows = []
        for run, pair in zip(self.runs[1:], self.pairs):
            if by == "phase":
                rows += [{"run": pair.b_label, "phase": g.phase, "a_ms": g.a_ms, "b_ms": g.b_ms,
                          "delta_ms": g.delta_ms,
                          "delta_ci95_low_ms": g.delta_ci95[0] if g.delta_ci95 else None,
                          "delta_ci95_high_ms": g.delta_ci95[1] if g.delta_ci95 else None,
                          "within_noise": g.within_noise, "share_of_gap": g.share_of_gap}
                         for g in pair.phases]
                continue
            lined_up, _ = layer_pairs(self.runs[0].layers, run.layers)
            rows += [{"run": pair.b_label, "layer": ra.name, "a_forward_ms": ra.forward_ms,
                      "b_forward_ms": rb.forward_ms, "a_backward_ms": ra.backward_ms,
                      "b_backward_ms": rb.backward_ms,
                      "delta_ms": rb.forward_ms + rb.backward_ms - ra.forward_ms - ra.backward_ms}
                     for ra, rb in lined_up]
        return pd.DataFrame(rows, columns=_PANDAS_COLUMNS[by]).set_index(["run", by])

    def to_json_dict(self) -> dict:
        from gapscope.analysis.results.memory.gap import memory_gap
        comparisons = [p.to_json_dict() for p in self.pairs]
        for run, doc in zip(self.runs[1:], comparisons):  # where both runs have memory figures
            gap = memory_gap(self.runs[0].breakdown, run.breakdown)
            if gap is not None:
                doc["memory"] = gap
        return {"baseline": self.pairs[0].a if self.pairs else None,
                "runs": [r.to_json_dict() for r in self.runs],
                "comparisons": comparisons,
                "warnings": self.warnings}


def compare(runs: list[RunExplanation],
            repeats: list[list[Breakdown]] | None = None,
            different_workloads: bool = False) -> Comparison:
    """The first run is the baseline. `repeats`: for each run, the breakdowns of its
    interleaved repeats (A/B measurement), which then give the step times and intervals;
    the runs themselves (one traced repeat each) give the evidence. Runs of different
    workloads are refused unless `different_workloads` asks for them on purpose."""
    if len(runs) < 2:
        raise GapscopeInputError("compare needs at least two runs")
    base = runs[0]
    warnings = []
    for other in runs[1:]:
        wa, wb = base.breakdown.workload, other.breakdown.workload
        if wa and wb and wa != wb:
            if not different_workloads:
                raise GapscopeInputError(
                    f"{base.breakdown.run_id} runs {wa!r}, {other.breakdown.run_id} runs {wb!r}: a "
                    "gap between different models (or captures named differently) is no "
                    "framework's; name the captures alike, or --different-workloads to compare them")
            warnings.append(f"different workloads compared on purpose: {wa!r} and {wb!r}")
        if not (wa and wb):
            warnings.append(f"workload of {other.breakdown.run_id if wa else base.breakdown.run_id} "
                            "unknown (not a gapscope run directory): make sure both ran the same model")
        warnings += _hardware_warnings(base, other)
    labels = unique_labels([r.breakdown.name for r in runs], [r.breakdown.run_id or "" for r in runs],
                           [r.trace_file for r in runs])
    for run, label in zip(runs, labels):
        run.breakdown.label = label
    pairs = [compare_pair(base, other, repeats and (repeats[0], repeats[i]))
             for i, other in enumerate(runs[1:], start=1)]
    _already_measured(runs, pairs)
    sides = [[b.breakdown] for b in runs] if not repeats else repeats
    busy = _busy_machine(runs, sides, pairs)
    warnings += ([busy] if busy else []) + _reliability(runs, repeats)
    warnings += _allocator_states(runs, repeats)
    if any(not p.unprofiled for p in pairs):
        warnings.append("a run has no unprofiled steps: its step time carries the profiler's cost "
                        "and the gap may have the wrong size")
    headline = (single_window_warnings([r.breakdown for r in runs]) + _device_after_warnings(runs)
                + [f"{r.breakdown.name}: no device activity was traced (host figures only): its "
                   "device time is unknown, so a gap against it may be the device's"
                   for r in runs if r.attribution.device_kind == "none"])
    return Comparison(runs, pairs, headline + warnings, headline)


def _outlives(run: RunExplanation) -> bool:
    """Whether the device work a step queued runs on after its host side for a share of the
    step worth a verdict's notice (cause.MIN_SHARE)."""
    at = run.attribution
    step = sum(at.host_ms.values())  # the traced step, as late_ms is
    return at.device_kind == "gpu" and at.late_ms > 0 and at.late_ms >= MIN_SHARE * step


def _device_after_warnings(runs: list[RunExplanation]) -> list[str]:
    """A run whose device work outlives its steps' host side: its step time is the host's
    window and leaves that work out, so a gap between such runs is no host time by itself."""
    return [f"{r.breakdown.name}: the device runs {r.attribution.late_ms:.3f} ms per step after the "
            "host's side of the step ends (work the step queued, counted to its launch): the step "
            "time is the host's window and leaves that device time out" for r in runs if _outlives(r)]


def _device_after(a: RunExplanation, b: RunExplanation) -> dict | None:
    if not (_outlives(a) or _outlives(b)):
        return None
    la, lb = a.attribution.late_ms, b.attribution.late_ms
    return {"a_ms": round(la, _DIGITS), "b_ms": round(lb, _DIGITS), "delta_ms": round(lb - la, _DIGITS)}


def _already_measured(runs: list[RunExplanation], pairs: list[PairComparison]) -> None:
    """A suggestion whose configuration is among the runs compared gets that run's figure
    (its step over the suggested-for run's, as the table has them) instead of standing as a
    run to try: 'try mlp:torch:compile' under 'mlp torch compile is 1.11x slower' contradicts
    the evidence above it."""
    steps = [pairs[0].a_step_ms] + [p.b_step_ms for p in pairs]
    names = [r.breakdown.name for r in runs]
    for pair in pairs:
        for s in pair.suggestions:
            found = next((i for i, r in enumerate(runs)
                          if same_config(config_of(r.breakdown), s.suggested)), None)
            if found is None or s.run_label not in names:
                continue
            current = steps[names.index(s.run_label)]
            if current:
                s.already = {"run": names[found], "ratio": round(steps[found] / current, 4)}
                why = runs[found].breakdown.compile_why  # a compiled run says where its graph broke
                if why is not None and why.graph_breaks:
                    s.already["graph_breaks"] = [f"{b.reason} at {b.place}" for b in why.graph_breaks]


def _reliability(runs: list[RunExplanation], repeats: list[list[Breakdown]] | None) -> list[str]:
    """Each run's (or repeat's) reasons not to trust its step time, named by run; the
    machine's load is said once for all runs, by _busy_machine."""
    if not repeats:
        return [f"{r.breakdown.name}: {w}" for r in runs for w in r.breakdown.reliability_warnings
                if not is_load_warning(w)]
    return [f"{run.breakdown.name} repeat {i}: {w}" for run, side in zip(runs, repeats)
            for i, b in enumerate(side, start=1) for w in b.reliability_warnings if not is_load_warning(w)]


def _busy_machine(runs: list[RunExplanation], sides: list[list[Breakdown]],
                  pairs: list[PairComparison]) -> str | None:
    """One warning naming every run (and how many of its repeats) that ran while other
    processes took the cores. Each pair with such a side is inconclusive and suggests nothing:
    on 2 busy cores a 1.5 ms MLP step took 50-230 ms, and a verdict, a cause's size or a
    'try compile' drawn from that is about the neighbours, not the configuration."""
    loads = [[b.busy_load for b in side] for side in sides]
    named = []
    for run, side_loads in zip(runs, loads):
        busy = [x for x in side_loads if x]
        if busy:
            many = f" ({len(busy)} of {len(side_loads)} repeats)" if len(side_loads) > 1 else ""
            named.append(f"{run.breakdown.name}{many}")
    if not named:
        return None
    for i, pair in enumerate(pairs, start=1):
        which = [n for n, side_loads in ((pair.a_label, loads[0]), (pair.b_label, loads[i]))
                 if any(side_loads)]
        if which:
            pair.inconclusive = f"busy machine while {' and '.join(which)} ran"
    return busy_warning(named, [x for side_loads in loads for x in side_loads if x])


def _allocator_states(runs: list[RunExplanation], repeats: list[list[Breakdown]] | None) -> list[str]:
    """Each configuration whose repeats sat in different allocator states, named by run."""
    found = (page_faults.states_warning(run.breakdown.name, [b.minor_faults_per_step for b in side])
             for run, side in zip(runs, repeats or []))
    return [w for w in found if w]


def compare_pair(a: RunExplanation, b: RunExplanation,
                 repeats: tuple[list[Breakdown], list[Breakdown]] | None = None) -> PairComparison:
    sides = repeats or ([a.breakdown], [b.breakdown])
    da = _mean_figures(sides[0])
    db = _mean_figures(sides[1])
    a_step, b_step = da["step"], db["step"]
    gap = round(b_step - a_step, _DIGITS)
    phases = [PhaseGap(p, da[p], db[p], round(db[p] - da[p], _DIGITS), _ratio(db[p], da[p]), None)
              for p in MARKED_PHASES]
    # `other` takes what the four leave of the gap, so the five deltas add up to it exactly.
    phases.append(PhaseGap("other", da["other"], db["other"],
                           round(gap - sum(g.delta_ms for g in phases), _DIGITS),
                           _ratio(db["other"], da["other"]), None))
    for g in phases:
        g.share_of_gap = round(g.delta_ms / gap, 4) if gap else None
    pair = PairComparison(a.breakdown.run_id, b.breakdown.run_id, a.breakdown.name, b.breakdown.name,
                          a_step, b_step, gap, phases, [],
                          _devices_differ(a, b), ratio=_ratio(b_step, a_step),
                          repeats=len(sides[0]),
                          unprofiled=all(x.unprofiled for side in sides for x in side))
    if len(sides[0]) >= 2 and len(sides[0]) == len(sides[1]):
        _repeat_intervals(pair, *sides)
    else:
        _bootstrap_intervals(pair, a.breakdown, b.breakdown)
    pair.untrusted = any(x.reliability_warnings or x.busy_load for side in sides for x in side)
    # The evidence after the intervals: the amortisation point takes the gap's.
    pair.evidence = build_evidence(a, b, pair)
    faults = page_fault_evidence(*sides)
    if faults is not None:
        faults.share_of_gap = round(faults.delta_ms / gap, 4) if gap else None
        # Faults that carry a share of the gap come first: they are why the ops below them
        # took longer (a fault lands inside whichever op touches the fresh page).
        pair.evidence.insert(0 if explains(faults, EVIDENCE_SHARE) else len(pair.evidence), faults)
    pair.suggestions = _suggestions(pair, a, b)
    if not (pair.untrusted or pair.within_noise):  # "slower" is a fact only then
        pair.compile_behind = compile_behind(a.breakdown, b.breakdown, gap)
    pair.device_after = _device_after(a, b)
    leading = pair.leading_phase
    if leading is not None:
        pair.cause = biggest_cause(a, b, leading.phase, leading.delta_ms)
        pair.layer = layer_cause(a.layers, b.layers, leading.phase, leading.delta_ms)
    return pair


def _with_layer(cause: dict | None, layer: LayerCause | None) -> dict | None:
    """The cause's JSON with its `layer` where one carries the phase (kept out otherwise, so a
    comparison of runs without layers reads as before)."""
    if layer is None:
        return cause
    return {**(cause or {"phase": layer.phase, "phase_delta_ms": layer.phase_delta_ms}),
            "layer": layer.to_json_dict()}


def _suggestions(pair: PairComparison, a: RunExplanation, b: RunExplanation) -> list[Suggestion]:
    """For the slower run (by its mean step), from the phases it is slower in beyond noise
    only: a step gap within noise can still hold one phase that is clearly slower (with
    three repeats a t-interval is wide), and that phase is worth a hypothesis. A suggestion is
    a hypothesis drawn from the step times: none from a side that cannot be trusted."""
    if pair.gap_ms == 0 or pair.untrusted:
        return []
    b_slower = pair.gap_ms > 0
    gaps = {g.phase: (g.delta_ms if b_slower else -g.delta_ms) for g in pair.phases
            if not g.within_noise}
    phase_ms = {g.phase: g.b_ms if b_slower else g.a_ms for g in pair.phases}
    # The faults as the evidence says them (over the repeats), so both lines give one figure.
    faults = next((e.b if b_slower else e.a for e in pair.evidence
                   if e.kind == EvidenceKind.PAGE_FAULTS), None)
    return suggest(b if b_slower else a, phase_ms, gaps,
                   pair.b_step_ms if b_slower else pair.a_step_ms,
                   faults and faults["minor_faults_per_step"], _fused_apart_figures(pair, b_slower))


def _fused_apart_figures(pair: PairComparison, b_slower: bool) -> dict[str, float] | None:
    """The slower run's biggest fused-ops finding, in a phase it is slower in beyond noise."""
    noise = {g.phase for g in pair.phases if g.within_noise}
    found = [e for e in pair.evidence if e.kind == EvidenceKind.FUSED_OPS and e.phase not in noise
             and (e.delta_ms > 0) == b_slower and e.delta_ms]
    if not found:
        return None
    e = max(found, key=lambda x: abs(x.delta_ms))
    fast, slow = (e.a, e.b) if b_slower else (e.b, e.a)
    return {"fused_per_step": fast["fused_per_step"], "apart_per_step": slow["apart_per_step"],
            "extra_ms": slow["extra_ms_per_step"]}


def _mean_figures(breakdowns: list[Breakdown]) -> dict[str, float]:
    """Step and phases averaged over repeats, from the rounded figures of the JSON contract."""
    docs = [x.to_json_dict() for x in breakdowns]
    figures = {"step": round(statistics.fmean(d["step_ms"]["mean"] for d in docs), _DIGITS)}
    for p in PHASES:
        figures[p] = round(statistics.fmean(d["phases"][p]["ms"] for d in docs), _DIGITS)
    return figures


def _bootstrap_intervals(pair: PairComparison, a: Breakdown, b: Breakdown) -> None:
    """One run each: both estimators' bootstrap replicates are independent, so their
    differences (row by row) are replicates of the difference."""
    if a.replicates is None or b.replicates is None or a.step_ci95 is None or b.step_ci95 is None:
        return
    ra, rb = a.replicates, b.replicates
    pair.gap_ci95 = percentile_interval(rb[:, 0] - ra[:, 0])
    pair.ratio_ci95 = percentile_interval(rb[:, 0] / ra[:, 0])
    for i, g in enumerate(pair.phases, start=1):
        g.delta_ci95 = percentile_interval(rb[:, i] - ra[:, i])
    pair.interval_method = IntervalMethod.BOOTSTRAP


def _repeat_intervals(pair: PairComparison, side_a: list[Breakdown], side_b: list[Breakdown]) -> None:
    """Interleaved repeats A B B A ...: each a fresh process. The step ratio and every ms
    delta, the gap's too, take both sides' noise at both levels (the processes, and the steps
    within them: stats.repeat_ratio, stats.welch_difference). The gap's interval is no map of
    the ratio's with the baseline's mean held fixed: that drops the baseline's own spread,
    which on a busy machine was +-1000 ms beside a printed interval of 160."""
    a_means = [_mean_figures([x]) for x in side_a]
    b_means = [_mean_figures([x]) for x in side_b]
    result = repeat_ratio([f["step"] for f in a_means], [f["step"] for f in b_means],
                          [mean_variance(x.step_times_ms) for x in side_a],
                          [mean_variance(x.step_times_ms) for x in side_b])
    pair.repeat_ratio = result
    pair.ratio, pair.ratio_ci95 = round(result.ratio, 4), result.ci95
    pair.gap_ci95 = welch_difference([f["step"] for f in a_means], [f["step"] for f in b_means],
                                     [mean_variance(x.step_times_ms) for x in side_a],
                                     [mean_variance(x.step_times_ms) for x in side_b])
    for column, g in enumerate(pair.phases, start=1):
        g.delta_ci95 = welch_difference([f[g.phase] for f in a_means], [f[g.phase] for f in b_means],
                                        _within(side_a, column), _within(side_b, column))
    pair.interval_method = IntervalMethod.REPEATS


def _within(side: list[Breakdown], column: int) -> list[float] | None:
    """Each run's variance of its phase mean from its own steps: its bootstrap replicates'
    (column `column`: step, then the phases); None where a run has none."""
    if any(x.replicates is None for x in side):
        return None
    return [float(np.var(x.replicates[1:, column])) for x in side]


def _rounded(interval: Interval | None, digits: int = _DIGITS) -> list[float] | None:
    return None if interval is None else [round(interval[0], digits), round(interval[1], digits)]


def _devices_differ(a: RunExplanation, b: RunExplanation) -> bool:
    return not a.hardware.same_device(b.hardware)


def _hardware_warnings(a: RunExplanation, b: RunExplanation) -> list[str]:
    """Runs on other GPUs, or ranks of jobs of other sizes, differ by more than the code: said,
    for foreign traces too (their deviceProperties and distributedInfo say it)."""
    ha, hb = a.hardware, b.hardware
    ids = a.breakdown.run_id, b.breakdown.run_id
    warnings = []
    if not ha.same_device(hb):
        warnings.append(f"different devices: {ha.describe()} ({ids[0]}) vs {hb.describe()} "
                        f"({ids[1]}): the gap includes the hardware")
    if ha.world_size != hb.world_size:
        warnings.append(f"different world sizes: {ha.world_size} process(es) ({ids[0]}) vs "
                        f"{hb.world_size} ({ids[1]}): the gap includes the job's size "
                        "(communication, per-rank batch)")
    return warnings


def _ratio(b: float, a: float) -> float | None:
    return round(b / a, 4) if a else None
