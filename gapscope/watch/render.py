"""`gapscope watch`'s views of a WatchState: a rich table (refreshed in place on a terminal), a
plain line per step (piped output), JSON."""
from __future__ import annotations


from gapscope.watch.state import WatchState
from gapscope.profilers import strict_json
from gapscope.profilers.phases import MARKED_PHASES, PHASES


def table(state: WatchState):
    """A rich renderable: the latest steps, then the steady means."""
    from rich.console import Group
    from rich.table import Table
    steps = Table(title=f"{state.run_id}: {state.status}, {state.steps} steps", title_justify="left")
    for column in ("step", "step ms", *MARKED_PHASES, "flags"):
        steps.add_column(column, justify="left" if column == "flags" else "right")
    for row in state.latest:
        steps.add_row(str(row["step"]), _ms(row["step_ms"]), *(_ms(row.get(f"{p}_ms")) for p in MARKED_PHASES),
                      flags(row))
    return Group(steps, summary(state))


def summary(state: WatchState) -> str:
    if state.steady_ms is None:
        return "steady: no unprofiled step after the warm-up yet"
    parts = ", ".join(f"{p} {_ms(state.phases_ms.get(p))}" for p in PHASES)
    return (f"steady: {state.steady_ms:.3f} ms a step over the last {state.steady_steps} unprofiled "
            f"steps ({parts}){busy_words(state)}")


def step_line(row: dict) -> str:
    """One step, for piped output."""
    phases = " ".join(f"{p}={_ms(row.get(f'{p}_ms'))}" for p in MARKED_PHASES)
    tail = flags(row)
    return f"step {row['step']}: {row['step_ms']:.3f} ms {phases}" + (f" [{tail}]" if tail else "")


def as_json(state: WatchState) -> str:
    return strict_json.dumps(state.to_json_dict(), indent=2)


def flags(row: dict) -> str:
    return ",".join(name for name, key in (("warmup", "warmup"), ("traced", "traced")) if row.get(key))


def busy_words(state: WatchState) -> str:
    if state.others_cpu_pct is None:
        return ""
    if state.busy:
        return f"; busy machine: other processes used {state.others_cpu_pct:.0f} % of the cores"
    return f"; machine quiet (others {state.others_cpu_pct:.0f} %)"


def _ms(value) -> str:
    return "-" if value is None else f"{value:.3f}"
