"""What a compare table shows, shared by the terminal and Markdown renderers."""
from __future__ import annotations

from gapscope.analysis.results.amortisation import amortisation_line, compile_behind_line
from gapscope.analysis.results.compare import Comparison, IntervalMethod
from gapscope.analysis.results.evidence.builders import EvidenceKind
from gapscope.analysis.renderers import evidence_text
from gapscope.analysis.renderers.columns import plus_minus, ratio_interval
from gapscope.analysis.results.suggestions import config_of
from gapscope.profilers.phases import PHASES

UNIT_FOOTER = ("ms per steady-state step (mean, unprofiled); Δ = run − baseline (first run) ± half its "
               "95 % interval ([low, high] where lopsided), '~' where the interval holds 0 (within "
               "noise); the phase Δs add up to the step Δ (the gap); ratio = run / baseline; "
               "% gap = Δ / gap; compile = one-time, outside the steps")


# Said in the step row's % gap where the whole gap is noise: no phase's share of it means anything.
GAP_WITHIN_NOISE = "gap within noise"


def _f(value, fmt="{:.3f}", none="n/a"):
    return none if value is None else fmt.format(value)


def delta(value: float, interval) -> str:
    """'+1.234 ±0.056' (or '+1.452 [+1.273, +9.416]' where the interval is lopsided), and a '~'
    where the interval holds zero: not told apart from noise."""
    text = plus_minus(value, interval, sign="+")
    return text + (" ~" if interval is not None and interval[0] <= 0.0 <= interval[1] else "")


def gap_text(pair) -> str:
    """The step gap and its interval, '~' where the pair is within noise: by its ms interval
    or its ratio's, whichever holds no change (PairComparison.within_noise)."""
    return plus_minus(pair.gap_ms, pair.gap_ci95, sign="+") + (" ~" if pair.within_noise else "")


def phase_verdict(pair, g) -> str:
    """A phase's word in the tab's table: none drawn from step times that are no fact."""
    if pair.inconclusive:
        return "no verdict"
    if g.within_noise:
        return "within noise"
    word = "slower" if g.delta_ms > 0 else "faster" if g.delta_ms < 0 else ""
    return f"{word} (no interval)" if g.delta_ci95 is None and word else word


def step_verdict(pair) -> str:
    if pair.inconclusive:
        return "no verdict"
    if pair.within_noise:
        return GAP_WITHIN_NOISE
    return "slower" if pair.gap_ms > 0 else "faster" if pair.gap_ms < 0 else ""


def table_cells(pair) -> dict:
    """The Δ cells and verdicts of a pair as the CLI's table writes them, for the tab: one
    answer in every view (the tab once showed its own '±' where the CLI's interval was lopsided,
    and a phase 'faster' under an INCONCLUSIVE headline)."""
    return {"phases": {g.phase: {"delta": delta(g.delta_ms, g.delta_ci95), "verdict": phase_verdict(pair, g)}
                       for g in pair.phases},
            "step": {"delta": gap_text(pair), "verdict": step_verdict(pair)}}


def ratio_text(pair) -> str:
    return ratio_interval(pair.ratio, pair.ratio_ci95)


def _factor_text(pair) -> str:
    """'144.93x [120.10, 170.20]' in the verdict's direction: a faster run's 0.01x [0.01, 0.01]
    said nothing the eye could read."""
    if pair.ratio > 1:
        return ratio_text(pair)
    interval = pair.ratio_ci95 and (1 / pair.ratio_ci95[1], 1 / pair.ratio_ci95[0])
    return ratio_interval(1 / pair.ratio, interval)


