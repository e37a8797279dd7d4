"""gapscope's public Python API: capture your own loop; load, compare, measure and check runs as the CLI does."""
from __future__ import annotations

from pathlib import Path

import importlib

__all__ = ["LoopCapture", "breakdown", "capture", "capture_keras", "check", "compare", "load", "measure",
           "report", "write_summaries"]

# Imported when first used, so `import gapscope.analysis...` (a cluster worker, the CLI) does not
# pull in the capture code and what it imports.
_LAZY = {"capture": "gapscope.loop_capture", "LoopCapture": "gapscope.loop_capture",
         "capture_keras": "gapscope.keras_capture",
         # Comparisons and measurements for notebooks and agents (gapscope.api).
         "compare": "gapscope.api", "measure": "gapscope.api", "load": "gapscope.api",
         "check": "gapscope.api"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'gapscope' has no attribute {name!r}")


def breakdown(path: str | Path, source: str = "auto"):
    """The per-phase Breakdown of a run directory or trace, as `gapscope breakdown` prints it."""
    from gapscope.analysis.results.distributed_breakdown import breakdown_of
    return breakdown_of(path, source)


def report(runs: list[str | Path], out: str | Path = "gapscope-report/report.md",
           source: str = "auto", baseline: str | None = None):
    """Writes the `gapscope report` files (Markdown, HTML, plots); returns their paths."""
    from gapscope.analysis.report import write_report
    return write_report(runs, out, source, baseline)


def write_summaries(run_dir: str | Path) -> Path:
    """(Re)writes a run directory's TensorBoard summaries; captures do this by themselves."""
    from gapscope.analysis.tensorboard.summaries import write_run_summaries
    return write_run_summaries(run_dir)
