"""`gapscope report`: reads runs, then writes a Markdown report, a self-contained HTML copy and
the plots as PNG and SVG files beside them."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from analysis.load import breakdown_of
from analysis.readers.run_dir import locate, read_steps_csv
from analysis.renderers import plots, report_html, report_markdown
from analysis.renderers.report_markdown import ReportContent, ReportRun
from profilers.errors import GapscopeInputError
from profilers.run_dir import MANIFEST, write_atomic

MATRIX_STATE = "matrix.json"
# A comparison table grows four columns per run: beyond this it is no longer readable.
MAX_COMPARED_RUNS = 6


@dataclass
class ReportFiles:
    markdown: Path
    html: Path
    images: list[Path]
    problems: list[ReportRun] = field(default_factory=list)  # runs that failed or did not finish

    @property
    def all(self) -> list[Path]:
        return [self.markdown, self.html, *self.images]


def expand_paths(paths: list[str | Path]) -> list[tuple[str | None, Path | None, str | None]]:
    """(label, run path, problem) per run: a matrix folder gives its rows in order, a folder of
    run directories gives each of them; anything else stands for itself."""
    runs = []
    for path in map(Path, paths):
        if not path.exists():
            raise GapscopeInputError(f"{path}: no such file or directory")
        if path.is_dir() and (path / MATRIX_STATE).exists():
            runs += _matrix_rows(path)
        elif path.is_dir() and not (path / MANIFEST).exists() and _child_runs(path):
            runs += [(None, child, None) for child in _child_runs(path)]
        else:
            runs.append((None, path, None))
    if not runs:
        raise GapscopeInputError("no runs to report on")
    return runs


def write_report(paths: list[str | Path], out: str | Path, source: str = "auto",
                 baseline: str | None = None,
                 progress: Callable[[str], None] = lambda message: None) -> ReportFiles:
    """Report on `paths` into `out` (.md; the .html and `<stem>-<plot>.png/.svg` beside it).

    baseline: label, run id or path of the run the speed ratios refer to (default the first)."""
    out = Path(out)
    if out.suffix.lower() not in (".md", ".html", ""):
        raise GapscopeInputError(f"{out}: the report is Markdown (.md) with an .html copy")
    out.parent.mkdir(parents=True, exist_ok=True)
    read = []
    for label, path, problem in expand_paths(paths):
        progress(f"reading {path or label}")
        read.append(_read_run(label, path, problem, source))
    runs = [run for run, _ in read]
    _unique_labels(runs)
    series = [steps for _, steps in read if steps is not None]
    for run, steps in read:
        if steps is not None:
            steps.label = run.label
    complete = [r for r in runs if r.breakdown is not None]
    base = _baseline_index(complete, baseline)
    content = ReportContent(title="gapscope report",
                            generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                            runs=runs, baseline=base)
    if len(complete) > 1:
        progress("comparing runs")
        _compare(content, complete, base)

    progress("plotting")
    figures = {}
    if complete:
        figures["phases"] = plots.phase_bars([r.label for r in complete], [r.breakdown for r in complete])
    if series:
        figures["steps"] = plots.step_times(series)
    if len(complete) > 1:
        figures["ratio"] = plots.speed_ratio([r.label for r in complete],
                                             [r.breakdown for r in complete], base)
    stem = out.with_suffix("")
    images, pngs = [], {}
    for role, fig in figures.items():
        png, svg = stem.with_name(f"{stem.name}-{role}.png"), stem.with_name(f"{stem.name}-{role}.svg")
        pngs[png.name] = plots.png_bytes(fig)
        png.write_bytes(pngs[png.name])
        svg.write_bytes(plots.svg_bytes(fig))
        images += [png, svg]
        content.figures[role] = png.name

    progress("writing the report")
    text = report_markdown.render(content)
    markdown_path, html_path = stem.with_suffix(".md"), stem.with_suffix(".html")
    write_atomic(markdown_path, text)
    write_atomic(html_path, report_html.render(text, pngs, content.title))
    return ReportFiles(markdown_path, html_path, images, [r for r in runs if r.breakdown is None])


def _read_run(label: str | None, path: Path | None, problem: str | None, source: str):
    if path is None:  # a matrix row that never produced a run directory
        return ReportRun(label, "-", None, None, problem), None
    found = locate(path)
    manifest = found.manifest
    label = label or _label(manifest, path)
    status = (manifest or {}).get("status")
    if manifest is not None and status != "complete":
        why = (f"failed: {manifest.get('error')}" if status == "failed"
               else f"did not finish (status {status!r}): interrupted or still running")
        return ReportRun(label, str(path), manifest, None, why), None
    breakdown = breakdown_of(path, source)
    run = ReportRun(label, str(path), manifest, breakdown)
    if found.steps_csv is None:
        return run, None
    rows = read_steps_csv(found.steps_csv)
    warmup = int((manifest or {}).get("warmup_steps", 0))
    return run, plots.StepSeries(label, [int(r["step"]) for r in rows],
                                 [float(r["step_ms"]) for r in rows], warmup,
                                 [bool(r.get("traced")) for r in rows])


def _compare(content: ReportContent, complete: list[ReportRun], base: int) -> None:
    """The compare analyzer's table and evidence, baseline first."""
    if len(complete) > MAX_COMPARED_RUNS:
        content.comparison_note = (f"{len(complete)} runs: the comparison table is left out above "
                                   f"{MAX_COMPARED_RUNS}; run `gapscope compare` on the runs of interest")
        return
    try:
        from analysis.compare import compare
        from analysis.explain import explain_run
        from analysis.renderers import compare_markdown
    except ImportError as exc:
        content.comparison_note = f"no comparison: the compare analyzer is not available ({exc})"
        return
    ordered = [complete[base]] + [r for i, r in enumerate(complete) if i != base]
    try:
        comparison = compare([explain_run(Path(r.path)) for r in ordered])
    except GapscopeInputError as exc:
        content.comparison_note = f"no comparison: {exc}"
        return
    content.comparison_markdown = compare_markdown.render(comparison)