def verdict_lines(comparison: Comparison) -> list[str]:
    """One line per pair: how much slower or faster, with its interval, or that it is noise;
    with repeats, a second line with the pair ratios they came from."""
    lines = []
    for pair in comparison.pairs:
        if pair.ratio is None:
            continue
        if pair.inconclusive:
            # No "x faster" here, not even qualified: that figure is what gets quoted.
            lines.append(f"INCONCLUSIVE: {pair.b_label} vs {pair.a_label}, {pair.inconclusive}: "
                         f"its gap ({gap_text(pair)} ms per step) is no verdict")
        elif pair.within_noise:
            lines.append(f"{pair.b_label} vs {pair.a_label}: within noise "
                         f"(ratio {ratio_text(pair)}; gap {gap_text(pair)} ms)")
        else:
            slower = pair.ratio > 1
            lines.append(f"{pair.b_label} is {_factor_text(pair)} {'slower' if slower else 'faster'} "
                         f"than {pair.a_label} (gap {gap_text(pair)} ms per step)"
                         f"{_where(pair)}")
        pairs = evidence_text.pairs_line(pair)
        if pairs:
            lines.append(f"  {pairs}")
        pays = _amortisation(pair)
        if pays:
            lines.append(f"  {amortisation_line(pays)}")
    caveat = _one_process(comparison)
    if caveat:
        lines.append(f"  {caveat}")
    for pair in comparison.pairs[:1]:
        lines.append(f"intervals: {evidence_text.interval_method(pair)}")
    return lines


def _amortisation(pair) -> dict | None:
    """The pair's amortisation facts, where one side compiles and the other does not."""
    found = next((e for e in pair.evidence if e.kind == EvidenceKind.COMPILE), None)
    return found and found.a.get("amortisation")


def _one_process(comparison: Comparison) -> str | None:
    """Runs of one process each: their interval holds the steps' noise only, while the next
    processes may differ by 10 % and more. Said once beside the verdicts, with the command
    that gives the answer `compare --measure` would, so that the two never read as two."""
    if not any(p.interval_method == IntervalMethod.BOOTSTRAP for p in comparison.pairs):
        return None
    configs = list(dict.fromkeys(config_of(r.breakdown) for r in comparison.runs))
    # A foreign trace or the user's own loop, or one configuration twice: no `--measure` runs it.
    if not all(configs) or len(configs) < 2:
        return ("one process each: the drift between processes is not in this interval; run each "
                "side again in fresh processes before taking the gap as a fact")
    command = f"`gapscope compare --measure {' '.join(configs)}`"
    return (f"one process each: the drift between processes is not in this interval; "
            f"{command} repeats {'both' if len(configs) == 2 else 'each'} and decides")


def _where(pair) -> str:
    """'; 93 % of it in backward (+22.300 ms)': the phase that carries most of the gap, beyond
    noise; with the biggest cause inside it where one is found: '; 78 % of it in forward
    +36.200 ms: +771 device-to-device copies per step (+4.35 GB, +3.100 ms)'. A slower compiled
    run's graph breaks and recompiles come first."""
    lead = f"; {compile_behind_line(pair.compile_behind)}" if pair.compile_behind else ""
    if pair.device_leads:  # the host's phases hold less of the difference than the device's tail
        return lead + "; " + evidence_text.device_after(pair.device_after)
    return lead + _leading_phase(pair)


def _leading_phase(pair) -> str:
    top = pair.leading_phase
    if top is None:
        return ""
    faults = pair.faults_behind_gap
    faults = f"; {evidence_text.faults_cause(faults)}" if faults else ""
    fused = pair.fusion_behind_gap
    faults += f"; {evidence_text.fusion_cause(fused, pair.a_label, pair.b_label)}" if fused else ""
    if pair.layer_leads:
        text = evidence_text.layer_cause(pair.layer, pair.a_label, pair.b_label)
        return f"; {100 * top.share_of_gap:.0f} % of it in {text}{faults}"
    if pair.cause is not None:
        return f"; {100 * top.share_of_gap:.0f} % of it in {evidence_text.cause(pair.cause)}{faults}"
    return f"; {100 * top.share_of_gap:.0f} % of it in {top.phase} ({top.delta_ms:+.3f} ms){faults}"


