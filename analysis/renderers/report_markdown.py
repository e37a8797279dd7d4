"""A report of runs as Markdown: environment, phase tables, plots (linked files), comparison."""
from __future__ import annotations

from dataclasses import dataclass, field

from gapscope.analysis.renderers.columns import plus_minus, unit_footer, workload_references
from gapscope.analysis.renderers.memory.report_section import memory_section
from gapscope.analysis.renderers.registry import text_only
from gapscope.analysis.results.records import Breakdown
from gapscope.profilers.phases import PHASES
from gapscope.profilers.run_dir import effective_status

_VERSIONS = ("python", "torch", "tensorflow", "keras", "cuda")


@dataclass
class ReportRun:
    """One run as the report shows it; `breakdown` is None for a run that did not complete."""

    label: str
    path: str
    manifest: dict | None
    breakdown: Breakdown | None
    problem: str | None = None  # why there is no breakdown: failed, unfinished, skipped


@dataclass
class ReportContent:
    title: str
    generated: str
    runs: list[ReportRun]
    baseline: int                                       # index into the complete runs
    figures: dict[str, str] = field(default_factory=dict)  # role -> file name (PNG)
    comparison_markdown: str | None = None
    comparison_note: str | None = None
    notes: list[str] = field(default_factory=list)
    jobs_markdown: list[str] = field(default_factory=list)  # per distributed job: ranks, scaling
    views_markdown: list[str] = field(default_factory=list)  # the layers and compile sections' lines

    @property
    def complete(self) -> list[ReportRun]:
        return [r for r in self.runs if r.breakdown is not None]


def render(content: ReportContent) -> str:
    complete = content.complete
    jobs = f", {len(content.jobs_markdown)} distributed job(s)" if content.jobs_markdown else ""
    lines = [f"# {content.title}", "",
             f"_{len(content.runs)} run(s){jobs}, generated {content.generated} by gapscope_", ""]
    lines += ["## Environment", ""] + _environment(content.runs) + [""]
    if complete:
        lines += ["## Where the time goes", ""]
        lines += _figure(content, "phases", "Phases per run: stacked bar of the five phases")
        lines += _phase_table(complete) + [""]
        lines += _sources(complete)
    if "steps" in content.figures:
        lines += ["## Step time over the run", ""]
        lines += _figure(content, "steps", "Step time of every step of each run")
        lines += ["Every step from the step timers, warm-up included: the shaded first steps carry "
                  "one-time costs (tf.function tracing, XLA or torch.compile compilation, first-step "
                  "allocation); dots mark the steps the profiler recorded, which carry its own cost.", ""]
    lines += memory_section(content)
    if len(complete) > 1:
        lines += ["## Step-time ratio to the baseline", ""]
        lines += _figure(content, "ratio", "Step time of each run over the baseline's")
        lines += _speed_table(complete, content.baseline) + [""]
    if content.jobs_markdown:
        lines += ["## Distributed jobs", ""]
        lines += [text.rstrip() + "\n" for text in content.jobs_markdown]
    if content.comparison_markdown or content.comparison_note:
        lines += ["## Comparison with the baseline", ""]
        if content.comparison_markdown:
            lines += [content.comparison_markdown.rstrip(), ""]
        if content.comparison_note:
            lines += [f"_{content.comparison_note}_", ""]
    lines += content.views_markdown
    problems = [r for r in content.runs if r.breakdown is None]
    if problems:
        lines += ["## Runs without results", ""]
        lines += [f"- **{r.label}** (`{r.path}`): {r.problem}" for r in problems] + [""]
    notes = content.notes + [f"`{r.label}`: {note}" for r in complete for note in r.breakdown.notes]
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return text_only("\n".join(lines))


def _figure(content: ReportContent, role: str, alt: str) -> list[str]:
    name = content.figures.get(role)
    return [f"![{alt}]({name})", ""] if name else []


