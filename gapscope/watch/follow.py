"""`gapscope watch`'s loop: reads what the run appended, works out the state, shows it; on a
terminal one table refreshed in place, piped one line per new step; ends with the run."""
from __future__ import annotations

import time
from pathlib import Path

from gapscope.analysis.readers.live_steps import StepsFollower
from gapscope.analysis.readers.run_dir import read_manifest
from gapscope.watch import render
from gapscope.watch.state import StepWindow, watch_state
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.machine_load import load_snapshot
from gapscope.profilers.run_dir import MANIFEST, STEPS_CSV, effective_status

ONCE_SAMPLE_S = 0.5  # how long --once looks at the machine's load while the run runs


def follow(run_dir: Path, *, once: bool, interval_s: float, fmt: str, echo, console=None) -> None:
    """`echo(text)` prints a line; `console`: a rich Console on a terminal (refreshed in place),
    None for piped output."""
    if not (run_dir / MANIFEST).is_file():
        raise GapscopeInputError(f"{run_dir}: not a gapscope run directory (no {MANIFEST})")
    follower, window = StepsFollower(run_dir / STEPS_CSV), StepWindow()
    load = _Load(_manifest(run_dir))
    if once:
        manifest = _manifest(run_dir)
        window.add(follower.new_rows())
        state = watch_state(manifest, window, load.others_pct(manifest, ONCE_SAMPLE_S))
        echo(render.as_json(state) if fmt == "json" else _table_text(state, console))
        return
    live = None
    if console is not None and fmt == "table":
        from rich.live import Live
        live = Live(console=console, auto_refresh=False)
        live.start()
    try:
        while True:
            manifest = _manifest(run_dir)
            new = window.add(follower.new_rows(), follower.restarted)
            state = watch_state(manifest, window, load.others_pct(manifest))
            if live is not None:
                live.update(render.table(state), refresh=True)
            elif fmt == "json":
                echo(render.as_json(state))
            else:
                for row in new:
                    echo(render.step_line(row))
            if state.status != "running":
                if live is None and fmt != "json":
                    echo(f"{state.run_id}: {state.status}. {render.summary(state)}")
                return
            time.sleep(interval_s)
    finally:
        if live is not None:
            live.stop()


def _manifest(run_dir: Path) -> dict:
    manifest = read_manifest(run_dir / MANIFEST)
    manifest["status"] = effective_status(manifest)[0]  # a job killed outright reads as ended
    return manifest


def _table_text(state, console) -> str:
    from rich.console import Console
    console = console or Console(width=120, force_terminal=False, color_system=None)
    with console.capture() as captured:
        console.print(render.table(state))
    return captured.get().rstrip("\n")


class _Load:
    """Other processes' share of the cores: all the machine's busy time less the job's and this
    watcher's own. The run's own record once it has ended."""

    def __init__(self, manifest: dict):
        self._pid = manifest.get("pid")
        self._before = self._snapshot()

    def others_pct(self, manifest: dict, sample_s: float = 0.0) -> float | None:
        if manifest.get("status") != "running":
            recorded = (manifest.get("machine_load") or {}).get("others_cpu_pct")
            return recorded if isinstance(recorded, (int, float)) else None
        if sample_s:
            time.sleep(sample_s)
        before, after = self._before, self._snapshot()
        self._before = after
        if before is None or after is None:
            return None
        (machine0, job0), (machine1, job1) = before, after
        total = machine1["total_s"] - machine0["total_s"]
        if total <= 0:
            return None
        busy = total - (machine1["idle_s"] - machine0["idle_s"]) - (machine1["steal_s"] - machine0["steal_s"])
        others = busy - (machine1["own_s"] - machine0["own_s"]) - (job1 - job0)
        return round(100 * max(others, 0.0) / total, 1)

    def _snapshot(self):
        import psutil
        try:
            job = psutil.Process(int(self._pid)).cpu_times() if self._pid else None
        except (psutil.Error, ValueError, TypeError):
            return None
        job_s = 0.0 if job is None else job.user + job.system + job.children_user + job.children_system
        return load_snapshot(), job_s
