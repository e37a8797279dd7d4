"""Rich progress bars on stderr for matrix rows, a run's steps and a job's ranks (stdout stays clean for --format json)."""
from __future__ import annotations

from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def matrix_progress(matrix, quiet: bool, repeats: int = 1):
    """Yields the `on_row(row, outcome)` callback that workloads.matrix.run_matrix calls: once
    per row and repeat, so the bar counts rows × repeats; a row's problem is told once."""
    if quiet:
        yield lambda row, outcome: None
        return
    console = Console(stderr=True)
    told = set()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task(matrix.name, total=len(matrix.rows) * repeats)

        def on_row(row, outcome):
            if outcome is None:
                progress.update(task, description=f"{matrix.name}: {row.id}")
                return
            progress.advance(task)
            if outcome.status not in ("complete", "running") and row.id not in told:
                told.add(row.id)
                console.print(f"  {row.id}: {outcome.status} ({outcome.reason})", markup=False)
        yield on_row


@contextmanager
def run_progress(label: str, total: int | None, quiet: bool):
    """Yields the `on_steps(done)` callback that workloads.launch.launch calls; `total`: None
    when the run counts epochs (the steps per epoch are known only inside the run)."""
    if quiet:
        yield lambda done: None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True)) as progress:
        task = progress.add_task(f"{label}: steps", total=total)
        yield lambda done: progress.update(task, completed=min(done, total) if total else done)


class RankProgress:
    """The on_ranks callback of analysis.results.engines: one bar per job over its ranks (done,
    running, failed, MB/s of the ranks' files), gone when the job is."""

    def __init__(self) -> None:
        self._progress, self._task = None, None

    def __call__(self, label: str, total: int, done: int, failed: int, running: int,
                 megabytes: float, seconds: float) -> None:
        if self._progress is None:
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TextColumn("{task.fields[state]}"),
                                      TimeElapsedColumn(), console=Console(stderr=True),
                                      transient=True)
            self._progress.start()
            self._task = self._progress.add_task(f"{label}: ranks", total=total, state="")
        rate = f"{megabytes / seconds:.1f} MB/s" if seconds > 0 and megabytes else "- MB/s"
        self._progress.update(self._task, completed=done + failed,
                              state=f"running {running}, failed {failed}, {rate}")
        if done + failed >= total:
            self._progress.stop()
            self._progress = None


def rank_progress() -> RankProgress | None:
    """A bar over a job's ranks where stderr is a terminal; None (no bar) anywhere else."""
    return RankProgress() if Console(stderr=True).is_terminal else None
