"""One run's figures as its files are now, or why it has none: the tab's analysis of a run, run in any process."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from gapscope.analysis.model.run import RunEntry, load_run
from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.explain import RunExplanation
from gapscope.analysis.results.records import Breakdown
from gapscope.profilers.errors import GapscopeInputError

logger = logging.getLogger(__name__)


@dataclass
class Analysed:
    """One run as read at one state of its files: its breakdown, or why it has none."""

    name: str
    signature: tuple
    label: str
    # Figures only: a Run holds its trace's events, and 200 of them took TensorBoard from
    # 0.8 to 2.8 GB. The run is read again where a view needs more (explain).
    framework: str | None = None
    traced: bool = False
    rows: list[dict] | None = None
    warmup_steps: int = 0
    breakdown: Breakdown | None = None
    problem: str | None = None
    explanation: RunExplanation | None = field(default=None, repr=False)
    explain_problem: str | None = None
    pending: bool = False  # listed before its analysis, which runs meanwhile


def analyse_run(name: str, entry: RunEntry) -> Analysed:
    """One run's figures as its files are now, or why it has none (run in a worker process)."""
    a = Analysed(name, signature(entry.path),
                 entry.label or (entry.path.name if entry.path else name))
    if entry.path is None:
        a.problem = entry.problem or "no run directory"
        return a
    try:
        run = load_run(entry.place, entry.label)
        a.label, a.framework, a.traced = run.label, run.framework, run.trace_file is not None
        a.rows, a.warmup_steps = run.rows, run.warmup_steps
        a.breakdown = breakdown(run)
    except Exception as exc:  # noqa: BLE001 - a run that cannot be read is listed, never a 500
        a.problem = problem_line(name, exc)
    return a


def problem_line(name: str, exc: Exception) -> str:
    """The one line a view shows for a run gapscope cannot analyse; an error that is not the
    input's fault also goes to TensorBoard's log with its traceback."""
    if isinstance(exc, GapscopeInputError):
        return one_line(exc)
    logger.exception("gapscope: analysing %s failed", name)
    return f"gapscope could not analyse this run ({type(exc).__name__}: {one_line(exc)})"


def one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def signature(path: Path | None) -> tuple:
    """Names, sizes and times of the run's files: a run still being written (or written again)
    is read afresh."""
    if path is None:
        return ()
    try:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        return tuple((str(p), s.st_size, s.st_mtime_ns) for p in files for s in [p.stat()])
    except OSError:  # a file replaced while listed: read the run again next time
        return (object(),)
