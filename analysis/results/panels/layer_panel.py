"""The layers view's figures for one run or two: per layer forward and backward ms, GFLOP, GFLOP/s
and share of the two phases, lined up across two runs where their layers match, and "not
matched" where a layer has no counterpart."""
from __future__ import annotations

from analysis.results.layers import LayerBreakdown, LayerRow, matched_layers

_DIGITS = 6
NOT_MATCHED = "not matched"
NO_LINEUP = ("no layers to line up (neither the same names nor layers in both traces)")


def layer_panel(a: LayerBreakdown | None, b: LayerBreakdown | None = None) -> dict:
    """{"runs", "matched_by", "note", "rows", "outside", "phase", "notes"}. A row per layer of
    either run (the first run's order, then the second's own), each side its figures or None
    where that run has no such layer; `matched` says whether the row lines two runs up."""
    sides = [lb for lb in (a, b) if lb is not None]
    two = len(sides) == 2
    matched = set(matched_layers(a, b)) if two else set()
    names = [r.name for r in sides[0].rows] if sides else []
    if two:
        names += [r.name for r in b.rows if r.name not in names]
    rows = []
    for name in names:
        cells = [_side(lb, lb.row(name)) for lb in sides]
        row = {"name": name, "matched": name in matched if two else None, "sides": cells}
        if two and name in matched:
            row["delta_ms"] = {p: round(cells[1][f"{p}_ms"] - cells[0][f"{p}_ms"], _DIGITS)
                               for p in ("forward", "backward")}
        elif two:
            row["note"] = NOT_MATCHED
        rows.append(row)
    note = None
    if not sides or not any(lb.rows for lb in sides):
        # Each run says why it has none (no trace, compiled, no ranges in the trace).
        note = "; ".join(n for lb in sides for n in lb.notes[:1]) or "no layers"
    elif two and not matched:
        note = NO_LINEUP
    return {"runs": [lb.label for lb in sides], "matched_by": "name" if matched else None,
            "note": note, "rows": rows,
            # A run without layers has no traced phases here either: null, never zeros.
            "outside": [{p: lb.outside_ms(p) for p in ("forward", "backward")} if lb.rows else None
                        for lb in sides],
            "phase": [{p: lb.phase_ms[p] for p in ("forward", "backward")} if lb.rows else None
                      for lb in sides],
            "notes": [f"{lb.label}: {n}" for lb in sides for n in lb.notes]}


def _side(lb: LayerBreakdown, r: LayerRow | None) -> dict | None:
    if r is None:
        return None
    total = lb.phase_ms["forward"] + lb.phase_ms["backward"]
    return {"forward_ms": r.forward_ms, "backward_ms": r.backward_ms,
            "forward_gflop": r.forward_gflop, "backward_gflop": r.backward_gflop,
            "forward_gflops": _round(r.gflops("forward")), "backward_gflops": _round(r.gflops("backward")),
            # Of the traced forward and backward together: what this layer's time weighs.
            "share": round((r.forward_ms + r.backward_ms) / total, 4) if total > 0 else None,
            "fused": r.fused_text()}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, _DIGITS)
