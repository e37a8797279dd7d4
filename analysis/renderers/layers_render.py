"""Layers as tables (terminal, markdown): per run, each layer's forward and backward ms, GFLOP and
GFLOP/s with the time outside layers; per compared pair, the layers side by side."""
from __future__ import annotations

from gapscope.analysis.events.kernel_names import demangled
from gapscope.analysis.results.layers import (BY_NAME, NO_LINEUP, LayerBreakdown, LayerRow, layer_pairs,
                                     pair_name)
from gapscope.analysis.measures.kernel_layers import PLACED_BY
from gapscope.analysis.renderers.fit import Grid, Page

UNIT_FOOTER = ("ms per traced step (profiler cost inside, as traced); GFLOP per step from the "
               "layer's shapes, or torch's FlopCounterMode for your own model (docs/reference.md, Layers)")
FUSED_MARK = "*"
_HEAD = ["layer", "fwd\nms", "bwd\nms", "fwd\nGFLOP", "bwd\nGFLOP", "fwd\nGFLOP/s", "bwd\nGFLOP/s"]


def _num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _delta(value: float) -> str:
    return f"{value:+.3f}"


def _row(name: str, r: LayerRow, lb: LayerBreakdown) -> list[str]:
    return [name, _num(lb.shown("forward", r.forward_ms)), _num(lb.shown("backward", r.backward_ms)),
            _num(r.forward_gflop), _num(r.backward_gflop), _num(r.gflops("forward"), 1),
            _num(r.gflops("backward"), 1)]


def _marked(r: LayerRow) -> str:
    """A layer with fused ops gets a mark; the line under the table says what they fused."""
    return f"{r.name}{FUSED_MARK}" if r.fused_text() else r.name


def _fused_line(lb: LayerBreakdown) -> list[str]:
    found = [f"{r.name} {r.fused_text()}" for r in lb.rows if r.fused_text()]
    return [f"{lb.label}: {FUSED_MARK} fused ops (one op for several): {', '.join(found)}"] if found else []


def _breakdown_rows(lb: LayerBreakdown) -> list[list[str]]:
    rows = [_row(_marked(r), r, lb) for r in lb.rows]
    rows.append(["outside layers", *(_num(lb.shown(p, lb.outside_ms(p))) for p in ("forward", "backward")),
                 "", "", "", ""])
    total = LayerRow("phase", lb.phase_ms["forward"], lb.phase_ms["backward"],
                     *(None if lb.phase_gflops(p) is None else sum(r.gflop(p) for r in lb.rows)
                       for p in ("forward", "backward")))
    rows.append(_row("phase (traced)", total, lb))
    return rows


def _pair_marked(ra: LayerRow, rb: LayerRow) -> str:
    """The pair's name, marked where either side fused ops (each side's line says what)."""
    name = pair_name(ra, rb)
    return f"{name}{FUSED_MARK}" if ra.fused_text() or rb.fused_text() else name


def _compare_rows(a: LayerBreakdown, b: LayerBreakdown) -> list[list[str]]:
    rows = []
    for ra, rb in layer_pairs(a, b)[0]:
        rows.append([_pair_marked(ra, rb), *_pair_cells(a, b, "forward", ra.forward_ms, rb.forward_ms),
                     *_pair_cells(a, b, "backward", ra.backward_ms, rb.backward_ms)])
    rows.append(["outside layers",
                 *_pair_cells(a, b, "forward", a.outside_ms("forward"), b.outside_ms("forward")),
                 *_pair_cells(a, b, "backward", a.outside_ms("backward"), b.outside_ms("backward"))])
    return rows


def _pair_cells(a: LayerBreakdown, b: LayerBreakdown, phase: str, ms_a: float, ms_b: float) -> list[str]:
    """Both runs' ms of a phase and the delta; "-" where a run cannot measure the phase."""
    shown_a, shown_b = a.shown(phase, ms_a), b.shown(phase, ms_b)
    delta = "-" if shown_a is None or shown_b is None else _delta(shown_b - shown_a)
    return [_num(shown_a), _num(shown_b), delta]


