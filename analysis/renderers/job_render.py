"""Job breakdowns (distributed runs): the per-rank phase table, communication per rank, the job
step, skew and straggler, as terminal table, JSON, Markdown and CSV."""
from __future__ import annotations

import csv
import io

from gapscope.analysis.model.job import rank_ranges
from gapscope.analysis.results.distributed_breakdown import JobBreakdown, WaitSource
from gapscope.analysis.renderers import breakdown_csv, breakdown_markdown, breakdown_table
from gapscope.analysis.renderers.columns import format_ms, plus_minus
from gapscope.analysis.renderers.fit import Grid, Page
from gapscope.profilers import strict_json

WAIT_EXPLAINED = ("in synchronous training every rank waits for the slowest inside the collective, "
                  "so raw step times hide the straggler: skew and straggler are taken on each "
                  "rank's time not waiting on communication")


def summary_lines(jb: JobBreakdown) -> list[str]:
    """The job's figures in sentences, shared by the table and Markdown."""
    hosts = sorted({h for h in jb.hosts.values() if h})
    present = "" if jb.complete else f" ({len(jb.ranks)} present: {rank_ranges(jb.numbers)})"
    bound = "" if jb.complete else "at least "
    lines = [f"job {jb.label} ({jb.job_id}): {jb.world_size} ranks{present}, backend "
             f"{jb.backend or '?'}, "
             f"{len(hosts) or 'unknown'} host(s){' (foreign traces)' if jb.foreign else ''}",
             f"job step (slowest rank{'' if jb.complete else ' present'}, step by step): {bound}"
             f"{plus_minus(jb.job_step_ms, jb.job_step_ci95)} ms "
             f"over {len(jb.job_steps)} {jb.job_step_source}"
             + (f"; {jb.samples_per_step} samples per job step" if jb.samples_per_step else "")]
    slowest = {}
    for _, _, rank in jb.job_steps:
        slowest[rank] = slowest.get(rank, 0) + 1
    several = len(jb.ranks) > 1  # a lone rank has no slowest rank and no skew
    if several:
        lines.append("slowest rank per step: " + ", ".join(
            f"rank {r} {n}/{len(jb.job_steps)}" for r, n in sorted(slowest.items())))
    busy = ", ".join(f"rank {r} {ms:.3f}" for r, ms in zip(jb.numbers, jb.busy_ms))
    lines.append(f"not waiting on communication (ms per step): {busy}; waiting from the "
                 f"{'trace (exposed communication)' if jb.wait_source == WaitSource.TRACE else 'step timers (' + str(jb.comm_phase) + ' beyond the fastest rank)'}")
    interval = "" if jb.skew_ci95 is None else f" [{jb.skew_ci95[0]:.3f}, {jb.skew_ci95[1]:.3f}]"
    if several:
        lines.append(f"rank skew: {bound}{jb.skew_ms:.3f} ms{interval} (raw step times: "
                     f"{bound}{jb.step_skew_ms:.3f} ms); {WAIT_EXPLAINED}")
    if jb.straggler is not None:
        extra = ("" if jb.straggler_extra_ci95 is None else
                 f" [{jb.straggler_extra_ci95[0]:.3f}, {jb.straggler_extra_ci95[1]:.3f}]")
        verdict = ("within noise: no rank is slower beyond the intervals"
                   if jb.skew_within_noise else f"rank {jb.straggler}")
        lines.append(f"straggler: {verdict}; rank {jb.straggler}'s extra time lies in "
                     f"{jb.straggler_phase} (+{jb.straggler_extra_ms:.3f} ms{extra} over the "
                     "other ranks' mean)")
    elif not jb.complete:
        lines.append(f"straggler: not named: {len(jb.ranks)} of {jb.world_size} ranks present")
    if jb.last_arrival:
        lines.append("last to reach a collective: " + ", ".join(
            f"rank {r} {100 * s:.0f}%" for r, s in sorted(jb.last_arrival.items())))
    offsets = ", ".join(f"rank {r} {us:+.1f} µs" for r, us in sorted(jb.clock_offsets_us.items()))
    lines.append(f"clocks: {jb.clocks}" + (f" ({offsets})" if len({h for h in jb.hosts.values() if h}) > 1 else ""))
    return lines + [f"job: {note}" for note in jb.notes]