def _environment(runs: list[ReportRun]) -> list[str]:
    # JAX is an extra: its column where a run recorded it (runs from before had no such key).
    shown = [*_VERSIONS[:4], *(["jax"] if any(((r.manifest or {}).get("versions") or {}).get("jax")
                                              for r in runs) else []), *_VERSIONS[4:]]
    head = ["run", "workload", "framework", "variant", "device", "host", *shown, "steps",
            "started", "status"]
    rows = []
    for r in runs:
        m = r.manifest or {}
        versions = m.get("versions") or {}
        steps = m.get("steps_run") or m.get("steps") or (m.get("settings") or {}).get("steps")
        rows.append([r.label, m.get("workload"), m.get("framework"), m.get("variant"),
                     m.get("device"), m.get("host"), *(versions.get(v) for v in shown), steps,
                     (m.get("started_at") or "")[:19].replace("T", " "),
                     effective_status(m)[0] if m else "n/a"])
    return _table(head, [[_cell(v) for v in row] for row in rows], left=len(head))


def _phase_table(runs: list[ReportRun]) -> list[str]:
    """One row per run, each phase as ms (share of the step): readable for any number of runs."""
    head = ["run", "source", *(f"{p} ms" for p in PHASES), "step ms", "compile ms (once)"]
    rows = []
    for r in runs:
        doc = r.breakdown.to_json_dict()
        cells = [f"{plus_minus(doc['phases'][p]['ms'], r.breakdown.phases[p].ci95)} "
                 f"({100 * doc['phases'][p]['share']:.0f}%)" for p in PHASES]
        compile_ms = "n/a" if doc["compile_ms"] is None else f"{doc['compile_ms']:.1f}"
        rows.append([r.label, f"{doc['source']}, {doc['steps']} steps", *cells,
                     f"**{plus_minus(doc['step_ms']['mean'], r.breakdown.step_ci95)}**", compile_ms])
    parts = []
    for r in runs:  # other's parts, by what the host did meanwhile
        doc = r.breakdown.to_json_dict()
        found = doc["phases"]["other"]["parts"]
        if found:
            parts.append(f"- `{r.label}` other: " + ", ".join(
                f"{part} {ms:.3f} ms ({100 * ms / doc['step_ms']['mean']:.1f} %)"
                for part, ms in found.items()))
    return (_table(head, rows) + ["", f"_{unit_footer([r.breakdown for r in runs])}_"]
            + ([""] + parts if parts else []))


def _sources(runs: list[ReportRun]) -> list[str]:
    """Phases whose time was not marked by gapscope, said once per run rather than hidden."""
    lines = []
    for r in runs:
        odd = {p: s for p, s in r.breakdown.phase_sources.items() if s != "gapscope marks"}
        if odd:
            lines.append(f"- `{r.label}`: " + ", ".join(
                f"{p} not identified (counted in other)" if s == "not identified" else f"{p} from {s}"
                for p, s in odd.items()))
    return lines + [""] if lines else []


def _speed_table(runs: list[ReportRun], baseline: int) -> list[str]:
    head = ["run", "step ms (mean)", "median", "p10", "p90", "ratio run/base"]
    means = [r.breakdown.step_stats()["mean"] for r in runs]
    references = workload_references([r.breakdown for r in runs], baseline)
    rows = []
    for i, (r, ref) in enumerate(zip(runs, references)):
        stats = r.breakdown.step_stats()
        ratio = stats["mean"] / means[ref] if means[ref] else None
        rows.append([r.label + (" (baseline)" if i in references else ""), f"{stats['mean']:.3f}",
                     f"{stats['median']:.3f}", f"{stats['p10']:.3f}", f"{stats['p90']:.3f}",
                     "n/a" if ratio is None else f"{ratio:.2f}x"])
    return _table(head, rows) + [
        "", "_ratio = run step time / baseline step time, as in `gapscope compare`: above 1 the "
            "run is slower; each run "
            "against the baseline of its own workload (the first run of it where the chosen "
            "baseline runs another)_"]


def _table(head: list[str], rows: list[list[str]], left: int = 1) -> list[str]:
    """Text in the first `left` columns aligns left, figures after them right."""
    align = ["---" if i < left else "---:" for i in range(len(head))]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def _cell(value) -> str:
    return "n/a" if value in (None, "") else str(value)