def header(comparison: Comparison, sep: str = " ") -> list[str]:
    """`sep` between a run's name and the unit: a line break lets a terminal column stay narrow."""
    runs = comparison.runs
    cells = ["phase", f"{runs[0].breakdown.name}{sep}ms"]
    for run in runs[1:]:
        cells += [f"{run.breakdown.name}{sep}ms", "Δ ms", f"ratio{sep}run/base", "% gap"]
    return cells


def phase_rows(comparison: Comparison) -> list[list[str]]:
    pairs = comparison.pairs
    rows = []
    for i, phase in enumerate(PHASES):
        row = [phase, f"{pairs[0].phases[i].a_ms:.3f}"]
        for pair in pairs:
            g = pair.phases[i]
            row += [f"{g.b_ms:.3f}", delta(g.delta_ms, g.delta_ci95), _f(g.ratio, "{:.2f}x"),
                    "~" if g.within_noise or pair.within_noise else _f(g.share_of_gap, "{:.0%}")]
        rows.append(row)
    step = ["step", f"{pairs[0].a_step_ms:.3f}"]
    for pair in pairs:
        step += [f"{pair.b_step_ms:.3f}", gap_text(pair), ratio_text(pair),
                 GAP_WITHIN_NOISE if pair.within_noise else "100%" if pair.gap_ms else "n/a"]
    rows.append(step)
    compile_row = ["compile (once)"]
    for i, run in enumerate(comparison.runs):
        compile_row.append(_f(run.breakdown.compile_ms, "{:.1f}"))
        if i:
            compile_row += ["", "", ""]
    rows.append(compile_row)
    return rows


def fact_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    """Per-run evidence figures, one column per run."""
    runs = comparison.runs
    head = ["per step"] + [r.breakdown.name for r in runs]
    facts = [
        ("kernels (count)", _seen(lambda r: f"{r.kernels.per_step:.1f}")),
        ("  of them fused", _seen(lambda r: _f(r.kernels.fused_share, "{:.0%}"))),
        ("  fused share of kernel time", _seen(lambda r: _f(r.kernels.fused_time_share, "{:.0%}"))),
        ("  mean kernel µs", _seen(lambda r: _f(r.kernels.mean_us, "{:.1f}"))),
        ("  counted as kernels", lambda r: r.kernels.source),
        # Summed over threads, kernel time can exceed the step (TF runs ops side by side on
        # the CPU): the busy time beside it, and their ratio, say how.
        ("time in kernels ms, summed", _seen(lambda r: f"{r.kernels.time_ms_per_step:.3f}")),
        ("  busy, threads merged ms", _seen(lambda r: f"{r.attribution.device_busy_ms:.3f}")),
        ("  parallelism (summed/busy)", _seen(lambda r: _f(parallelism(r), "{:.2f}x"))),
        ("device idle / dispatch ms", _seen(lambda r: f"{r.attribution.dispatch_ms:.3f}")),
        # GPU: work the step queued that ran after its host side (a graph replay): in no step time.
        ("device after the host's side ms", lambda r: _f(r.attribution.late_ms if r.attribution.device_kind == "gpu"
                                                          else None, "{:.3f}")),
        ("launch calls (GPU)", lambda r: _f(r.attribution.launches_per_step, "{:.1f}")),
        ("first step ms", lambda r: _f(r.compile.first_step_ms, "{:.1f}")),
        ("steady median step ms", lambda r: _f(r.compile.steady_median_ms, "{:.3f}")),
        ("compiled-region calls", lambda r: f"{r.compile.compiled_calls_per_step:.1f}"),
        ("guard (cache lookup) µs", lambda r: f"{1000 * r.compile.guard_ms_per_step:.1f}"),
        ("tf.function tracing count", lambda r: _f(r.compile.tf_tracing_count, "{}")),
        ("XLA programs run", lambda r: str(len(r.compile.xla_modules))),
        ("transfers", _transfers),
        ("CPU load %", lambda r: _f(r.resources.cpu_percent_mean, "{:.0f}")),
        ("GPU util %", lambda r: _f(r.resources.gpu_util_percent_mean, "{:.0f}")),
    ]
    return head, [[label] + [fn(r) for r in runs] for label, fn in facts]


