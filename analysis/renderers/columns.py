"""What a breakdown table shows, shared by the table, Markdown and CSV renderers."""
from __future__ import annotations

from analysis.results import Breakdown
from profilers.phases import PHASES

UNIT_FOOTER = ("ms per steady-state step (mean); % of the step; phases add up to the step; "
               "compile = one-time warm-up cost, outside the steps")


def run_label(b: Breakdown) -> str:
    parts = [b.framework or "?", b.variant if b.variant not in (None, "default") else None]
    return " ".join(p for p in parts if p) + f" ({b.source})"


def phase_rows(b: Breakdown) -> list[tuple[str, float, float]]:
    """(phase, ms, share) for the five phases, then the whole step, as the JSON contract has them."""
    data = b.to_json_dict()
    rows = [(p, data["phases"][p]["ms"], data["phases"][p]["share"]) for p in PHASES]
    rows.append(("step", data["step_ms"]["mean"], 1.0))
    return rows


def source_mark(b: Breakdown, phase: str) -> str:
    """A short flag beside a phase whose time was inferred or not found at all."""
    source = b.phase_sources.get(phase)
    return {"inferred": " ~", "not identified": " ?", "not applicable": " -"}.get(source, "")


def side_by_side(breakdowns: list[Breakdown]) -> list[tuple[str, list[str]]]:
    """Rows of (phase, [ms, %, ms, %, ...]) with one ms/% pair per run."""
    per_run = [phase_rows(b) for b in breakdowns]
    rows = []
    for i, (phase, _, _) in enumerate(per_run[0]):
        cells = []
        for b, run_rows in zip(breakdowns, per_run):
            _, ms, share = run_rows[i]
            cells += [f"{ms:.3f}{source_mark(b, phase)}", f"{100 * share:.1f}"]
        rows.append((phase, cells))
    compile_cells = [c for b in breakdowns for c in (format_ms(b.compile_ms, 1), "")]
    rows.append(("compile (once)", compile_cells))
    return rows


def format_ms(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
