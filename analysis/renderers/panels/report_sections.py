"""The report's layers and compile sections as Markdown, from the panels' figures
(analysis/results/panels), the same the TensorBoard tab draws."""
from __future__ import annotations

from gapscope.analysis.renderers.layers_render import KERNEL_FOOTER, KERNEL_HEAD, kernel_rows, optimizer_text

LAYERS_FOOTER = ("ms per traced step (profiler cost inside); share: of the traced forward and "
                 "backward; GFLOP per step from the layer's shapes, or torch's FlopCounterMode for your own "
                 "model (docs/reference.md, Layers)")


KERNEL_HEAD_FLAT = [h.replace("\n", " ") for h in KERNEL_HEAD]


def _num(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _share(value) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
            + ["| " + " | ".join(row) + " |" for row in rows] + [""])


def layers_markdown(runs: list[dict], pairs: list[dict], figure: str | None) -> list[str]:
    """`runs`: one run's layer panel each; `pairs`: two runs' lined up. Empty where no run
    has layers."""
    if not any(p["rows"] or p.get("kernels") for p in runs):
        return []
    lines = ["## Layers", ""]
    if figure:
        lines += [f"![Forward and backward ms per traced step of each layer, per run]({figure})", ""]
    for p in runs:
        lines += [f"### {p['runs'][0]}", ""]
        if not p["rows"]:
            lines += [f"_{p['note']}_", ""]
        for kernels in p.get("kernels") or []:
            lines += [f"Kernels by layer ({KERNEL_FOOTER}):", ""] + _table(KERNEL_HEAD_FLAT, kernel_rows(kernels))
            lines += [f"- {note}" for note in kernels["notes"]] + ([""] if kernels["notes"] else [])
        if not p["rows"]:
            continue
        rows = [[r["name"], _num(c["forward_ms"]), _num(c["backward_ms"]), _num(c["forward_gflop"], 4),
                 _num(c["backward_gflop"], 4), _num(c["forward_gflops"], 1),
                 _num(c["backward_gflops"], 1), _share(c["share"]), c["fused"] or "-"]
                for r in p["rows"] for c in r["sides"]]
        rows.append(["outside layers", _num(p["outside"][0]["forward"]),
                     _num(p["outside"][0]["backward"]), "", "", "", "", "", ""])
        lines += _table(["layer", "fwd ms", "bwd ms", "fwd GFLOP", "bwd GFLOP", "fwd GFLOP/s",
                         "bwd GFLOP/s", "share", "fused ops"], rows)
        lines += [f"- {optimizer_text(o['run'], o)}" for o in p.get("optimizer") or []]
        lines += [f"- {note}" for note in p["notes"]] + ([""] if p["notes"] or p.get("optimizer") else [])
    for p in pairs:
        a, b = p["runs"]
        lines += [f"### {b} against {a}", ""]
        if p["note"]:
            lines += [f"_{p['note']}_", ""]
        if not p["matched_by"]:
            continue
        lines += [f"Layers matched by {p['matched_by']}; a layer only one run has reads "
                  "\"not matched\" on the other side.", ""]
        rows = []
        for r in p["rows"]:
            sa, sb = r["sides"]
            cell = (lambda side, key: _num(side[key]) if side else "not matched")
            delta = r.get("delta_ms") or {}
            rows.append([r["name"], cell(sa, "forward_ms"), cell(sb, "forward_ms"),
                         _signed(delta.get("forward")), cell(sa, "backward_ms"),
                         cell(sb, "backward_ms"), _signed(delta.get("backward"))])
        lines += _table(["layer", f"{a} fwd ms", f"{b} fwd ms", "Δ fwd ms", f"{a} bwd ms",
                         f"{b} bwd ms", "Δ bwd ms"], rows)
    return lines + [LAYERS_FOOTER, ""]


def compile_markdown(runs: list[tuple[str, dict]], amortisations: list[str]) -> list[str]:
    """`runs`: (label, compile panel) of the runs with a compile record; `amortisations`: each
    compared pair's line where one side compiles. Empty where neither is."""
    recorded = [(label, c) for label, c in runs if not c.get("note")]
    if not recorded and not amortisations:
        return []
    lines = ["## Compile", ""]
    lines += [f"- {line}" for line in amortisations] + ([""] if amortisations else [])
    for label, c in recorded:
        lines += [f"### {label}", "", c["line"], ""]
        stages = [[s["name"], _num(s["ms"]), _share(s["share"])] for s in c["stages"]]
        if c["unattributed_ms"] is not None:
            stages.append(["unattributed", _num(c["unattributed_ms"]),
                           _share(c["unattributed_ms"] / c["measured_ms"] if c["measured_ms"] else None)])
        stages.append(["measured (warm-up beyond a steady step)", _num(c["measured_ms"]), ""])
        lines += _table(["stage", "ms (once)", "of measured"], stages)
        if c["graph_breaks"]:
            lines += [f"Graph breaks ({len(c['graph_breaks'])}):", ""]
            lines += _table(["reason", "place", "logged", "first step"],
                            [[b["reason"], b["place"], str(b["times_logged"]), str(b["first_step"])]
                             for b in c["graph_breaks"]])
        if c["recompiles"]:
            lines += [f"Recompiles ({len(c['recompiles'])}):", ""]
            lines += _table(["failed guard", "function", "place", "step"],
                            [[r["guard"], r["function"] or "", r["place"], str(r["step"])]
                             for r in c["recompiles"]])
        if c["retraces"]:
            lines += [f"Retraces ({len(c['retraces'])}):", ""]
            lines += _table(["function", "step", "reason"],
                            [[r["function"], str(r["step"]), r["reason"]] for r in c["retraces"]])
        if c.get("steady_events"):
            lines += [f"Steps left out of the steady state, compiling ({len(c['steady_events'])}):", ""]
            lines += _table(["step", "what compiled"],
                            [[str(e["step"]), e["what"]] for e in c["steady_events"]])
        lines += [f"- {line}" for line in c["unseen"]] + ([""] if c["unseen"] else [])
    return lines


def _signed(value) -> str:
    return "" if value is None else f"{value:+.3f}"
