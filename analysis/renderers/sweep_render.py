"""A sweep as a terminal table, Markdown or JSON, and its plot: step time, samples/s and phase
shares per point, each configuration's ratio to the first, and where that ratio crosses 1."""
from __future__ import annotations

from pathlib import Path

from gapscope.analysis.measures.stats import contains_one
from gapscope.analysis.renderers.columns import ratio_interval
from gapscope.analysis.renderers.fit import Grid, Page
from gapscope.analysis.results.sweep_results import SweepResult
from gapscope.profilers import strict_json
from gapscope.profilers.phases import PHASES


def _speed_grid(result: SweepResult) -> tuple[list[str], list[list[str]], list[int]]:
    head = [result.axis_name]
    units = []
    for i, label in enumerate(result.labels):
        head += [f"{label}\nms", "samples/s"] + ([f"ratio\nvs {result.labels[0]}"] if i else [])
        units.append(3 if i else 2)
    rows = []
    for point in result.points:
        row = [_value(point.value)]
        for i, c in enumerate(point.configs):
            row += [f"{c.step_ms:.3f}", f"{c.samples_per_s:,.0f}"]
            if i:
                row.append(ratio_interval(c.ratio, c.ratio_ci95)
                           + (" ~" if contains_one(c.ratio_ci95) else ""))
        rows.append(row)
    return head, rows, units


def _share_rows(result: SweepResult) -> list[list[str]]:
    return [[_value(p.value), c.label, *(f"{100 * c.phase_share[ph]:.1f}" for ph in PHASES)]
            for p in result.points for c in p.configs]


def gap_lines(result: SweepResult) -> list[str]:
    """The swept values without figures, each with why: first, so that no one reads the rest
    as the whole sweep."""
    return [f"missing: {result.axis_name} {_value(g.value)}: {g.reason}" for g in result.gaps]


def crossover_lines(result: SweepResult) -> list[str]:
    lines = gap_lines(result)
    if result.inconclusive:  # compare's gate: no winner, crossover or "at every size" then
        return lines + [f"no verdict on who is faster at any {result.axis_name}: busy machine "
                        "(above)"]
    for c in result.crossovers:
        sure = "" if c.certain else " (a neighbour's interval holds 1: not told apart from noise)"
        lines.append(f"crossover: {c.label} against {result.labels[0]} passes 1x between "
                     f"{result.axis_name} {_value(c.low)} and {_value(c.high)}, at about "
                     f"{_value(c.at)}{sure}")
    for label in result.labels[1:]:
        if not any(c.label == label for c in result.crossovers):
            index = result.labels.index(label)
            noise = [p for p in result.points if contains_one(p.configs[index].ratio_ci95)]
            if noise:
                lines.append(_noise_line(result, index, noise))
                continue
            ratios = [p.configs[index].ratio for p in result.points]
            side = "slower" if all(r > 1 for r in ratios) else "faster"
            if result.gaps:  # nothing is concluded over points that have no figures
                measured = ", ".join(_value(p.value) for p in result.points)
                lines.append(f"no crossover among the points measured ({result.axis_name} "
                             f"{measured}): {label} is {side} than {result.labels[0]} there; "
                             "none is told over the missing points")
            else:
                lines.append(f"no crossover in the range: {label} is {side} than "
                             f"{result.labels[0]} at every {result.axis_name} swept")
    return lines


def _noise_line(result: SweepResult, index: int, noise: list) -> str:
    """A configuration whose ratio's interval holds 1 somewhere: not told apart from noise
    there, and the side it is on said only at the points that tell it."""
    label, first = result.labels[index], result.labels[0]
    where = ", ".join(_value(p.value) for p in noise)
    told = [p for p in result.points if p not in noise]
    sides = "; ".join(f"{'slower' if p.configs[index].ratio > 1 else 'faster'} at "
                      f"{_value(p.value)}" for p in told)
    return (f"no crossover told: {label} against {first} is not told apart from noise at "
            f"{result.axis_name} {where} (its ratio's interval holds 1)" + (f"; {sides}" if sides else ""))


def compile_lines(result: SweepResult) -> list[str]:
    """Where a configuration's one-time extra cost (its compile beyond the first's) is paid back
    by its faster steps, point by point; with --over-steps, who wins over that many steps from
    the start, compile included."""
    lines = []
    for index, label in enumerate(result.labels[1:], start=1):
        said = []
        for point in result.points:
            c = point.configs[index]
            where = f"{result.axis_name} {_value(point.value)}"
            if c.pays_back == "after":
                said.append(f"after {c.pays_after_steps:,}{_steps_interval(c)} steps at {where}")
            elif c.pays_back == "never":
                said.append(f"never at {where} (its steps are slower)")
            elif c.pays_back == "not known":
                why = "a busy machine" if result.inconclusive else "the step gap is within noise"
                said.append(f"not known at {where} ({why})")
        if said:
            lines.append(f"compile: {label} pays back its extra warm-up against "
                         f"{result.labels[0]} " + ", ".join(said))
    if result.over_steps is None:
        return lines
    n = f"{result.over_steps:,} steps"
    for c in ([] if result.inconclusive else result.crossovers_over_steps):
        lines.append(f"over {n}, compile included: {c.label} against {result.labels[0]} passes 1x "
                     f"between {result.axis_name} {_value(c.low)} and {_value(c.high)}, at about "
                     f"{_value(c.at)}")
    for index, label in enumerate(result.labels[1:], start=1):
        ratios = [p.configs[index].ratio_over_steps for p in result.points]
        if not result.inconclusive and any(c.label == label for c in result.crossovers_over_steps):
            continue
        if None in ratios:
            lines.append(f"over {n}, compile included: no figure for {label} (a run kept no "
                         "warm-up to take its compile from)")
        elif result.inconclusive:
            lines.append(f"over {n}, compile included: {label} against {result.labels[0]} "
                         + ", ".join(f"{r:.2f}x" for r in ratios) + ": no verdict (busy machine)")
        else:
            side = "slower" if all(r > 1 for r in ratios) else "faster"
            lines.append(f"over {n}, compile included: {label} is {side} than {result.labels[0]} "
                         f"at every {result.axis_name} swept ("
                         + ", ".join(f"{r:.2f}x" for r in ratios) + ")")
    return lines


