"""A matrix result as a terminal table, Markdown, CSV or JSON: the blog's columns, the phase
shares and the speed ratio to the baseline row."""
from __future__ import annotations

import csv
import io

from rich.console import Console
from rich.table import Table

from analysis.matrix_results import MatrixResult, MatrixRowResult
from profilers import strict_json
from profilers.phases import PHASES

HEADERS = ("row", "config", "input", "NW", "SPE", "time(s)", "compile(s)", "ratio", "steps/s", "GPU(%)",
           "EC(W)", "CPU(%)", "final loss", *(f"{p}(%)" for p in PHASES), "status")
FOOTER = ("time = all steps of the run, compile and warm-up included (compile = their one-time "
          "part); ratio = baseline time / "
          "row time (> 1 faster); phase % of the steady-state step; GPU/EC n/a without NVML")


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
    table = Table(title=f"gapscope matrix {result.name} (baseline {result.baseline}) "
                        f"on {result.device or 'n/a'}", caption=FOOTER, caption_justify="left")
    for header in HEADERS:
        table.add_column(header, overflow="fold")
    for row in result.rows:
        table.add_row(*_cells(row))
    console = Console(file=io.StringIO(), width=240, record=True)
    console.print(table)
    return console.export_text()


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
    return strict_json.dumps(result.to_json_dict(), indent=2)


RENDERERS = {"table": render_table, "markdown": render_markdown, "csv": render_csv,
             "json": render_json}
