"""A matrix result as a terminal table, Markdown, CSV or JSON: the blog's columns, the phase
shares and the speed ratio to the baseline row."""
from __future__ import annotations

import csv
import io
import json

from analysis.matrix_results import MatrixResult, MatrixRowResult
from analysis.renderers.fit import Grid, Page
from profilers.phases import PHASES

HEADERS = ("row", "config", "input", "NW", "SPE", "time(s)", "compile(s)", "run/base", "steps/s", "GPU(%)",
           "EC(W)", "CPU(%)", "final loss", *(f"{p}(%)" for p in PHASES), "status")
FOOTER = ("time = all steps of the run, compile and warm-up included (compile = their one-time "
          "part); run/base = row time / "
          "baseline time, as compare's ratio (> 1 slower); phase % of the steady-state step; GPU/EC n/a without NVML")


def _cells(row: MatrixRowResult) -> list[str]:
    def number(value, digits=1):
        return "n/a" if value is None else f"{value:.{digits}f}"
    shares = [number(100 * row.phase_share[p]) if row.phase_share else "" for p in PHASES]
    status = row.status if row.status == "complete" else f"{row.status}: {row.reason or ''}".strip()
    compile_s = None if row.compile_ms is None else row.compile_ms / 1000
    return [row.id, row.config, row.input, row.nw, row.spe, number(row.time_s, 2),
            number(compile_s, 2), number(row.speed_ratio, 2), number(row.steps_per_s, 1), number(row.gpu_util_percent),
            number(row.gpu_power_w), number(row.cpu_load_percent), number(row.final_loss, 4),
            *shares, status]


def render_table(result: MatrixResult) -> str:
    page = Page()
    page.table(Grid(f"gapscope matrix {result.name} (baseline {result.baseline}) on {result.device or 'n/a'}",
                    list(HEADERS), [_cells(row) for row in result.rows], [1] * (len(HEADERS) - 1)))
    page.line(FOOTER)
    return page.text()


def render_markdown(result: MatrixResult) -> str:
    lines = [f"### gapscope matrix `{result.name}` on {result.device or 'n/a'}", "",
             "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(c.replace("|", "/") for c in _cells(row)) + " |" for row in result.rows]
    return "\n".join(lines + ["", f"_{FOOTER}_", ""])


def render_csv(result: MatrixResult) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADERS)
    writer.writerows(_cells(row) for row in result.rows)
    return out.getvalue()


def render_json(result: MatrixResult) -> str:
    return json.dumps(result.to_json_dict(), indent=2)


RENDERERS = {"table": render_table, "markdown": render_markdown, "csv": render_csv,
             "json": render_json}
