"""A small synthetic job for the engine tests: four ranks copied from the hand-made sampled-rank
traces (tests/fixtures/foreign/sampled_ranks, figures worked out in its README), ranks 0-2 from
rank 0's trace (steps of 1.000 ms), rank 3 from rank 5's (1.100 ms: data load 100 µs longer)."""
from __future__ import annotations

import json
from pathlib import Path

SAMPLED = Path(__file__).parent / "fixtures" / "foreign" / "sampled_ranks"
WORLD = 4


def make_job(folder: Path, world: int = WORLD) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    fast, slow = sorted(SAMPLED.glob("*.json"))  # worker0, worker5
    for rank in range(world):
        doc = json.loads((slow if rank == world - 1 else fast).read_text())
        doc["distributedInfo"].update(rank=rank, world_size=world)
        (folder / f"trace_{rank}.pt.trace.json").write_text(json.dumps(doc))
    return folder


def job_json(job) -> str:
    """The job's JSON as `breakdown --format json` writes it, less the engine that made it."""
    from gapscope.analysis.renderers import registry
    job.engine = None
    return registry.JOB_BREAKDOWN["json"].render([job])


def make_timed_job(root: Path, world: int = WORLD, steps: int = 12) -> Path:
    """A gapscope job directory of `world` ranks, each with the trace above and a steps.csv of
    `steps` unprofiled steps whose times differ (1.00-1.04 ms, rank 3's data load 0.1 ms
    longer), so every bootstrap interval has a width."""
    fast, slow = sorted(SAMPLED.glob("*.json"))
    for rank in range(world):
        folder = root / f"rank{rank}"
        folder.mkdir(parents=True)
        doc = json.loads((slow if rank == world - 1 else fast).read_text())
        doc["distributedInfo"].update(rank=rank, world_size=world)
        (folder / "w.1.pt.trace.json").write_text(json.dumps(doc))
        (folder / "manifest.json").write_text(json.dumps({
            "run_id": f"job-rank{rank}", "status": "complete", "workload": "mlp",
            "framework": "torch", "variant": "default", "warmup_steps": 0, "rank": rank,
            "job_id": "job", "world_size": world}))
        lines = ["step,epoch,warmup,traced,step_ms,data_load_ms,forward_ms,backward_ms,optimizer_ms,loss"]
        for step in range(steps):
            load = 0.1 + (0.1 if rank == world - 1 else 0.0) + 0.01 * ((step * 7 + rank * 3) % 5)
            lines.append(f"{step},0,0,0,{0.9 + load:.3f},{load:.3f},,,,")
        (folder / "steps.csv").write_text("\n".join(lines) + "\n")
    (root / "manifest.json").write_text(json.dumps({
        "run_id": "job", "status": "complete", "workload": "mlp", "framework": "torch",
        "distributed": {"world_size": world, "backend": "nccl", "ranks": [
            {"rank": r, "dir": f"rank{r}", "status": "complete"} for r in range(world)]}}))
    return root


def ctrl_c_while_a_rank_hangs(job: Path, marker: Path, *engine_args: str) -> tuple[int, list[str], list, list]:
    """`gapscope breakdown JOB` in a process of its own whose rank 1 hangs in a worker (the fault
    hook; `marker` says it is waiting), sent SIGINT then: (exit code, stderr lines, the processes
    it had started, those of them still alive 60 s on). Nothing of it is left running."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    from gapscope.analysis.results.engines.faults import FAULT_ENV
    env = {**os.environ, FAULT_ENV: f"1=hang:{marker}", "GAPSCOPE_JOB_WORKERS": "2"}
    command = subprocess.Popen([sys.executable, "-c", "from gapscope.cli import main; main()", "breakdown",
                                str(job), *engine_args], env=env, cwd=Path(__file__).parent.parent,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started = []
    try:
        deadline = time.monotonic() + 180
        while not marker.exists() and command.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), command.stderr.read() if command.poll() is not None else "no wait"
        started = psutil.Process(command.pid).children(recursive=True)
        command.send_signal(signal.SIGINT)
        code, said = command.wait(timeout=90), command.stderr.read().strip().splitlines()
        _, alive = psutil.wait_procs(started, timeout=60)
        return code, said, started, alive
    finally:  # a failure here leaves nothing of it running
        for process in [command, *started]:
            try:
                process.kill()
            except (OSError, psutil.Error):
                pass
