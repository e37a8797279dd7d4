"""What a breakdown table shows, shared by the table, Markdown and CSV renderers."""
from __future__ import annotations

from analysis.phase_rules import PhaseOrigin
from analysis.results import Breakdown, PhaseSource
from profilers.phases import PHASES

ORIGIN_MARKS = {PhaseOrigin.INFERRED: "~", PhaseOrigin.MISSING: "?", PhaseOrigin.NOT_APPLICABLE: "-"}
ORIGIN_LEGEND = ("~ inferred, ? not identified in the trace (counted in other), "
                 "- not applicable (inference)")


def unit_footer(breakdowns: list[Breakdown]) -> str:
    """What the figures are; says so where a step time carries the profiler's cost."""
    steps = ("from unprofiled steps" if all(b.unprofiled for b in breakdowns)
             else "from unprofiled steps where a run has them, else traced ('traced': profiler cost inside)")
    return (f"ms per steady-state step (mean, ± half its 95 % interval), {steps}; "
            "% of the step; phases add up to the step; compile = one-time warm-up cost. "
            "Phase source: T timers, C trace with the profiler's cost taken out, "
            "R trace as recorded (profiler cost inside)")


def origin_legend(breakdowns: list[Breakdown]) -> str | None:
    marked = any(o in ORIGIN_MARKS for b in breakdowns for o in b.phase_sources.values())
    return ORIGIN_LEGEND if marked else None
SOURCE_MARKS = {PhaseSource.TIMERS: "T", PhaseSource.COMPENSATED: "C", PhaseSource.RAW: "R"}


def phase_rows(b: Breakdown) -> list[tuple[str, float, float]]:
    """(phase, ms, share) for the five phases, then the whole step, as the JSON contract has them."""
    data = b.to_json_dict()
    rows = [(p, data["phases"][p]["ms"], data["phases"][p]["share"]) for p in PHASES]
    rows.append(("step", data["step_ms"]["mean"], 1.0))
    return rows


def origin_mark(b: Breakdown, phase: str) -> str:
    """A short flag beside a phase whose time was inferred or not found at all."""
    return ORIGIN_MARKS.get(b.phase_sources.get(phase), "")


def plus_minus(value: float, interval) -> str:
    """'12.345 ±0.210': the half-width of the interval around the estimate."""
    if interval is None:
        return f"{value:.3f}"
    half = max(value - interval[0], interval[1] - value)
    return f"{value:.3f} ±{half:.3f}"


def side_by_side(breakdowns: list[Breakdown]) -> list[tuple[str, list[str]]]:
    """Rows of (phase, [ms ± ci, %, source, ...]) with one triple per run."""
    per_run = [phase_rows(b) for b in breakdowns]
    rows = []
    for i, (phase, _, _) in enumerate(per_run[0]):
        cells = []
        for b, run_rows in zip(breakdowns, per_run):
            _, ms, share = run_rows[i]
            if phase == "step":
                cells += [plus_minus(ms, b.step_ci95), f"{100 * share:.1f}",
                          "unprof." if b.unprofiled else "traced"]
            else:
                figure = b.phases[phase]
                cells += [plus_minus(ms, figure.ci95), f"{100 * share:.1f}",
                          SOURCE_MARKS[figure.source] + origin_mark(b, phase)]
        rows.append((phase, cells))
    compile_cells = [c for b in breakdowns for c in (format_ms(b.compile_ms, 1), "", "")]
    rows.append(("compile (once)", compile_cells))
    return rows


def format_ms(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
