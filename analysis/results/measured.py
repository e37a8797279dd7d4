"""One A/B folder, one comparison: its repeats' step times with the evidence of one traced repeat a configuration, for every view alike."""
from __future__ import annotations

from pathlib import Path

from gapscope.analysis.model.run import load_measurement
from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.compare import Comparison, compare
from gapscope.analysis.results.explain import explain
from gapscope.profilers.errors import GapscopeInputError


def compare_measurement(folder: str | Path) -> Comparison:
    """The comparison `gapscope compare FOLDER` prints, which the report and the TensorBoard tab
    show too: an A/B folder read as ten unrelated runs gave three answers to one measurement."""
    evidence, repeats, left_out = _measured(load_measurement(folder))
    comparison = compare([explain(r) for r in evidence], repeats)
    comparison.warnings += left_out
    return comparison


def _measured(per_config):
    """From an A/B folder's runs: the run of each configuration that gives the evidence, the
    breakdowns of the repeats, and a warning per repeat left out. A repeat that cannot be
    analysed (no steady steps, an unreadable trace) takes its pair with it, not the whole
    measurement: pairs ran side by side, so both sides keep the same repeats."""
    left_out, kept = [], []
    for i in range(len(per_config[0])):
        try:
            kept.append((i, [breakdown(config_runs[i]) for config_runs in per_config]))
        except GapscopeInputError as exc:
            left_out.append(f"repeat {i + 1} left out (every configuration's): {exc}")
    if not kept:
        raise GapscopeInputError(f"no repeat of the measurement could be analysed: {left_out[0]}")
    first = kept[0][0]
    sides = zip(*(breakdowns for _, breakdowns in kept))
    return [config_runs[first] for config_runs in per_config], [list(s) for s in sides], left_out
