"""Says each compare finding in one line, from the facts the compare analyzer measured."""
from __future__ import annotations

from gapscope.analysis.results.cause import Cause, CauseKind
from gapscope.analysis.results.compare import IntervalMethod, PairComparison
from gapscope.analysis.results.evidence.builders import Evidence, EvidenceKind
from gapscope.analysis.measures.kernels import WorkSource
from gapscope.analysis.measures.page_faults import FAULT_COST_US, states_apart
from gapscope.analysis.measures.stats import REPEAT_METHOD
from gapscope.analysis.results.suggestions import Rule, Suggestion

INTERVAL_METHODS = {
    None: "none: a run has too few steps for an interval",
    # How to get the drift in is said beside the verdict (compare_columns._one_process), where
    # the runs are known: a user's own loop has no `--measure` command.
    IntervalMethod.BOOTSTRAP: "95 % bootstrap over the steps of each run; drift between processes is not in it",
    IntervalMethod.REPEATS: ("95 % " + REPEAT_METHOD.replace("interleaved repeats",
                                                             "{repeats} interleaved repeats")
                             + "; ratio = geometric mean over the repeats"),
}


def interval_method(pair: PairComparison) -> str:
    return INTERVAL_METHODS[pair.interval_method].format(repeats=pair.repeats)


def pairs_line(pair: PairComparison) -> str | None:
    """'pair ratios 1.42, 1.75, 1.22 (3/3 slower); about 4 repeats a side would tell a gap this
    size from noise': what the repeats say one by one, so an interval is never read without
    the figures it came from."""
    if not pair.pair_ratios:
        return None
    side = "slower" if (pair.ratio or 1) > 1 else "faster"
    text = (f"pair ratios {', '.join(f'{r:.2f}' for r in pair.pair_ratios)} "
            f"({pair.pairs_agreeing}/{len(pair.pair_ratios)} pairs agree: {side})")
    if pair.within_noise and pair.pairs_agreeing == len(pair.pair_ratios):
        # All pairs on one side yet within noise: few pairs agree by chance that often.
        text += f", as {len(pair.pair_ratios)} coin flips would 1 time in {2 ** (len(pair.pair_ratios) - 1)}"
    needed = pair.repeats_to_decide
    if needed is not None:
        text += f"; about {needed} repeats a side would tell a gap this size from noise"
    return text


def suggestion(s: Suggestion) -> str:
    """'try mlp:torch:preload (data loading: data_load 4.734 ms, 52 % of the step of mlp torch)',
    then what measuring it found, where it was measured."""
    f = s.figures
    why = {
        Rule.DATA_LOAD: lambda: f"data_load {f['data_load_ms']:.3f} ms, {100 * f['data_load_share']:.0f} %",
        Rule.DISPATCH: lambda: f"other {f['other_ms']:.3f} ms, {100 * f['other_share']:.0f} %",
        Rule.STEPS_PER_CALL: lambda: f"other {f['other_ms']:.3f} ms, {100 * f['other_share']:.0f} %",
        Rule.SMALL_KERNELS: lambda: (f"{f['kernels_per_step']:.0f} kernels/ops per step, mean "
                                     f"{f['mean_kernel_us']:.1f} µs"),
        Rule.RECOMPILES: lambda: f"{f['compile_in_window_ms']:.1f} ms compiling in steady steps",
        Rule.COMPUTE: lambda: f"forward + backward {100 * f['compute_share']:.0f} %",
        Rule.FP32_GPU: lambda: f"forward + backward {100 * f['compute_share']:.0f} %",
        Rule.FUSED_APART: lambda: (f"the other run fuses them into {f['fused_per_step']:g} ops per step, "
                                   f"this one runs {f['apart_per_step']:g} apart, {f['extra_ms']:.3f} ms in separate "
                                   "bias/activation ops"),
        Rule.PAGE_FAULTS: lambda: (f"{f['minor_faults_per_step']:,.0f} page faults per step, about "
                                   f"{f['estimated_ms']:.1f} ms, {100 * f['estimated_share']:.0f} %"),
    }[s.rule]()
    of_step = "" if s.rule in (Rule.SMALL_KERNELS, Rule.RECOMPILES, Rule.FUSED_APART) else " of the step"
    if s.already is not None:
        ratio = s.already["ratio"]
        how = (f"{ratio:.2f}x slower than" if ratio > 1 else f"{1 / ratio:.2f}x faster than"
               if 0 < ratio < 1 else "as fast as")
        breaks = s.already.get("graph_breaks")
        return (f"{s.suggested}: already measured here: {how} {s.run_label} "
                f"({s.already['run']}; {s.rule}: {why}{of_step})"
                + (f"; it breaks its graph: {'; '.join(breaks[:3])}" if breaks else ""))
    text = f"try {s.suggested} ({s.rule}: {why}{of_step}, {s.run_label})"
    if s.check is None:
        return text
    c = s.check
    low_high = f" [{c.ratio_ci95[0]:.2f}, {c.ratio_ci95[1]:.2f}]" if c.ratio_ci95 else ""
    outcome = ("it helped" if c.helped else "within noise: not shown to help" if c.within_noise
               else "it made the step slower")
    return f"{text}: measured {c.ratio:.2f}x{low_high} the step time of {s.current}, {outcome}"


