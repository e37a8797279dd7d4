"""The TensorBoard views of a run, written by the runner once the run has ended complete: its
summaries, and its trace as an XSpace for XProf with the phase lines. A view that cannot be
written is recorded in the manifest, never a failed run."""
from __future__ import annotations

from pathlib import Path

from gapscope.profilers.run_dir import Manifest
from gapscope.profilers.run_lifecycle import RunLifecycle


def _views():
    """Each view of a loaded run, and the manifest field that says why it is missing. Imported
    when the run has ended: the run process does not load the analysis (nor TensorBoard's
    writer) while it is being timed."""
    from gapscope.analysis.tensorboard.summaries import write_run_summaries
    from gapscope.analysis.tensorboard.xspace_export import write_xspace
    return ((lambda run: write_run_summaries(run.path, run), "summaries_error"),
            (write_xspace, "trace_viewer_error"))


def write_after_run(run_dir: str | Path) -> str | None:
    """Every view of the run, from one reading of its files (the trace is read and segmented
    once for all of them); the problems, if any, as one line."""
    from gapscope.analysis.model.run import load_run
    problems = []
    run = None
    for write, field in _views():
        try:
            if run is None:
                run = load_run(run_dir)
            write(run)
        except Exception as exc:  # noqa: BLE001 - recorded where the run's reader will see it
            problem = f"{type(exc).__name__}: {exc}"
            Manifest.reopen(Path(run_dir)).update(**{field: problem})
            problems.append(problem)
    return "; ".join(problems) or None


class RunWithViews(RunLifecycle):
    """A run whose complete end is followed by its TensorBoard views: the runner's part (the
    profilers record the end and know nothing of the analysis)."""

    def complete(self, rows: list[dict], facts: dict) -> str | None:
        """Records the steps and the end; then the views, whose failure is a problem of that
        view, returned (and kept in the manifest), not a failed run."""
        super().complete(rows, facts)
        return write_after_run(self.run_dir)
