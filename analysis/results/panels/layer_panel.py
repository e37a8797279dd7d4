"""The layers view's figures for one run or two: per layer forward and backward ms, GFLOP, GFLOP/s
and share of the two phases, lined up across two runs where their layers match, and "not
matched" where a layer has no counterpart."""
from __future__ import annotations

from gapscope.analysis.results.layers import NO_LINEUP, LayerBreakdown, LayerRow, layer_pairs, pair_name

_DIGITS = 6
NOT_MATCHED = "not matched"


def layer_panel(a: LayerBreakdown | None, b: LayerBreakdown | None = None) -> dict:
    """{"runs", "matched_by", "note", "rows", "outside", "phase", "notes", "kernels", "optimizer"}. A row per lined-up
    pair (layers.layer_pairs, in the first run's order), then one per layer without a
    counterpart, its other side None; `matched` says whether the row lines two runs up."""
    sides = [lb for lb in (a, b) if lb is not None]
    two = len(sides) == 2
    pairs, by = layer_pairs(a, b) if two else ([], None)
    rows = []
    for ra, rb in pairs:
        cells = [_side(a, ra), _side(b, rb)]
        rows.append({"name": pair_name(ra, rb), "matched": True, "sides": cells,
                     "delta_ms": {p: None if None in (cells[0][f"{p}_ms"], cells[1][f"{p}_ms"]) else
                                  round(cells[1][f"{p}_ms"] - cells[0][f"{p}_ms"], _DIGITS)
                                  for p in ("forward", "backward")}})
    lined = {id(r) for pair in pairs for r in pair}
    # Each layer no pair holds, on its own side, "not matched" on the other.
    for i, lb in enumerate(sides):
        for r in lb.rows:
            if id(r) not in lined:
                cells = [_side(lb, r) if j == i else None for j in range(len(sides))]
                rows.append({"name": r.name, "matched": False if two else None, "sides": cells,
                             **({"note": NOT_MATCHED} if two else {})})
    note = None
    if not sides or not any(lb.rows for lb in sides):
        # Each run says why it has none (no trace, compiled, no ranges in the trace).
        note = "; ".join(dict.fromkeys(n for lb in sides for n in lb.notes[:1])) or "no layers"
    elif two and not pairs:
        note = NO_LINEUP
    return {"runs": [lb.label for lb in sides], "matched_by": by,
            "note": note, "rows": rows,
            # A run without layers has no traced phases here either: null, never zeros.
            "outside": [{p: lb.shown(p, lb.outside_ms(p)) for p in ("forward", "backward")}
                        if lb.rows else None for lb in sides],
            "phase": [{p: lb.shown(p, lb.phase_ms[p]) for p in ("forward", "backward")} if lb.rows else None
                      for lb in sides],
            "notes": [f"{lb.label}: {n}" for lb in sides for n in lb.notes],
            # GPU runs: each run's device kernels by layer, as the terminal's second table.
            "kernels": [{"run": lb.label, **lb.kernels} for lb in sides if lb.kernels],
            # torch: each layer's parameter updates inside Optimizer.step, per run that shows them.
            "optimizer": [{"run": lb.label, **lb.optimizer} for lb in sides if lb.optimizer]}


def _side(lb: LayerBreakdown, r: LayerRow | None) -> dict | None:
    if r is None:
        return None
    total = lb.phase_ms["forward"] + lb.phase_ms["backward"]
    # An unmeasured phase (an inference trace's backward) is null, never a measured 0.
    return {"forward_ms": lb.shown("forward", r.forward_ms), "backward_ms": lb.shown("backward", r.backward_ms),
            "forward_gflop": r.forward_gflop, "backward_gflop": r.backward_gflop,
            "forward_gflops": _round(r.gflops("forward")), "backward_gflops": _round(r.gflops("backward")),
            # Of the traced forward and backward together: what this layer's time weighs.
            "share": round((r.forward_ms + r.backward_ms) / total, 4) if total > 0 else None,
            "fused": r.fused_text()}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, _DIGITS)