def sentence(e: Evidence, pair: PairComparison) -> str:
    return _SAY[e.kind](e, pair.a_label, pair.b_label)


_WAYS = {"H2D": "host-to-device copies", "D2H": "device-to-host copies",
         "D2D": "device-to-device copies", "P2P": "peer-to-peer copies", "memset": "memsets",
         "other": "copies"}


def layer_cause(c, a_label: str, b_label: str) -> str:
    """'backward +23.200 ms: 61 % in conv4 (cnn torch 14.1 vs cnn keras 5.2 ms, 31 vs 83
    GFLOP/s)': the layer that carries the leading phase, slower run first."""
    rate = ("" if c.a_gflops is None or c.b_gflops is None
            else f", {c.b_gflops:.3g} vs {c.a_gflops:.3g} GFLOP/s")
    # Other layers can move the other way: then one layer holds more than the phase's delta.
    share = (f"{100 * c.share:.0f} % in {c.layer}" if c.share <= 1 else
             f"{c.layer} {_signed(c.delta_ms)} ms, more than the phase's traced "
             f"{_signed(c.traced_delta_ms)} ms")
    return (f"{c.phase} {_signed(c.phase_delta_ms)} ms: {share} "
            f"({b_label} {c.b_ms:.1f} vs {a_label} {c.a_ms:.1f} ms{rate})")


def cause(c: Cause) -> str:
    """'forward +36.200 ms: +771 device-to-device copies per step (+4.35 GB, +3.100 ms)': the
    headline's cause, the same words in every format."""
    head = f"{c.phase} {_signed(c.phase_delta_ms)} ms: "
    what, time = {
        CauseKind.TRANSFERS: (_WAYS.get(c.way, "copies"), "ms"),
        CauseKind.KERNELS: ("device kernels" if c.device_kernels else "ops/kernels", "ms in them"),
        CauseKind.LAUNCHES: ("kernel launches", "ms in the calls"),
        CauseKind.SYNCS: ("blocking syncs", "ms waiting"),
    }[c.kind]
    time = f"{_signed(c.delta_ms)} {time}"
    if abs(c.delta_count) < 0.05:  # as many as before, each longer (or shorter)
        return f"{head}{_n(c.b['count_per_step'])} {what} per step, {time}"
    size = f"{_bytes(c.delta_bytes, signed=True)}, " if c.delta_bytes else ""
    return f"{head}{_n(c.delta_count, signed=True)} {what} per step ({size}{time})"