def _gflop(ra: LayerRow, rb: LayerRow, phase: str) -> str:
    """One count where both sides count the same work (one model), both where they differ."""
    x, y = _num(ra.gflop(phase)), _num(rb.gflop(phase))
    return x if x == y else f"{x}/{y}"


def _work_rows(a: LayerBreakdown, b: LayerBreakdown) -> list[list[str]]:
    """The work beside the time: GFLOP a step by phase, and each run's GFLOP/s in it."""
    return [[_pair_marked(ra, rb), _gflop(ra, rb, "forward"), _gflop(ra, rb, "backward"),
             _num(ra.gflops("forward"), 1), _num(rb.gflops("forward"), 1),
             _num(ra.gflops("backward"), 1), _num(rb.gflops("backward"), 1)]
            for ra, rb in layer_pairs(a, b)[0]]


def _compare_head(a: LayerBreakdown, b: LayerBreakdown, sep: str) -> list[str]:
    return ["layer", f"{a.label}{sep}fwd ms", f"{b.label}{sep}fwd ms", "Δ fwd\nms",
            f"{a.label}{sep}bwd ms", f"{b.label}{sep}bwd ms", "Δ bwd\nms"]


def _work_head(a: LayerBreakdown, b: LayerBreakdown, sep: str) -> list[str]:
    """GFLOP/s said once, in the title: four such columns fit 80 characters only so."""
    return ["layer", "fwd\nGFLOP", "bwd\nGFLOP", f"{a.label}{sep}fwd", f"{b.label}{sep}fwd",
            f"{a.label}{sep}bwd", f"{b.label}{sep}bwd"]


def _work_title(a: LayerBreakdown, b: LayerBreakdown) -> str:
    return f"gapscope layers' work: {b.label} vs {a.label} (GFLOP a step; GFLOP/s by run and phase)"


def _notes(lb: LayerBreakdown) -> list[str]:
    return _fused_line(lb) + _optimizer_line(lb) + [f"{lb.label}: {note}" for note in lb.notes] + _peak(lb)


def _optimizer_line(lb: LayerBreakdown) -> list[str]:
    return [optimizer_text(lb.label, lb.optimizer)] if lb.optimizer else []


def optimizer_text(label: str, optimizer: dict) -> str:
    """Each layer's parameter updates inside the optimizer's step (the layers' `optimizer`)."""
    parts = [f"{name} {ms:.3f}" for name, ms in optimizer["layers"].items()]
    return (f"{label}: optimizer per layer ({optimizer['source']}, ms per traced step): "
            f"{', '.join(parts)}; outside layers {optimizer['outside_ms']:.3f}")


KERNEL_HEAD = ["layer", "fwd\nkernels", "fwd\nµs", "fwd\nGFLOP/s", "bwd\nkernels", "bwd\nµs",
                "bwd\nGFLOP/s"]
KERNEL_FOOTER = ("kernels per traced step, by the layer whose op launched them (on the CPU: a "
                 "compiled graph's kernels and ops); µs = their busy time (docs/reference.md, Layers)")
_MIXED_LISTED = 6  # mixed kernel names listed per phase; the JSON has every one


def _kernel_cells(cell: dict) -> list[str]:
    return [f"{cell['kernels']:g}", _num(cell["ms"] * 1000.0, 1), _num(cell.get("gflops"), 1)]


