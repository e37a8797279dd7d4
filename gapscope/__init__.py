"""gapscope's public Python API: profile your own training loop into a normal run directory."""
from __future__ import annotations

from pathlib import Path

from gapscope.keras_capture import capture_keras
from gapscope.loop_capture import LoopCapture, capture

__all__ = ["LoopCapture", "breakdown", "capture", "capture_keras", "report", "write_summaries"]


def breakdown(path: str | Path, source: str = "auto"):
    """The per-phase Breakdown of a run directory or trace, as `gapscope breakdown` prints it."""
    from analysis.results.distributed_breakdown import breakdown_of
    return breakdown_of(path, source)


def report(runs: list[str | Path], out: str | Path = "gapscope-report/report.md",
           source: str = "auto", baseline: str | None = None):
    """Writes the `gapscope report` files (Markdown, HTML, plots); returns their paths."""
    from analysis.report import write_report
    return write_report(runs, out, source, baseline)


def write_summaries(run_dir: str | Path) -> Path:
    """(Re)writes a run directory's TensorBoard summaries; captures do this by themselves."""
    from analysis.tensorboard.summaries import write_run_summaries
    return write_run_summaries(run_dir)
