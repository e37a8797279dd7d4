"""Scaling comparisons (a run against a job): efficiency and where the step gap went, as terminal
table, JSON and Markdown."""
from __future__ import annotations

from gapscope.analysis.renderers.columns import plus_minus, ratio_interval
from gapscope.analysis.renderers.fit import Grid, Page
from gapscope.analysis.results.scaling import Scaling, Side
from gapscope.profilers import strict_json

PART_NAMES = {"communication": "exposed communication", "skew": "skew (slowest rank)"}
FOOTER = ("ms per step. Phases: time each rank spends not waiting on communication, mean over "
          "ranks; exposed communication: time ranks wait on collectives, mean over ranks; skew: "
          "what the slowest rank of each step costs beyond the mean rank. The parts add up to "
          "each side's job step (the slowest rank's step), their deltas to the gap.")


def _side(s: Side) -> str:
    what = "1 process" if s.world_size == 1 else f"{s.world_size} processes, job step = slowest rank"
    rate = (f", {s.samples_per_step} samples/step, {1000 * s.samples_per_step / s.step_ms:,.0f} samples/s"
            if s.samples_per_step and s.step_ms else "")
    return f"{s.label} ({what}): {plus_minus(s.step_ms, s.step_ci95)} ms{rate}"


def verdict_lines(sc: Scaling) -> list[str]:
    ideal = sc.b.world_size / sc.a.world_size
    verdict = ("within noise of perfect scaling" if sc.within_noise else
               f"{100 * (1 - sc.efficiency):.0f}% of the ideal throughput lost" if sc.efficiency < 1
               else "super-linear")
    interval = "" if sc.efficiency_ci95 is None else \
        f" [{sc.efficiency_ci95[0]:.2f}, {sc.efficiency_ci95[1]:.2f}]"
    lines = [f"baseline {_side(sc.a)}", f"against  {_side(sc.b)}",
             f"scaling efficiency {sc.efficiency:.2f}{interval} "
             f"(throughput_N / (N x throughput_1) = step_1 / step_N); per-sample throughput "
             f"{ratio_interval(sc.throughput_ratio, sc.throughput_ratio_ci95)} of an ideal "
             f"{ideal:.2f}x: {verdict}"]
    biggest = max(sc.parts, key=lambda g: abs(g.delta_ms))
    lines.append(f"step gap {sc.gap_ms:+.3f} ms, most of it {PART_NAMES.get(biggest.phase, biggest.phase)} "
                 f"({biggest.delta_ms:+.3f} ms)")
    return lines


def rows(sc: Scaling) -> list[list[str]]:
    out = []
    for g in sc.parts:
        noise = "" if g.delta_ci95 is None else (" ~" if g.within_noise else "")
        out.append([PART_NAMES.get(g.phase, g.phase), f"{g.a_ms:.3f}", f"{g.b_ms:.3f}",
                    plus_minus(g.delta_ms, g.delta_ci95) + noise,
                    "" if g.share_of_gap is None else f"{100 * g.share_of_gap:.0f}"])
    out.append(["step", f"{sc.a.step_ms:.3f}", f"{sc.b.step_ms:.3f}",
                plus_minus(sc.gap_ms, sc.gap_ci95), "100"])
    return out


def render_table(sc: Scaling) -> str:
    page = Page()
    for line in verdict_lines(sc):
        page.line(line)
    head = ["part", f"x{sc.a.world_size}\nms", f"x{sc.b.world_size}\nms", "delta\nms", "% of\ngap"]
    table = rows(sc)
    page.table(Grid("gapscope compare: where the scaling went", head, table, [1, 1, 1, 1],
                    ends=frozenset({len(table) - 2})))
    page.line(FOOTER + " ~ within noise.")
    for warning in sc.warnings:
        page.line(f"warning: {warning}")
    return page.text()


def render_json(sc: Scaling) -> str:
    return strict_json.dumps(sc.to_json_dict(), indent=2)


def render_markdown(sc: Scaling) -> str:
    lines = [f"- {line}" for line in verdict_lines(sc)] + [""]
    lines += [f"| part | x{sc.a.world_size} ms | x{sc.b.world_size} ms | delta ms | % of gap |",
              "|---|---:|---:|---:|---:|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows(sc)]
    lines += ["", f"_{FOOTER}_"] + [f"- warning: {w}" for w in sc.warnings]
    return "\n".join(lines) + "\n"