def _label(manifest: dict | None, path: Path) -> str:
    if not manifest:
        return path.name
    parts = [manifest.get("workload"), manifest.get("framework"), manifest.get("variant")]
    return " ".join(p for p in parts if p and p not in ("default",))


def _unique_labels(runs: list[ReportRun]) -> None:
    """Two runs of the same workload, framework and variant: their ids' tails tell them apart."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.label] = counts.get(r.label, 0) + 1
    for r in runs:
        if counts[r.label] > 1 and r.path != "-":
            r.label = f"{r.label} #{Path(r.path).name.rsplit('-', 1)[-1]}"


def _baseline_index(complete: list[ReportRun], baseline: str | None) -> int:
    if baseline is None or not complete:
        return 0
    for i, r in enumerate(complete):
        if baseline in (r.label, r.path, Path(r.path).name, (r.manifest or {}).get("run_id")):
            return i
    raise GapscopeInputError(f"baseline {baseline!r} is none of the complete runs: "
                             f"{', '.join(r.label for r in complete)}")


def _matrix_rows(folder: Path) -> list[tuple[str, Path | None, str | None]]:
    try:
        state = json.loads((folder / MATRIX_STATE).read_text())
    except ValueError:
        raise GapscopeInputError(f"{folder / MATRIX_STATE}: corrupt matrix state") from None
    rows = []
    for row_id, row in state.get("rows", {}).items():
        run_dir = row.get("run_dir")
        problem = None if run_dir else f"{row.get('status')}: {row.get('reason') or ''}".strip(": ")
        rows.append((row_id, Path(run_dir) if run_dir else None, problem))
    return rows


def _child_runs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / MANIFEST).exists())
