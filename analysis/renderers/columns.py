"""What a breakdown table shows, shared by the table, Markdown and CSV renderers."""
from __future__ import annotations

from gapscope.analysis.measures.other_split import OtherPart
from gapscope.analysis.events.phase_rules import PhaseOrigin
from gapscope.analysis.results.records import Breakdown, PhaseSource
from gapscope.analysis.model.run import unique_labels
from gapscope.profilers.phases import PHASES

ORIGIN_MARKS = {PhaseOrigin.INFERRED: "~", PhaseOrigin.MISSING: "?", PhaseOrigin.NOT_APPLICABLE: "-",
                PhaseOrigin.ANNOTATED: "a"}
ORIGIN_LEGEND = ("~ inferred, ? not identified in the trace (counted in other), "
                 "- not applicable (inference)")
ANNOTATED_LEGEND = ", a annotated (the trace's own record_function ranges)"


def unit_footer(breakdowns: list[Breakdown]) -> str:
    """What the figures are; says so where a step time carries the profiler's cost."""
    steps = ("from unprofiled steps" if all(b.unprofiled for b in breakdowns)
             else "from unprofiled steps where a run has them, else traced ('traced': profiler cost inside)")
    return (f"ms per steady-state step (mean, ± half its 95 % interval, [low, high] where "
            f"lopsided), {steps}; "
            "% of the step; phases add up to the step; compile = one-time warm-up cost. "
            "Phase source: T timers, C trace with the profiler's cost taken out, "
            "R trace as recorded (profiler cost inside); step source: U unprofiled steps, "
            "R traced steps" + (PARTS_LEGEND if any(b.other_shares for b in breakdowns) else "")
            + (COMM_LEGEND if any(OtherPart.COMMUNICATION in (b.other_shares or {})
                                  for b in breakdowns) else "")
            + (UNTRACED_LEGEND if any(OtherPart.HOST_UNTRACED in (b.other_shares or {})
                                      for b in breakdowns) else ""))


PARTS_LEGEND = (". · other by what the host did meanwhile, in the trace's proportions: ops in no "
                "phase (metrics, variable updates); framework dispatch (tf.function call, executor "
                "scheduling, Dynamo guards, launches); device wait (synchronising calls); loop and "
                "callbacks (no framework event: the loop's Python, Keras callbacks)")
COMM_LEGEND = ("; communication (a collective's own range in flight: gloo, NCCL or c10d, the "
               "rank waiting on its peers)")
UNTRACED_LEGEND = ("; host not traced (the trace holds device events only: what the host did "
                   "is unknown)")


def origin_legend(breakdowns: list[Breakdown]) -> str | None:
    origins = {o for b in breakdowns for o in b.phase_sources.values()}
    if not origins & ORIGIN_MARKS.keys():
        return None
    return ORIGIN_LEGEND + (ANNOTATED_LEGEND if PhaseOrigin.ANNOTATED in origins else "")
SOURCE_MARKS = {PhaseSource.TIMERS: "T", PhaseSource.COMPENSATED: "C", PhaseSource.RAW: "R"}


def run_names(breakdowns: list[Breakdown]) -> list[str]:
    """Each run's header, told apart from the others shown with it."""
    return unique_labels([b.name for b in breakdowns], [b.run_id or "" for b in breakdowns])


def workload_references(breakdowns: list[Breakdown], baseline: int) -> list[int]:
    """Per run, the index of the run its speed is measured against: the baseline where it ran the
    same workload, else the first run of its own workload (an LSTM step against an MLP step says
    nothing). Runs of unknown workload go against the baseline."""
    base = breakdowns[baseline].workload
    first = {}
    for i, b in enumerate(breakdowns):
        first.setdefault(b.workload, i)
    return [baseline if b.workload in (base, None) or base is None else first[b.workload]
            for b in breakdowns]


