"""The breakdown table's memory column: each phase's high-water mark and the step's peak, in MB."""
from __future__ import annotations

from gapscope.analysis.results.records import Breakdown
from gapscope.profilers.phases import PHASES

HEAD = "peak\nMB"
LEGEND = ("peak MB: the allocator's high-water mark in each phase and step, the highest over "
          "the traced steps (MB of 10^6 bytes)")


def has_memory(breakdowns: list[Breakdown]) -> bool:
    return any(b.memory is not None and b.memory.steps for b in breakdowns)


def with_peak(head: list[str], rows: list[list[str]], breakdowns: list[Breakdown],
              per_run: int = 3) -> tuple[list[str], list[list[str]], int]:
    """`head` and `rows` with a peak column after each run's `per_run` columns; returns them
    and the new number of columns a run takes."""
    new_head = head[:1]
    for i in range(len(breakdowns)):
        new_head += head[1 + per_run * i:1 + per_run * (i + 1)] + [HEAD]
    new_rows = []
    for row in rows:
        cells = row[:1]
        for i, b in enumerate(breakdowns):
            cells += row[1 + per_run * i:1 + per_run * (i + 1)] + [_peak(b, row[0])]
        new_rows.append(cells)
    return new_head, new_rows, per_run + 1


def _peak(b: Breakdown, row: str) -> str:
    memory = b.memory
    if memory is None or not memory.steps:
        return ""
    if row == "step":
        return f"{memory.peak_allocated_mb():.1f}"
    if row in PHASES:
        value = memory.phase_high_water_mb()[row]
        return "" if value is None else f"{value:.1f}"
    return ""
