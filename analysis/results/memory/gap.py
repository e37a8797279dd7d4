"""The memory gap between two runs, said as the time gap is: who holds more, where, by how much."""
from __future__ import annotations

from gapscope.analysis.results.memory.figures import MemoryFigures
from gapscope.analysis.results.records import Breakdown
from gapscope.profilers.phases import PHASES

# Figures compared, in the order the lead prefers them. Each is comparable between frameworks:
# changes within a step, not levels (torch's CPU levels start at the profiler, TF's at zero).
FIGURES = (
    ("forward_net_mb", "at the end of forward (activations kept for backward)"),
    ("step_rise_mb", "at the step's peak, above the step's start"),
    # RSS less the process's own after the framework's import: the model and data, apart from a
    # footprint that is library size (importing TF and Keras costs 356 MB more than torch).
    ("rss_model_mb", "for the model and data in resident memory (RSS less the framework's "
                     "footprint after import)"),
    ("rss_mb", "in resident memory (the whole process)"),
)
# Sides closer than this are one figure: no gap is said.
_SAME = 1.10


def figures_of(memory: MemoryFigures | None) -> dict[str, float]:
    """The comparable figures of one run, those it has."""
    if memory is None:
        return {}
    found = {}
    if memory.steps:
        net = memory.phase_net_mb()
        if net.get("forward", 0) > 0:
            found["forward_net_mb"] = net["forward"]
        rises = [(s.peak_allocated - s.start) / 1e6 for s in memory.steps]
        if max(rises) > 0:
            found["step_rise_mb"] = sum(rises) / len(rises)
    if memory.rss is not None:
        found["rss_mb"] = memory.rss["mean_mb"]
        if memory.rss.get("after_import_mb") is not None:
            found["rss_model_mb"] = memory.rss["mean_mb"] - memory.rss["after_import_mb"]
            found["rss_framework_mb"] = memory.rss["after_import_mb"]
    return found


def memory_gap(a: Breakdown, b: Breakdown) -> dict | None:
    """The pair's memory figures side by side and the lead line; None where the two runs share
    no memory figure."""
    fa, fb = figures_of(a.memory), figures_of(b.memory)
    shared = [(key, words) for key, words in FIGURES if key in fa and key in fb]
    if not shared:
        return None
    key, words = shared[0]
    va, vb = fa[key], fb[key]
    more, less = (b, a) if vb >= va else (a, b)
    high, low = max(va, vb), min(va, vb)
    if low > 0 and high / low < _SAME:
        line = f"{a.name} and {b.name} hold about the same {words}: {va:.1f} vs {vb:.1f} MB"
    else:
        factor = f"{high / low:.1f}x more" if low > 0 else f"{high - low:.1f} MB more"
        line = f"{more.name} holds {factor} {words}: {high:.1f} vs {low:.1f} MB"
    if key == "rss_model_mb":  # the footprint beside it, said apart: no share of the headline
        line += (f"; framework footprint apart (RSS after import, before the model): "
                 f"{fa['rss_framework_mb']:.1f} vs {fb['rss_framework_mb']:.1f} MB")
    caveats = [f"{x.name}: {note}" for x in (a, b) if x.memory is not None
               for note in x.memory.notes if note.startswith("memory: TF's")]
    phase = _PHASE_OF.get(key)
    sites = {side: _phase_sites(x.memory, phase) for side, x in (("a", a), ("b", b))} if phase else {}
    where = [f"{x.name} allocates most in {phase} at " + ", ".join(
                 f"{s['op']} ({s['bytes_per_step'] / 1e6:.1f} MB)" for s in sites[side])
             for side, x in [("a" if more is a else "b", more), ("b" if more is a else "a", less)]
             if sites.get(side)] if phase else []
    layers = _layer_gaps(a, b) if key == "forward_net_mb" else []
    apart = [g for g in layers if abs(g["delta_mb"]) >= max(0.01, 0.01 * max(g["a_mb"], g["b_mb"]))]
    if layers:  # the layers say where better than the ops do: those that keep different bytes
        where = [f"{layer['layer']}: {a.name} keeps {layer['a_mb']:.1f}, {b.name} "
                 f"{layer['b_mb']:.1f} MB" for layer in apart[:3]]
        same = [g["layer"] for g in layers if g not in apart]
        if same:
            where.append(f"the same in {', '.join(same)}")
    return {"figure": key, "a_mb": round(va, 3), "b_mb": round(vb, 3), "layers": layers,
            "ratio": round(vb / va, 4) if va > 0 else None, "line": line,
            "a": _side(a.memory), "b": _side(b.memory), "caveats": caveats,
            "sites": {side: [{"op": s["op"], "mb_per_step": round(s["bytes_per_step"] / 1e6, 3)}
                             for s in found] for side, found in sites.items()},
            "where": where}


def _layer_gaps(a: Breakdown, b: Breakdown) -> list[dict]:
    """The layers both runs name, by how far apart what they keep for backward is, largest first."""
    la = a.memory.layers if a.memory is not None else {}
    lb = b.memory.layers if b.memory is not None else {}
    shared = [name for name in la if name in lb]
    gaps = [{"layer": name, "a_mb": round(la[name] / 1e6, 3), "b_mb": round(lb[name] / 1e6, 3),
             "delta_mb": round((lb[name] - la[name]) / 1e6, 3)} for name in shared]
    return sorted(gaps, key=lambda g: -abs(g["delta_mb"]))


# The phase whose allocations a figure comes from: its top sites say where the gap is.
_PHASE_OF = {"forward_net_mb": "forward"}


def _phase_sites(memory: MemoryFigures | None, phase: str, top: int = 3) -> list[dict]:
    return [s for s in (memory.sites if memory is not None else []) if s["phase"] == phase][:top]


def _side(memory: MemoryFigures | None) -> dict | None:
    if memory is None:
        return None
    found = {k: round(v, 3) for k, v in figures_of(memory).items()}
    if memory.steps:
        found["phase_high_water_mb"] = {p: None if v is None else round(v, 3)
                                        for p, v in memory.phase_high_water_mb().items()}
        found["phase_net_mb"] = {p: round(memory.phase_net_mb()[p], 3) for p in PHASES}
    return found


def memory_lines(comparison) -> list[str]:
    """The lead of `compare --memory`: each pair's memory gap, and what keeps a side from one."""
    lines = []
    for run, pair in zip(comparison.runs[1:], comparison.pairs):
        gap = memory_gap(comparison.runs[0].breakdown, run.breakdown)
        if gap is None:
            lines.append(f"{pair.a_label} vs {pair.b_label}: no memory figure both runs have "
                         "(runs recorded before memory capture, or without a trace)")
            continue
        lines.append(gap["line"])
        lines += gap["where"] + gap["caveats"]
    return lines
