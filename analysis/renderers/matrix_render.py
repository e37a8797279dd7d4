"""A matrix result as a terminal table, Markdown, CSV or JSON: the blog's columns, the phase
shares and the step-time ratio to the baseline row (row / baseline), with its interval."""
from __future__ import annotations

import csv
import io

from gapscope.analysis.results.matrix_results import MatrixResult, MatrixRowResult
from gapscope.analysis.renderers.columns import ratio_interval
from gapscope.analysis.renderers.fit import Grid, Page, blocks
from gapscope.profilers import strict_json
from gapscope.profilers.phases import PHASES

RATIO_HEADER = "run/base"
HEADERS = ("row", "config", "input", "NW", "SPE", "time(s)", "compile(s)", RATIO_HEADER, "steps/s",
           "GPU(%)", "EC(W)", "CPU(%)", "final loss", *(f"{p}(%)" for p in PHASES), "status")


def footer(result: MatrixResult) -> str:
    return ("time = all steps of the run, compile and warm-up included (compile = their one-time "
            f"part); {_ratio_footer(result)}; phase % of the steady-state step; GPU/EC n/a "
            "without NVML")


def _ratio_footer(result: MatrixResult) -> str:
    if result.repeats > 1:
        noise = (f"[95 % t-interval over {result.repeats} interleaved repeats, fresh processes]; "
                 "other figures are means over the repeats")
    else:
        noise = "one run per row: no interval (--repeats N gives one)"
    return f"run/base = row / baseline steady step time from unprofiled steps (> 1 slower) {noise}"


def _title(result: MatrixResult) -> str:
    return (f"gapscope matrix {result.name} (baseline {result.baseline}; ratio = "
            f"{result.ratio}) on {result.device or 'n/a'}")


def _cells(row: MatrixRowResult) -> list[str]:
    def number(value, digits=1):
        return "n/a" if value is None else f"{value:.{digits}f}"
    shares = [number(100 * row.phase_share[p]) if row.phase_share else "" for p in PHASES]
    status = row.status if row.status == "complete" else f"{row.status}: {row.reason or ''}".strip()
    compile_s = None if row.compile_ms is None else row.compile_ms / 1000
    ratio = "n/a" if row.step_ratio is None else ratio_interval(row.step_ratio, row.step_ratio_ci95)
    return [row.id, row.config, row.input, row.nw, row.spe, number(row.time_s, 2),
            number(compile_s, 2), ratio, number(row.steps_per_s, 1), number(row.gpu_util_percent),
            number(row.gpu_power_w), number(row.cpu_load_percent), number(row.final_loss, 4),
            *shares, status]


# The narrow summary's columns, picked from HEADERS: who, how fast against the baseline, where
# the time goes, and whether the row ran.
SUMMARY = ("row", "config", RATIO_HEADER, "steps/s", "status")


def render_table(result: MatrixResult) -> str:
    """The whole table where it fits the width (or with --wide); else a narrow summary, one
    line a row, rather than every row spread over column blocks."""
    page = Page()
    grid = Grid(_title(result), list(HEADERS), [_cells(row) for row in result.rows],
                [1] * (len(HEADERS) - 1))
    if len(blocks(grid, page.width)) == 1:
        page.table(grid)
        page.line(footer(result))
        return page.text()
    picked = [HEADERS.index(h) for h in SUMMARY]
    rows = [[cells[i] for i in picked] + [_largest_phase(row)]
            for row, cells in zip(result.rows, grid.rows)]
    page.table(Grid(_title(result), list(SUMMARY) + ["largest phase"], rows, [1] * len(SUMMARY)))
    page.line(f"{_ratio_footer(result)}; largest phase: % of the steady-state step")
    page.line("every column (time, compile, loads, loss, phase shares): --wide, or --format "
              "markdown, csv or json")
    return page.text()


def _largest_phase(row: MatrixRowResult) -> str:
    if not row.phase_share:
        return ""
    phase = max(PHASES, key=lambda p: row.phase_share[p])
    return f"{phase} {100 * row.phase_share[phase]:.0f} %"


def render_markdown(result: MatrixResult) -> str:
    lines = [f"### {_title(result)}", "",
             "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in _cells(row)) + " |" for row in result.rows]
    return "\n".join(lines + ["", f"_{footer(result)}_", ""])


def render_csv(result: MatrixResult) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADERS)
    writer.writerows(_cells(row) for row in result.rows)
    return out.getvalue()


def render_json(result: MatrixResult) -> str:
    return strict_json.dumps(result.to_json_dict(), indent=2)