def _kernels(e: Evidence, a_label: str, b_label: str) -> str:
    fa, fb = e.a, e.b
    unit = ("device kernels" if fa["kernel_source"] == fb["kernel_source"] == WorkSource.DEVICE_KERNELS
            else "ops/kernels")
    text = (f"{e.phase} {_signed(e.delta_ms)} ms{_share(e)}: {_n(fa['kernels_per_step'])} vs "
            f"{_n(fb['kernels_per_step'])} {unit} per step, mean {_us(fa['mean_kernel_us'])} vs "
            f"{_us(fb['mean_kernel_us'])}; time in them {fa['kernel_ms']:.3f} vs {fb['kernel_ms']:.3f} ms")
    # The phase's copies, launches and syncs (GPU), where either run has any.
    for way in sorted(set(fa.get("transfers") or {}) | set(fb.get("transfers") or {})):
        ta, tb = (f.get("transfers", {}).get(way, _NONE) for f in (fa, fb))
        text += (f"; {way} {_n(ta['count_per_step'])} vs {_n(tb['count_per_step'])} "
                 f"({_bytes(ta['bytes_per_step'])} vs {_bytes(tb['bytes_per_step'])})")
    for key in ("launches", "syncs"):
        if fa.get(key) or fb.get(key):
            ca, cb = fa.get(key) or _NONE, fb.get(key) or _NONE
            text += f"; {key} {_n(ca['count_per_step'])} vs {_n(cb['count_per_step'])}"
            if key == "syncs":  # their time is the host waiting: the figure that matters
                text += f" ({ca['ms_per_step']:.3f} vs {cb['ms_per_step']:.3f} ms)"
    return text


_NONE = {"count_per_step": 0.0, "bytes_per_step": 0.0, "ms_per_step": 0.0}


def device_after(figures: dict) -> str:
    """'the device's work after the host's window moved more: +1.023 ms per step (1.022 vs
    2.045 ms), outside the step times': the verdict's words where the gap is the device's."""
    return (f"the device's work after the host's window moved more: {_signed(figures['delta_ms'])} "
            f"ms per step ({figures['a_ms']:.3f} vs {figures['b_ms']:.3f} ms), outside the step "
            "times, which are host windows")


def _dispatch(e: Evidence, a_label: str, b_label: str) -> str:
    fa, fb = e.a, e.b
    if "none" in (fa["device_kind"], fb["device_kind"]):  # no device seen: no overlap to tell
        untraced = [label for label, f in ((a_label, fa), (b_label, fb)) if f["device_kind"] == "none"]
        return (f"other {_signed(e.delta_ms)} ms{_share(e)}: host time; the device of "
                f"{' and '.join(untraced)} was not traced")
    text = (f"other {_signed(e.delta_ms)} ms{_share(e)}: host time not overlapped by kernel work "
            f"{fa['dispatch_ms']:.3f} vs {fb['dispatch_ms']:.3f} ms per step")
    if fa.get("device_after_ms") or fb.get("device_after_ms"):
        text += (f", while the device ran {fa['device_after_ms']:.3f} vs {fb['device_after_ms']:.3f} "
                 "ms per step after the host's window on work the step queued")
    if fa["launches_per_step"] is not None and fb["launches_per_step"] is not None:
        text += (f"; {_n(fa['launches_per_step'])} vs {_n(fb['launches_per_step'])} launches "
                 f"({fa['launch_ms']:.3f} vs {fb['launch_ms']:.3f} ms in runtime calls)")
    return text


def _transfers(e: Evidence, a_label: str, b_label: str) -> str:
    """All copies by direction; under a phase's evidence (data_load) only those its host code
    issued, and where the others went: the timeline says which phase each fell in."""
    def say(t):
        if t["note"]:
            return t["note"]
        parts = []
        ways = t["by_phase"].get(e.phase, {}) if e.phase else t["by_direction"]
        for way, d in ways.items():
            whole = t["by_direction"][way]
            memory = "/".join(k for k in whole["host_memory"] if k != "n/a")
            parts.append(f"{_n(d['count_per_step'])} {way} of {_bytes(d['bytes_per_step'])} per step"
                         + (f" from {memory} memory" if memory and way == "H2D" else "")
                         + (f" at {whole['gb_per_s']:.1f} GB/s" if whole["gb_per_s"] else ""))
        if e.phase:
            elsewhere = [f"{_n(d['count_per_step'])} {way} in {phase}"
                         for phase, found in t["by_phase"].items() if phase != e.phase
                         for way, d in found.items()]
            parts = parts or [f"none in {e.phase}"]
            if elsewhere:
                parts.append(f"elsewhere {', '.join(elsewhere)}")
        return "; ".join(parts)
    head = f"transfers in {e.phase} ({_signed(e.delta_ms)} ms): " if e.phase else "transfers: "
    sa, sb = say(e.a), say(e.b)
    return head + (sa if sa == sb else f"{sa} vs {sb}")