def phase_rows(b: Breakdown, parts: bool = False) -> list[tuple[str, float, float]]:
    """(phase, ms, share) for the five phases (with `parts`, other's parts after them, named
    'other: <part>'), then the whole step, as the JSON contract has them."""
    data = b.to_json_dict()
    rows = [(p, data["phases"][p]["ms"], data["phases"][p]["share"]) for p in PHASES]
    step = data["step_ms"]["mean"]
    if parts:
        rows += [(f"other: {part}", ms, round(ms / step, 6) if step else 0.0)
                 for part, ms in data["phases"]["other"]["parts"].items()]
    rows.append(("step", data["step_ms"]["mean"], 1.0))
    return rows


def origin_mark(b: Breakdown, phase: str) -> str:
    """A short flag beside a phase whose time was inferred or not found at all."""
    return ORIGIN_MARKS.get(b.phase_sources.get(phase), "")


# Below this ratio of its shorter to its longer side an interval is lopsided: a '±' of the
# longer side would claim the shorter one reaches as far ('+1.452 ±7.964' for [1.273, 9.416]).
_SYMMETRIC = 0.75


def plus_minus(value: float, interval, sign: str = "") -> str:
    """'12.345 ±0.210' where the interval is about symmetric around the estimate, else
    '12.345 [12.100, 13.900]', so that a lopsided interval is read as it is."""
    if interval is None:
        return f"{value:{sign}.3f}"
    below, above = value - interval[0], interval[1] - value
    if min(below, above) < _SYMMETRIC * max(below, above):
        return f"{value:{sign}.3f} [{interval[0]:{sign}.3f}, {interval[1]:{sign}.3f}]"
    return f"{value:{sign}.3f} ±{max(below, above):.3f}"


def ratio_interval(ratio: float | None, interval) -> str:
    """'1.23x [1.10, 1.38]': a ratio with its 95 % interval, which is not symmetric around it."""
    if ratio is None:
        return "n/a"
    if interval is None:
        return f"{ratio:.2f}x"
    return f"{ratio:.2f}x [{interval[0]:.2f}, {interval[1]:.2f}]"

# Sub-rows of `other` start with this mark, so that a table can tell them from the phases.
PART_MARK = "· "


def other_part_rows(breakdowns: list[Breakdown]) -> list[tuple[str, list[str]]]:
    """`other` by what the host did meanwhile, one (part, [ms, %, ""]) row per part any run has."""
    docs = [b.to_json_dict()["phases"]["other"]["parts"] for b in breakdowns]
    steps = [b.step_stats()["mean"] for b in breakdowns]
    rows = []
    for part in OtherPart:
        if any(part in doc for doc in docs):
            cells = []
            for doc, step in zip(docs, steps):
                ms = doc.get(part)
                cells += ["" if ms is None else f"{ms:.3f}",
                          "" if ms is None or not step else f"{100 * ms / step:.1f}", ""]
            rows.append((PART_MARK + part, cells))
    return rows


def side_by_side(breakdowns: list[Breakdown]) -> list[tuple[str, list[str]]]:
    """Rows of (phase, [ms ± ci, %, source, ...]) with one triple per run; under `other`, its
    parts."""
    per_run = [phase_rows(b) for b in breakdowns]
    rows = []
    for i, (phase, _, _) in enumerate(per_run[0]):
        cells = []
        for b, run_rows in zip(breakdowns, per_run):
            _, ms, share = run_rows[i]
            if phase == "step":
                cells += [plus_minus(ms, b.step_ci95), f"{100 * share:.1f}",
                          "U" if b.unprofiled else "R"]
            else:
                figure = b.phases[phase]
                cells += [plus_minus(ms, figure.ci95), f"{100 * share:.1f}",
                          SOURCE_MARKS[figure.source] + origin_mark(b, phase)]
        rows.append((phase, cells))
        if phase == "other":
            rows += other_part_rows(breakdowns)
    compile_cells = [c for b in breakdowns for c in (format_ms(b.compile_ms, 1), "", "")]
    rows.append(("compile (once)", compile_cells))
    return rows


def format_ms(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
