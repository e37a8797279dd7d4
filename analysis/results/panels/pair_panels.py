"""Each compared pair's layers and compile views: the two runs' layers lined up, each side's
compile record, and where compiling pays."""
from __future__ import annotations

from gapscope.analysis.results.compare import Comparison
from gapscope.analysis.results.evidence.builders import EvidenceKind
from gapscope.analysis.results.panels.compile_panel import compile_panel, pair_compile_panel
from gapscope.analysis.results.panels.layer_panel import layer_panel


def pair_panels(comparison: Comparison) -> list[dict]:
    """One entry per pair (comparisons[] order): {"layers", "compile": {"sides", "amortisation"}}."""
    base = comparison.runs[0]
    found = []
    for run, pair in zip(comparison.runs[1:], comparison.pairs):
        evidence = next((e for e in pair.evidence if e.kind == EvidenceKind.COMPILE), None)
        pays = evidence.a.get("amortisation") if evidence is not None else None
        found.append({"layers": layer_panel(base.layers, run.layers),
                      "compile": {"sides": [compile_panel(r.breakdown.compile_why) for r in (base, run)],
                                  "amortisation": pair_compile_panel(pays)}})
    return found