def _fusion(e: Evidence, a_label: str, b_label: str) -> str:
    fa, fb = e.a, e.b
    text = (f"fusion: {_n(fa['kernels_per_step'])} vs {_n(fb['kernels_per_step'])} kernels per step "
            f"({fa['source']} vs {fb['source']}), fused {_pct(fa['fused_share'])} vs {_pct(fb['fused_share'])} "
            f"of them ({_pct(fa['fused_time_share'])} vs {_pct(fb['fused_time_share'])} of kernel time), "
            f"mean kernel {_us(fa['mean_kernel_us'])} vs {_us(fb['mean_kernel_us'])}")
    # Which fusions ran where: "forward: keras conv+bias+ReLU 4, ... (91 % of its op time) vs torch none".
    ba, bb = fa.get("by_phase") or {}, fb.get("by_phase") or {}
    for phase in [p for p in ba] + [p for p in bb if p not in ba]:
        text += f"; {phase}: {_fused_in(a_label, ba.get(phase))} vs {_fused_in(b_label, bb.get(phase))}"
    return text


def _fused_in(label: str, facts: dict | None) -> str:
    if not facts:
        return f"{label} none fused"
    kinds = ", ".join(f"{what} {_n(n)}" for what, n in facts["fusions"].items())
    return f"{label} {kinds} ({_pct(facts['share_of_time'])} of its op time)"


def _fused_ops(e: Evidence, a_label: str, b_label: str) -> str:
    """'fused ops in forward (+64.783 ms, 40 % of the gap): keras fuses conv+bias+ReLU 4, ...;
    torch runs 11 ops of those parts apart (conv 4, ReLU 5, dense 2): 64.783 ms in its ReLU ops'."""
    (fast, f), (slow, s) = ((a_label, e.a), (b_label, e.b)) if "fusions" in e.a else ((b_label, e.b), (a_label, e.a))
    return (f"fused ops in {e.phase} ({_signed(e.delta_ms)} ms{_share(e)}): {fusion_cause(e, a_label, b_label)}; "
            f"{fast}'s fused ops take {f['fused_ms_per_step']:.3f} ms, {_pct(f['share_of_time'])} of its "
            f"{e.phase} op time; {slow}'s ops apart: " + ", ".join(
                f"{r['part']} {_n(r['per_step'])} ({', '.join(r['names'])})" for r in s["apart"]))


def fusion_cause(e: Evidence, a_label: str, b_label: str) -> str:
    """'keras fuses conv+bias+ReLU (4 ops), dense+bias+ReLU (1); torch runs 11 ops apart, 64.783 ms
    in its separate ReLU': the headline's words for fused ops the slower run runs apart."""
    (fast, f), (slow, s) = ((a_label, e.a), (b_label, e.b)) if "fusions" in e.a else ((b_label, e.b), (a_label, e.a))
    fused = ", ".join(f"{r['fuses']} ({_n(r['per_step'])} op{'s' if r['per_step'] != 1 else ''})"
                      for r in f["fusions"])
    extra = (f", {s['extra_ms_per_step']:.3f} ms per step in its separate {' and '.join(s['extra_parts'])} ops"
             if s["extra_parts"] else "")
    return f"{fast} fuses {fused}; {slow} runs {_n(s['apart_per_step'])} ops of those apart{extra}"