def _seen(figure):
    """A device figure, or n/a for a run whose device was not traced (host figures only)."""
    return lambda r: "n/a" if r.attribution.device_kind == "none" else figure(r)


def parallelism(run) -> float | None:
    """How many kernels (ops, on the CPU) ran at once on average while any ran."""
    busy = run.attribution.device_busy_ms
    return run.kernels.time_ms_per_step / busy if busy > 0 else None


# Every table read from the trace says so in its title: its figures come from other steps than
# the breakdown's, and are larger for it.
TRACED = "traced steps, profiler cost inside"
DEVICE_TITLE = f"host vs device time per phase ({TRACED}; ms per step)"
FACTS_TITLE = f"evidence per run ({TRACED})"
# Said under the host/device table: why its figures can exceed the breakdown's phase, or the step.
DEVICE_FOOTER = ("traced steps run slower than the unprofiled steps of the breakdown (the "
                 "profiler's cost), and device time counts the phase's kernels (CPU: ops) whenever "
                 "they ran, threads merged, beside or after the host's phase: so a figure here can "
                 "exceed the breakdown's phase, even its step")


def _transfers(run) -> str:
    t = run.transfers
    if run.attribution.device_kind == "none":
        return "n/a (not traced)"
    if t.note:
        return "none (CPU-only)" if t.cpu_only else "none"
    def phases(way):  # where the copies of one direction were issued
        return "/".join(p for p, ways in t.by_phase.items() if way in ways)
    return ", ".join(f"{d['count_per_step']:.1f} {way} {d['bytes_per_step'] / 1e3:.0f} kB in {phases(way)}"
                     for way, d in t.by_direction.items())


def phase_device_rows(comparison: Comparison, sep: str = " ") -> tuple[list[str], list[list[str]]]:
    """Host (breakdown) against device time per phase, one column pair per run."""
    runs = comparison.runs
    head = ["phase"] + [h for r in runs for h in (f"{r.breakdown.name}{sep}host", "device")]
    buckets = list(PHASES) + [b for b in ("mixed", "unattributed")
                              if any(b in r.attribution.device_ms for r in runs)]
    rows = []
    for b in buckets:
        row = [b]
        for r in runs:
            host = r.attribution.host_ms.get(b)
            device = "n/a" if r.attribution.device_kind == "none" else _f(r.attribution.device_ms.get(b), "{:.3f}", "")
            row += [_f(host, "{:.3f}", ""), device]
        rows.append(row)
    return head, rows


def lead_lines(pair) -> list[str]:
    """The suggestions as printed: a slower compiled run's breaks and recompiles first (what
    to fix before any variant), then each suggestion."""
    return ([compile_behind_line(pair.compile_behind)] if pair.compile_behind else []) \
        + [evidence_text.suggestion(s) for s in pair.suggestions]


def evidence_lines(comparison: Comparison) -> list[str]:
    lines = []
    for pair in comparison.pairs:
        lines.append(f"{pair.b_label} vs {pair.a_label}: gap {pair.gap_ms:+.3f} ms per step; "
                     f"the evidence from {TRACED}:")
        lines += [f"  - {evidence_text.sentence(e, pair)}" for e in pair.evidence]
        if pair.suggestions or pair.compile_behind:
            lines.append(f"suggestions for {pair.b_label if pair.gap_ms > 0 else pair.a_label} "
                         "(hypotheses; --check-suggestions measures them):")
            lines += [f"  - {line}" for line in lead_lines(pair)]
    return lines
