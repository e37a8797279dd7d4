"""The TensorBoard views of a run, written once it has ended complete: its summaries, and its
trace as an XSpace for XProf with the phase lines. A view that cannot be written is recorded in
the manifest, never a failed run."""
from __future__ import annotations

from pathlib import Path

from analysis.run import load_run
from analysis.summaries import write_run_summaries
from analysis.xspace_export import write_xspace
from profilers.run_dir import Manifest

# Each view of a loaded run, and the manifest field that says why it is missing.
VIEWS = ((lambda run: write_run_summaries(run.path, run), "summaries_error"),
         (write_xspace, "trace_viewer_error"))


def write_after_run(run_dir: str | Path) -> str | None:
    """Every view of the run, from one reading of its files (the trace is read and segmented
    once for all of them); the problems, if any, as one line."""
    problems = []
    run = None
    for write, field in VIEWS:
        try:
            if run is None:
                run = load_run(run_dir)
            write(run)
        except Exception as exc:  # noqa: BLE001 - recorded where the run's reader will see it
            problem = f"{type(exc).__name__}: {exc}"
            Manifest.reopen(Path(run_dir)).update(**{field: problem})
            problems.append(problem)
    return "; ".join(problems) or None
