"""`gapscope report`: reads runs, then writes a Markdown report, a self-contained HTML copy and
the plots as PNG and SVG files beside them."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.distributed_breakdown import job_breakdown
from gapscope.analysis.model.job import is_job, load_job
from gapscope.analysis.model.locate import RunPlace
from gapscope.analysis.readers.run_dir import find_files
from gapscope.analysis.renderers import plots, report_html, report_markdown
from gapscope.analysis.renderers.memory import report_section, timeline_plot
from gapscope.analysis.report_views import report_views
from gapscope.analysis.renderers.report_markdown import ReportContent, ReportRun
from gapscope.analysis.model.run import (RunEntry, Runs, expand_runs, is_measurement, repeats_by_name, run_label,
                                unfinished, unique_labels)
from gapscope.profilers.environment import threads_of
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.run_dir import ensure_out_dir, write_atomic

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


def write_report(paths: list[str | Path], out: str | Path, source: str = "auto",
                 baseline: str | None = None,
                 progress: Callable[[str], None] = lambda message: None) -> ReportFiles:
    """Report on `paths` into `out` (.md; the .html and `<stem>-<plot>.png/.svg` beside it).

    baseline: label, run id or path of the run the speed ratios refer to (default the first)."""
    out = Path(out)
    if out.suffix.lower() not in (".md", ".html", ""):
        raise GapscopeInputError(f"{out}: the report is Markdown (.md) with an .html copy")
    ensure_out_dir(out.parent)
    # One A/B folder is one comparison, the CLI's: its configurations, its first as baseline.
    measurement = paths[0] if len(paths) == 1 and is_measurement(paths[0]) else None
    configs = {name: f"{config} #{i}" for name, (config, i) in
               (repeats_by_name(measurement) if measurement else {}).items()}
    read, loaded_runs, entries = [], Runs(), expand_runs(paths)
    for entry in entries:
        entry.label = entry.label or configs.get(entry.path.name)
    jobs, job_problems = [], []
    for entry in entries:
        progress(f"reading {entry.path or entry.label}")
        if entry.path is not None and is_job(entry.place):
            try:
                jobs.append(job_breakdown(load_job(entry.place), source))
            except GapscopeInputError as exc:
                if len(entries) == 1:
                    raise
                job_problems.append(ReportRun(entry.path.name, str(entry.path), None, None, str(exc)))
            continue
        read.append(_read_run(entry, source, loaded_runs, alone=len(entries) == 1))
    read += [(problem, None, None) for problem in job_problems]
    runs = [run for run, _, _ in read]
    loaded = {id(run): source_run for run, _, source_run in read}
    for run, label in zip(runs, unique_labels([r.label for r in runs], [r.path for r in runs])):
        run.label = label
    series = [steps for _, steps, _ in read if steps is not None]
    for run, steps, _ in read:
        if steps is not None:
            steps.label = run.label
    complete = [r for r in runs if r.breakdown is not None]
    base = _baseline_index(complete, baseline or (measurement and next(iter(configs.values()))))
    content = ReportContent(title="gapscope report",
                            generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                            runs=runs, baseline=base)
    content.jobs_markdown = _jobs_markdown(jobs, complete, [loaded[id(r)] for r in complete])
    comparison = None
    if measurement:
        progress("comparing the configurations")
        comparison = _compare_measurement(content, measurement)
    elif len(complete) > 1:
        progress("comparing runs")
        comparison = _compare(content, [loaded[id(r)] for r in complete], complete, base)
    views = report_views(complete, [loaded[id(r)] for r in complete], comparison)

    progress("plotting")
    figures = {}
    if complete:
        figures["phases"] = plots.phase_bars([r.label for r in complete], [r.breakdown for r in complete])
    if series:
        figures["steps"] = plots.step_times(series)
    curves = timeline_plot.with_curves([r.label for r in complete], [r.breakdown for r in complete])
    if curves:
        figures[report_section.ROLE] = timeline_plot.memory_timeline(curves)
    if len(complete) > 1:
        figures["ratio"] = plots.speed_ratio([r.label for r in complete],
                                             [r.breakdown for r in complete], base)
    if views.layers_figure is not None:
        figures["layers"] = views.layers_figure
    stem = out.with_suffix("")
    images, pngs = [], {}
    for role, fig in figures.items():
        png, svg = stem.with_name(f"{stem.name}-{role}.png"), stem.with_name(f"{stem.name}-{role}.svg")
        pngs[png.name] = plots.png_bytes(fig)
        png.write_bytes(pngs[png.name])
        svg.write_bytes(plots.svg_bytes(fig))
        images += [png, svg]
        content.figures[role] = png.name
    content.views_markdown = views.markdown(content.figures.get("layers"))

    progress("writing the report")
    text = report_markdown.render(content)
    markdown_path, html_path = stem.with_suffix(".md"), stem.with_suffix(".html")
    write_atomic(markdown_path, text)
    write_atomic(html_path, report_html.render(text, pngs, content.title))
    return ReportFiles(markdown_path, html_path, images, [r for r in runs if r.breakdown is None])


def _jobs_markdown(jobs: list, complete: list[ReportRun], loaded: list) -> list[str]:
    """Each job's per-rank tables, and its scaling against the first complete one-process run
    of the same workload."""
    from gapscope.analysis.model.job import batch_size
    from gapscope.analysis.renderers import job_render, scaling_render
    from gapscope.analysis.results.scaling import job_side, run_side, scaling
    texts = []
    for jb in jobs:
        text = job_render.render_markdown([jb])
        base = next((i for i, r in enumerate(complete)
                     if r.breakdown.workload == jb.ranks[0].workload), None)
        if base is not None:
            run = loaded[base]
            job_batch = (jb.samples_per_step // jb.world_size) if jb.samples_per_step else None
            result = scaling(run_side(complete[base].breakdown, batch_size(run),
                                      threads_of(run.manifest)),
                             job_side(jb, job_batch, jb.threads))
            text += f"\n#### Scaling against {complete[base].label}\n\n" + scaling_render.render_markdown(result)
        texts.append(text)
    return texts


def _read_run(entry: RunEntry, source: str, runs: Runs, alone: bool):
    if entry.path is None:  # a matrix row that never produced a run directory
        return ReportRun(entry.label, "-", None, None, entry.problem), None, None
    try:
        found = entry.place.readable() if isinstance(entry.place, RunPlace) else find_files(entry.path)
    except GapscopeInputError as exc:
        if alone:  # a report of nothing but this mistake is no report: one line, as breakdown
            raise
        # listed with the others, as a folder breakdown does
        return ReportRun(entry.label or entry.path.name, str(entry.path), None, None, str(exc)), None, None
    label = entry.label or run_label(found.manifest, entry.path)
    problem = unfinished(found.manifest)
    if problem:
        return ReportRun(label, str(entry.path), found.manifest, None, problem), None, None
    run = runs.load(entry.place, label)
    report_run = ReportRun(label, str(entry.path), found.manifest, breakdown(run, source))
    if run.rows is None:
        return report_run, None, run
    return report_run, plots.StepSeries(label, [int(r["step"]) for r in run.rows],
                                        [float(r["step_ms"]) for r in run.rows], run.warmup_steps,
                                        [bool(r.get("traced")) for r in run.rows]), run


def _compare(content: ReportContent, loaded: list, complete: list[ReportRun], base: int):
    """The compare analyzer's table and evidence, baseline first; the comparison, or None."""
    if len(complete) > MAX_COMPARED_RUNS:
        content.comparison_note = (f"{len(complete)} runs: the comparison table is left out above "
                                   f"{MAX_COMPARED_RUNS}; run `gapscope compare` on the runs of interest")
        return
    try:
        from gapscope.analysis.results.compare import compare
        from gapscope.analysis.results.explain import explain_all
        from gapscope.analysis.renderers import compare_markdown
    except ImportError as exc:
        content.comparison_note = f"no comparison: the compare analyzer is not available ({exc})"
        return
    # Runs of another workload than the baseline's are left out, named, rather than taking the
    # comparison of those that match down with them.
    workload = complete[base].breakdown.workload
    others = [i for i, r in enumerate(complete) if i != base]
    matching = [i for i in others
                if workload is None or complete[i].breakdown.workload in (workload, None)]
    left_out = [f"{complete[i].label} ({complete[i].breakdown.workload})" for i in others
                if i not in matching]
    if left_out:
        content.comparison_note = (f"left out of the comparison, another workload than the "
                                   f"baseline's ({workload}): {', '.join(left_out)}")
    if not matching:
        return
    try:
        comparison = compare(explain_all([loaded[base]] + [loaded[i] for i in matching]))
    except GapscopeInputError as exc:
        content.comparison_note = f"no comparison: {exc}"
        return None
    content.comparison_markdown = compare_markdown.render(comparison)
    return comparison


def _compare_measurement(content: ReportContent, folder):
    from gapscope.analysis.renderers import compare_markdown
    from gapscope.analysis.results.measured import compare_measurement
    try:
        comparison = compare_measurement(folder)
    except GapscopeInputError as exc:
        content.comparison_note = f"no comparison: {exc}"
        return None
    content.comparison_markdown = compare_markdown.render(comparison)
    return comparison


def _baseline_index(complete: list[ReportRun], baseline: str | None) -> int:
    if baseline is None or not complete:
        return 0
    for i, r in enumerate(complete):
        if baseline in (r.label, r.path, Path(r.path).name, (r.manifest or {}).get("run_id")):
            return i
    raise GapscopeInputError(f"baseline {baseline!r} is none of the complete runs: "
                             f"{', '.join(r.label for r in complete)}")