def kernel_rows(kernels: dict) -> list[list[str]]:
    """A run's kernels-by-layer JSON as rows: each layer, mixed, outside and the phases' total."""
    rows = [[row["name"], *_kernel_cells(row["forward"]), *_kernel_cells(row["backward"])]
            for row in kernels["layers"]]
    for name, key in (("mixed", "mixed"), ("outside layers", "outside")):
        rows.append([name, *_kernel_cells(kernels[key]["forward"]), *_kernel_cells(kernels[key]["backward"])])
    total = {p: {"kernels": sum(r[p]["kernels"] for r in kernels["layers"]) + kernels["mixed"][p]["kernels"]
                 + kernels["outside"][p]["kernels"], "ms": kernels["phase_ms"][p]}
             for p in ("forward", "backward")}
    rows.append(["phase (kernels)", *_kernel_cells(total["forward"]), *_kernel_cells(total["backward"])])
    return rows


def _kernel_notes(lb: LayerBreakdown) -> list[str]:
    kernels = lb.kernels
    lines = []
    for phase in ("forward", "backward"):
        named: dict[tuple[str, tuple[str, ...]], int] = {}
        for name, layers in kernels["mixed"][phase]["fits"].items():
            key = (_kernel_name(name), tuple(layers))
            named[key] = named.get(key, 0) + 1
        if named:
            listed = [f"{name}{f' ×{n}' if n > 1 else ''} ({' or '.join(layers)})"
                      for (name, layers), n in list(named.items())[:_MIXED_LISTED]]
            more = len(named) - _MIXED_LISTED
            lines.append(f"{lb.label}: mixed in {phase}: " + "; ".join(listed)
                         + (f"; and {more} more (the JSON lists them)" if more > 0 else ""))
    peak = kernels.get("peak")
    shares = [f"{row['name']} {phase[:3].replace('bac', 'bwd').replace('for', 'fwd')} "
              f"{100 * row[phase]['peak_share']:.2g} %" for row in kernels["layers"]
              for phase in ("forward", "backward") if row[phase].get("peak_share")]
    if peak and shares:
        lines.append(f"{lb.label}: share of the peak ({peak['method']}): {', '.join(shares)}")
    placed = ", ".join(f"{how} {kernels['placed_by'][how]}" for how in PLACED_BY
                       if how in kernels["placed_by"])
    lines.append(f"{lb.label}: kernels placed by {placed}")
    return lines + [f"{lb.label}: {note}" for note in kernels["notes"]]


def _kernel_name(name: str) -> str:
    """A kernel's name, demangled (a ROCm trace keeps HIP's mangled names), without its template
    and argument lists (cutlass::Kernel2<…> -> Kernel2), at most 40 characters."""
    name = demangled(name).replace("(anonymous namespace)::", "")
    head = name.split("(")[0].split("<")[0].removeprefix("void ").strip()
    head = head.rsplit("::", 1)[-1] or name
    return head if len(head) <= 40 else head[:39] + "…"


def _peak(lb: LayerBreakdown) -> list[str]:
    """The phases' share of the measured peak, where the run measured one (CPU runs) on a quiet
    machine; on a busy one no share, since the layers ran under a load the peak was not
    measured under. The theoretical peak beside it, named as such."""
    peak = lb.peak or {}
    if not peak or not lb.rows:
        return []
    theory = peak.get("theoretical")
    beside = f"; {theory['gflops']:.1f} GFLOP/s {theory['method']}" if theory else ""
    if peak.get("busy"):
        return [f"{lb.label}: no share of a peak: {peak['busy']} while the layers ran, and the "
                f"measured {peak['gflops']:.1f} GFLOP/s peak was not taken under that load{beside}"]
    shares = [f"{p} {100 * share:.0f} %" for p in ("forward", "backward")
              if (share := lb.peak_share(lb.phase_gflops(p))) is not None]
    if not shares or lb.peak_gflops is None:
        return []
    return [f"{lb.label}: of a {lb.peak_gflops:.1f} GFLOP/s measured peak ({peak.get('method')}): "
            + ", ".join(shares) + beside]


def _matched_by(a: LayerBreakdown, b: LayerBreakdown, by: str) -> str:
    return (f"{b.label} vs {a.label}: the layers are named differently; lined up by {by} "
            "(\"first = second\" names the pair)")