def communication_rows(jb: JobBreakdown) -> list[list[str]]:
    """Rows of (figure, rank0, rank1, ...): collectives per step by kind, then overlap."""
    docs = [c or {} for c in jb.communication]
    kinds = sorted({k for d in docs for k in (d.get("per_kind") or {})})
    rows = []
    for kind in kinds:
        for what, key, fmt in (("count", "count", "{:.1f}"), ("MB", "bytes", "{:.3f}"),
                               ("ms", "ms", "{:.3f}")):
            cells = []
            for d in docs:
                value = ((d.get("per_kind") or {}).get(kind) or {}).get(key)
                if value is not None and key == "bytes":
                    value = value / 1e6
                cells.append("" if value is None else fmt.format(value))
            if any(cells):  # bytes only where the trace records them
                rows.append([f"{kind} {what}", *cells])
    for label, key in (("communication ms", "comm_ms"), ("overlapped ms", "overlapped_ms"),
                       ("exposed ms", "exposed_ms")):
        rows.append([label, *[format_ms(d.get(key)) if d else "" for d in docs]])
    phases = sorted({p for d in docs for p in (d.get("exposed_by_phase") or {})})
    for p in phases:
        values = [(d.get("exposed_by_phase") or {}).get(p) for d in docs]
        if not any(values):  # a phase no rank waited in says nothing
            continue
        rows.append([f"  exposed in {p}", *["" if v is None else format_ms(v) for v in values]])
    rows.append(["waiting ms (used)", *[f"{sum(w.values()):.3f}" for w in jb.wait_ms]])
    rows.append(["not waiting ms", *[f"{b:.3f}" for b in jb.busy_ms]])
    return rows


def render_table(jobs: list[JobBreakdown]) -> str:
    parts = []
    for jb in jobs:
        page = Page()
        for line in summary_lines(jb)[:2]:
            page.line(line)
        text = page.text() + breakdown_table.render(jb.ranks)
        page = Page()
        head = ["per step", *[f"rank{r}" for r in jb.numbers]]
        page.table(Grid("communication", head, communication_rows(jb), [1] * len(jb.ranks)))
        if not any(jb.communication):
            page.line("no collectives found in the traces (a trace per rank shows them)")
        for line in summary_lines(jb)[2:]:
            page.line(line)
        parts.append(text + page.text())
    return "\n".join(parts)


def render_json(jobs: list[JobBreakdown]) -> str:
    docs = [{"job": jb.to_json_dict(), "ranks": [b.to_json_dict() for b in jb.ranks]} for jb in jobs]
    return strict_json.dumps(docs[0] if len(docs) == 1 else docs, indent=2)


def render_markdown(jobs: list[JobBreakdown]) -> str:
    out = []
    for jb in jobs:
        lines = summary_lines(jb)
        out += [f"### {jb.label}", "", f"- {lines[0]}", f"- {lines[1]}", "",
                breakdown_markdown.render(jb.ranks)]
        head = ["per step", *[f"rank{r}" for r in jb.numbers]]
        out += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(jb.ranks)]
        out += ["| " + " | ".join(row) + " |" for row in communication_rows(jb)]
        out += [""] + [f"- {line}" for line in lines[2:]] + [""]
    return "\n".join(out)


def render_csv(jobs: list[JobBreakdown]) -> str:
    """The per-rank breakdown CSV with the job and rank in front of each row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(("job_id", "rank", *breakdown_csv.COLUMNS))
    for jb in jobs:
        for rank, b in zip(jb.numbers, jb.ranks):
            rows = list(csv.reader(io.StringIO(breakdown_csv.render([b]))))[1:]
            writer.writerows([jb.job_id, rank, *row] for row in rows)
        writer.writerow([jb.job_id, "job", jb.job_id, None, None, None, None, "", len(jb.job_steps),
                         "step", f"{jb.job_step_ms:.6f}",
                         *(("", "") if jb.job_step_ci95 is None else
                           (f"{jb.job_step_ci95[0]:.6f}", f"{jb.job_step_ci95[1]:.6f}")),
                         "1.000000", jb.job_step_source, "slowest rank per step", ""])
    return out.getvalue()