def _compile(e: Evidence, a_label: str, b_label: str) -> str:
    def say(label, c):
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
        return f"{label} {once}" + (f" ({'; '.join(details)})" if details else "")
    text = f"compile: {say(a_label, e.a)} vs {say(b_label, e.b)}; excluded from steps"
    why = [f"{label}: {c['why']['line']}" for label, c in ((a_label, e.a), (b_label, e.b)) if c.get("why")]
    # The amortisation point is a verdict line of its own (compare_columns.verdict_lines).
    return "; ".join([text, *why])


def _mixed(e: Evidence, a_label: str, b_label: str) -> str:
    label, facts = (a_label, e.a) if e.a else (b_label, e.b)
    mixed = facts["mixed_ops"]
    names = ", ".join(f"{m['name']} ({'+'.join(m['phases'])})" for m in mixed[:4])
    return (f"{label}: {len(mixed)} fused op(s) mix phases, {facts['ms_per_step']:.3f} ms per step "
            f"counted in no phase: {names}")


def _unattributed(e: Evidence, a_label: str, b_label: str) -> str:
    label, facts = (a_label, e.a) if e.a else (b_label, e.b)
    # On torch a kernel is unattributed when the trace holds no host call that launched it; on
    # TensorFlow when its op sits in no phase's scope (XLA adds copies of its own).
    why = ("have no launching host call in the trace (correlation id; e.g. launched before the "
           "profiler started or by another thread it did not record)"
           if "torch" in (facts.get("framework") or "") else
           "come from no phase scope (e.g. metric updates, copies XLA added)")
    return (f"{label}: {_n(facts['kernels_per_step'])} kernels per step ({facts['ms_per_step']:.3f} ms) "
            f"{why}: unattributed")


def _page_faults(e: Evidence, a_label: str, b_label: str) -> str:
    def say(label, f):
        # Repeats far apart took their pages in different allocator states, each for its life.
        low, high = f["min"], f["max"]
        spread = f" (repeats {low:,.0f} to {high:,.0f})" if states_apart(low, high) else ""
        return f"{label} {f['minor_faults_per_step']:,.0f}{spread}"
    return (f"page faults per unprofiled step: {say(a_label, e.a)} vs {say(b_label, e.b)}, about "
            f"{_signed(e.delta_ms)} ms at {FAULT_COST_US} µs each{_share(e)}: fresh pages taken "
            "from the kernel again after the allocator gave them back")


def faults_cause(e: Evidence) -> str:
    """'16,392 fewer page faults per step (about -24.588 ms)': the headline's words for them."""
    delta = e.b["minor_faults_per_step"] - e.a["minor_faults_per_step"]
    return (f"{abs(delta):,.0f} {'more' if delta > 0 else 'fewer'} page faults per step "
            f"(about {_signed(e.delta_ms)} ms)")


_SAY = {EvidenceKind.KERNELS: _kernels, EvidenceKind.DISPATCH: _dispatch,
        EvidenceKind.TRANSFERS: _transfers, EvidenceKind.FUSION: _fusion,
        EvidenceKind.FUSED_OPS: _fused_ops,
        EvidenceKind.COMPILE: _compile, EvidenceKind.MIXED_FUSION: _mixed,
        EvidenceKind.UNATTRIBUTED: _unattributed, EvidenceKind.PAGE_FAULTS: _page_faults}


def _signed(ms: float) -> str:
    return f"{ms:+.3f}"


def _share(e: Evidence) -> str:
    return "" if e.share_of_gap is None else f", {100 * e.share_of_gap:.0f} % of the gap"


def _n(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "n/a"
    sign = "+" if signed else ""
    return f"{value:{sign}.0f}" if abs(value - round(value)) < 0.05 else f"{value:{sign}.1f}"


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} µs"


def _ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value / 1000:.1f} s" if value >= 1000 else f"{value:.1f} ms"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f} %"


def _bytes(value: float, signed: bool = False) -> str:
    sign = "+" if signed else ""
    if abs(value) >= 1e9:
        return f"{value / 1e9:{sign}.2f} GB"
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:{sign}.1f} {unit}"
    return f"{value:{sign}.0f} B"