def _kernel_table(page: Page, lb: LayerBreakdown) -> None:
    """A GPU run's device kernels by layer, with what is mixed and how kernels were placed."""
    if not lb.kernels:
        return
    ends = frozenset({len(lb.kernels["layers"]) - 1, len(lb.kernels["layers"]) + 1})
    what = "device kernels" if lb.kernels.get("source") == "device kernels" else "CPU kernels"
    page.table(Grid(f"gapscope {what} by layer: {lb.label}", KERNEL_HEAD,
                    kernel_rows(lb.kernels), [3, 3], ends=ends))
    for note in _kernel_notes(lb):
        page.line(note)
    page.line(KERNEL_FOOTER)


def render_table(breakdowns: list[LayerBreakdown]) -> str:
    page = Page()
    for lb in breakdowns:
        if lb.rows:
            page.table(Grid(f"gapscope layers: {lb.label}", _HEAD, _breakdown_rows(lb), [2, 2, 2],
                            ends=frozenset({len(lb.rows) - 1})))
        for note in _notes(lb):
            page.line(note)
        _kernel_table(page, lb)
    if any(lb.rows for lb in breakdowns):
        page.line(UNIT_FOOTER)
    return page.text()


def render_compare_table(pairs: list[tuple[LayerBreakdown, LayerBreakdown]]) -> str:
    page = Page()
    for a, b in pairs:
        pairs, by = layer_pairs(a, b)
        if pairs:
            page.table(Grid(f"gapscope layers: {b.label} vs {a.label}", _compare_head(a, b, "\n"),
                            _compare_rows(a, b), [3, 3]))
            page.table(Grid(_work_title(a, b), _work_head(a, b, "\n"),
                            _work_rows(a, b), [2, 2, 2]))
            if by != BY_NAME:
                page.line(_matched_by(a, b, by))
        else:
            page.line(f"{b.label} vs {a.label}: {NO_LINEUP}")
        for note in _notes(a) + _notes(b):
            page.line(note)
        for lb in (a, b):
            _kernel_table(page, lb)
    page.line(UNIT_FOOTER)
    return page.text()


def _markdown(head: list[str], rows: list[list[str]]) -> list[str]:
    head = [h.replace("\n", " ") for h in head]
    return (["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
            + ["| " + " | ".join(row) + " |" for row in rows])


def render_markdown(breakdowns: list[LayerBreakdown]) -> str:
    lines = []
    for lb in breakdowns:
        lines += [f"### Layers: {lb.label}", ""]
        if lb.rows:
            lines += _markdown(_HEAD, _breakdown_rows(lb)) + [""]
        lines += [f"- {note}" for note in _notes(lb)]
        if lb.kernels:
            lines += ["", f"Kernels by layer ({KERNEL_FOOTER}):", ""]
            lines += _markdown(KERNEL_HEAD, kernel_rows(lb.kernels)) + [""]
            lines += [f"- {note}" for note in _kernel_notes(lb)]
    return "\n".join(lines + ["", UNIT_FOOTER, ""])


def render_compare_markdown(pairs: list[tuple[LayerBreakdown, LayerBreakdown]]) -> str:
    lines = []
    for a, b in pairs:
        lines += [f"### Layers: {b.label} vs {a.label}", ""]
        pairs, by = layer_pairs(a, b)
        if pairs:
            lines += _markdown(_compare_head(a, b, " "), _compare_rows(a, b)) + [""]
            lines += [f"{_work_title(a, b)}:", ""] + _markdown(_work_head(a, b, " "), _work_rows(a, b)) + [""]
            if by != BY_NAME:
                lines.append(f"- {_matched_by(a, b, by)}")
        else:
            lines.append(f"- {NO_LINEUP}")
        lines += [f"- {note}" for note in _notes(a) + _notes(b)]
    return "\n".join(lines + ["", UNIT_FOOTER, ""])
