"""The report's memory section: the allocation curve plot and a table of peak and net change per phase."""
from __future__ import annotations

from gapscope.profilers.phases import PHASES

ROLE = "memory"  # the figure's role: its file is <report>-memory.png


def memory_section(content) -> list[str]:
    """Markdown lines for the runs with memory figures (none: no section)."""
    runs = [r for r in content.complete if r.breakdown.memory is not None and r.breakdown.memory.steps]
    if not runs:
        return []
    lines = ["## Where the memory goes", ""]
    name = content.figures.get(ROLE)
    if name:
        lines += [f"![Allocated memory through one traced step, over its phases]({name})", ""]
    head = ["run", "peak MB"] + [f"{p} high-water / net MB" for p in PHASES]
    rows = []
    for run in runs:
        memory = run.breakdown.memory
        high, net = memory.phase_high_water_mb(), memory.phase_net_mb()
        rows.append([run.label, f"{memory.peak_allocated_mb():.1f}"]
                    + [("–" if high[p] is None else f"{high[p]:.1f}") + f" / {net[p]:+.2f}" for p in PHASES])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", "Allocator levels over the traced steps (MB of 10^6 bytes): each phase's high-water "
              "mark, the highest over the traced steps, and its net change a step on average "
              "(forward's is the activations kept for backward). The runs' notes say creep, "
              "allocation sites and what each allocator leaves out.", ""]
    return lines
