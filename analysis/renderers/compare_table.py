"""A comparison for the terminal (rich): phase gap table, per-run evidence figures, evidence lines,
each table side by side where it fits the width, else in blocks of runs."""
from __future__ import annotations

from gapscope.analysis.results.compare import Comparison
from gapscope.analysis.renderers import compare_columns as cols
from gapscope.analysis.renderers.fit import Grid, Page


# The short view: per pair, the phases and the causes that carry most of the gap.
_TOP = 3


def render(comparison: Comparison, verbose: bool = False) -> str:
    """The short verdict by default (the gap, its top phases and causes, suggestions,
    warnings); `verbose` adds the phase table, the evidence tables and the runs' notes."""
    if not verbose:
        return _short(comparison)
    others = len(comparison.runs) - 1
    page = Page()
    for warning in comparison.headline:
        page.line(f"warning: {warning}")
    for line in cols.verdict_lines(comparison):
        page.line(line)
    rows = cols.phase_rows(comparison)
    page.table(Grid("gapscope compare: where the step-time gap goes", cols.header(comparison, "\n"),
                    rows, [4] * others, keys=2,
                    ends=frozenset(i for i, row in enumerate(rows) if row[0] in ("other", "step"))))
    page.line(cols.UNIT_FOOTER)
    head, rows = cols.phase_device_rows(comparison, "\n")
    page.table(Grid(cols.DEVICE_TITLE, head, rows, [2] * (others + 1)))
    page.line(cols.DEVICE_FOOTER)
    head, rows = cols.fact_rows(comparison)
    page.table(Grid(cols.FACTS_TITLE, head, rows, [1] * (others + 1)))
    for line in cols.evidence_lines(comparison):
        page.line(line)
    for warning in comparison.warnings:
        if warning not in comparison.headline:
            page.line(f"warning: {warning}")
    for run in comparison.runs:
        # Once each: a note of both (device work after the host's window) is said by both.
        for note in dict.fromkeys(run.breakdown.notes + run.kernels.notes):
            if note.removeprefix("warning: ") not in run.breakdown.reliability_warnings:
                page.line(f"{run.breakdown.name}: {note}")  # those are among the warnings above
    return page.text()


def _short(comparison: Comparison) -> str:
    page = Page()
    for warning in comparison.headline:
        page.line(f"warning: {warning}")
    verdicts = cols.verdict_lines(comparison)
    for line in verdicts[:-1]:  # the interval method's line comes once, below
        page.line(line, hang=4 if line.startswith("  ") else 2)
    for pair in comparison.pairs:
        top = sorted(pair.phases, key=lambda g: -abs(g.delta_ms))[:_TOP]
        page.line(f"{pair.b_label} vs {pair.a_label}, top phases: " + "; ".join(
            f"{g.phase} {cols.delta(g.delta_ms, g.delta_ci95)} ms"
            + ("" if g.within_noise or pair.within_noise or g.share_of_gap is None
               else f" ({100 * g.share_of_gap:.0f} %)") for g in top))
        # A busy machine's causes are as distorted as its gap: the first only (--verbose: all).
        shown = pair.evidence[:1 if pair.inconclusive else _TOP]
        more = len(pair.evidence) - len(shown) if pair.inconclusive else 0
        page.line(f"  causes ({cols.TRACED}" + (f"; {more} more with --verbose" if more else "")
                  + "):", hang=4)
        for e in shown:
            page.line(f"  - {cols.evidence_text.sentence(e, pair)}", hang=4)
        for line in cols.lead_lines(pair):
            page.line(f"  - {line}", hang=4)
    page.line(verdicts[-1])
    for warning in comparison.warnings:
        if warning not in comparison.headline:
            page.line(f"warning: {warning}")
    page.line("phase table, host vs device, evidence per run and notes: --verbose")
    return page.text()