def _steps_interval(c) -> str:
    return f" [{c.pays_after_ci95[0]:,}, {c.pays_after_ci95[1]:,}]" if c.pays_after_ci95 else ""


def footer(result: SweepResult) -> str:
    noise = (f"[95 % t-interval over {result.repeats} interleaved repeats], '~' where it holds 1 "
             "(not told apart from noise)" if result.repeats > 1 else "one repeat: no interval")
    return (f"steady step from unprofiled steps, mean over {result.repeats} repeat(s); ratio = "
            f"step time / {result.labels[0]}'s at the same point (> 1 slower) {noise}; samples/s "
            "= batch / step")


def inconclusive_line(result: SweepResult) -> str | None:
    """compare's first line where a side ran on a busy machine: said before any figure."""
    return f"INCONCLUSIVE: {result.inconclusive}" if result.inconclusive else None


def render_table(result: SweepResult) -> str:
    page = Page()
    if result.inconclusive:
        page.line(inconclusive_line(result))
    head, rows, units = _speed_grid(result)
    page.table(Grid(f"gapscope sweep {result.workload} over {result.axis_name}", head, rows, units))
    page.line(footer(result))
    page.table(Grid("phase shares (% of the step)", [result.axis_name, "config",
                                                     *(p for p in PHASES)],
                    _share_rows(result), [1] * len(PHASES), keys=2, left=frozenset({0, 1})))
    for line in crossover_lines(result) + compile_lines(result):
        page.line(line)
    return page.text()


def render_markdown(result: SweepResult) -> str:
    head, rows, _ = _speed_grid(result)
    lines = [f"### gapscope sweep {result.workload} over {result.axis_name}", "",
             *([f"**{inconclusive_line(result)}**", ""] if result.inconclusive else []),
             _md_row([h.replace("\n", " ") for h in head]), "|" + "---|" * len(head)]
    lines += [_md_row(r) for r in rows]
    lines += ["", f"_{footer(result)}_", "",
              _md_row([result.axis_name, "config", *PHASES]), "|" + "---|" * (2 + len(PHASES))]
    lines += [_md_row(r) for r in _share_rows(result)]
    lines += [""] + [f"- {line}" for line in crossover_lines(result) + compile_lines(result)]
    return "\n".join(lines) + "\n"


def render_json(result: SweepResult) -> str:
    return strict_json.dumps(result.to_json_dict(), indent=2) + "\n"


def plot(result: SweepResult, path: Path) -> Path:
    """Writes figure(result) to `path` (PNG)."""
    import matplotlib.pyplot as plt
    fig = figure(result)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def figure(result: SweepResult):
    """samples/s per configuration and the ratio to the first (with its interval) against the
    swept value, log scales; the ratio's 1x line is where the winner changes."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    values = [p.value for p in result.points]
    fig, (speed, ratio) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for i, label in enumerate(result.labels):
        speed.plot(values, [p.configs[i].samples_per_s for p in result.points], "o-", label=label)
        if i:
            ys = [p.configs[i].ratio for p in result.points]
            lows = [y - (p.configs[i].ratio_ci95 or (y, y))[0] for y, p in zip(ys, result.points)]
            highs = [(p.configs[i].ratio_ci95 or (y, y))[1] - y for y, p in zip(ys, result.points)]
            ratio.errorbar(values, ys, yerr=[lows, highs], fmt="o-", capsize=3,
                           label=f"{label} / {result.labels[0]}")
    for c in result.crossovers:
        ratio.axvline(c.at, color="grey", linestyle=":", linewidth=1)
    ratio.axhline(1.0, color="black", linewidth=0.8)
    speed.set_ylabel("samples/s")
    speed.set_title(f"{result.workload}: throughput and step-time ratio by {result.axis_name}")
    ratio.set_ylabel("step time ratio (> 1 slower)")
    ratio.set_xlabel(result.axis_name)
    for axes in (speed, ratio):
        axes.set_xscale("log", base=2)
        axes.set_xticks(values, [_value(v) for v in values])
        axes.minorticks_off()
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8)
    # A ratio's interval is symmetric on a log scale (2x slower as far from 1 as 2x faster); on
    # a linear one a single wide whisker flattens every other point against the 1x line.
    ratio.set_yscale("log")
    fig.tight_layout()
    return fig


def _value(value: float) -> str:
    return f"{value:g}"


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"
