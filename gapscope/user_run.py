"""The run directory of a user's own training loop, from creation to how it ended."""
from __future__ import annotations

import os
import re
import signal
import threading
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from gapscope.profilers.job_dir import (RANKS_WAIT_S, create_job_dir, finish_job, job_id_parts, rank_dir,
                               start_job, wait_for_ranks)
from gapscope.profilers.machine_load import load_between, load_snapshot
from gapscope.profilers.run_dir import INTERRUPTED_STATUS, MANIFEST, USER_VARIANT, create_run_dir, ensure_out_dir
from gapscope.profilers.run_lifecycle import Interrupted, RunLifecycle, stop_signals_deferred
from gapscope.profilers.trace_window import TraceWindow
from gapscope.workloads.runners.after_run import RunWithViews

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class RankPlace:
    """This process's place in a distributed job."""
    rank: int
    world_size: int
    local_rank: int = 0
    node_rank: int = 0
    backend: str | None = None

    def fields(self, job_id: str) -> dict:
        """What a rank's run manifest says about it."""
        return {**asdict(self), "job_id": job_id}


def rank_place() -> RankPlace | None:
    """This process's rank and world size when it is one of several: torch.distributed's when
    a process group is initialised, else the launcher's environment (torchrun's RANK and
    WORLD_SIZE). None for a process that runs alone."""
    local = int(os.environ.get("LOCAL_RANK", 0) or 0)
    node = int(os.environ.get("GROUP_RANK", 0) or 0)
    dist = _torch_distributed()
    if dist is not None:
        if dist.get_world_size() > 1:
            return RankPlace(dist.get_rank(), dist.get_world_size(), local, node, str(dist.get_backend()))
        return None
    try:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None
    return RankPlace(rank, world_size, local, node) if world_size > 1 else None


def job_dir_for(out: str | Path, name: str, framework: str, rank: int, world_size: int, *,
                share: Callable[[str | None], str] | None = None, run_id: str | None = None) -> Path:
    """The job directory every rank of one job writes its `rank<r>/` into; framework-neutral.

    The ranks must agree on its name. `share(value)` returns rank 0's value on every rank (a
    broadcast: torch.distributed's broadcast_object_list, a TF collective): rank 0 then creates
    a fresh `<name>-<framework>-user-x<W>-<stamp>-<hex>` and tells the others. Without one,
    `run_id` (the same on every rank: the launcher's id of this launch) names it
    `<name>-<framework>-user-x<W>-<run_id>`."""
    parts = job_id_parts(safe_name(name), framework, USER_VARIANT, world_size)
    if share is not None:
        created = create_run_dir(out, *parts).name if rank == 0 else None
        job_dir = ensure_out_dir(out) / share(created)
        job_dir.mkdir(exist_ok=True)  # rank 0 made it; a node with its own disk needs its own
        return job_dir
    if not run_id:
        raise ValueError("the ranks of a job need a shared name for its directory: initialise "
                         "torch.distributed before gapscope.capture, or start the script with "
                         "torchrun --rdzv-id NAME")
    return create_job_dir(out, parts, _UNSAFE.sub("-", run_id).strip("-.") or "job")


def launch_run_id() -> str | None:
    """The id every rank of this launch sees without talking to the others: torchrun's
    --rdzv-id (TORCHELASTIC_RUN_ID; a fresh one with --standalone), else, with every rank on
    this node, torchrun's agent process (the ranks' parent) and its start time."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return run_id
    if "LOCAL_WORLD_SIZE" in os.environ and os.environ["LOCAL_WORLD_SIZE"] == os.environ.get("WORLD_SIZE"):
        import psutil
        agent = psutil.Process(os.getppid())
        return f"agent{agent.pid}-{int(agent.create_time())}"
    return None


def torch_share() -> Callable[[str | None], str] | None:
    """A broadcast of rank 0's value over torch.distributed, when a process group is up."""
    dist = _torch_distributed()
    if dist is None:
        return None

    def share(value: str | None) -> str:
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    return share


@contextmanager
def stop_on_sigterm():
    """SIGTERM raises Interrupted in the loop instead of killing the process, so the capture
    records its end, `interrupted` with the steps done (under torchrun, which stops the other
    ranks with SIGTERM when one fails, rank 0 also the job's, naming the rank that failed). Then,
    outside torchrun, SIGTERM is sent again with its default action: the process ends as it
    would have without gapscope, only later. A handler of the user's own is kept."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return
    came = []

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the first one counts
        came.append(signum)
        raise Interrupted(signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        # A handler the loop set meanwhile is the user's: kept.
        current = signal.getsignal(signal.SIGTERM)
        if current is stop or (came and current is signal.SIG_IGN):  # SIG_IGN: stop's own
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if came and "TORCHELASTIC_RUN_ID" not in os.environ:
                signal.raise_signal(signal.SIGTERM)


def compile_record(framework: str, run_dir: Path):
    """Entered: what the user's compiled step compiled, step by step (`end_step(i)`), into
    compile.json on `__exit__`, as `gapscope run --variant compile` records it. torch: Dynamo's
    own records, written only where something compiled (torch.compile, Lightning's compiled
    module, the HF Trainer's torch_compile); tf: the traces of the tf.functions the loop marks
    phases in (PhaseTraces)."""
    if framework == "torch":
        from gapscope.workloads.runners.dynamo_records import DynamoRecorder
        return DynamoRecorder(run_dir, quiet=True, keep_empty=False).__enter__()
    from gapscope.workloads.runners.tf_traces import PhaseTraces
    return PhaseTraces(run_dir)


def safe_name(name: str) -> str:
    workload = _UNSAFE.sub("-", str(name)).strip("-.")
    if not workload:
        raise ValueError(f"run name {name!r} has no letters or digits to name a directory with")
    return workload


def _torch_distributed():
    """torch.distributed when torch is imported already and a process group is up, else None."""
    import sys
    if "torch" not in sys.modules:
        return None  # a TF script: torch is not imported for it
    import torch.distributed as dist
    return dist if dist.is_available() and dist.is_initialized() else None


def trace_window(trace_steps: tuple[int, int] | None) -> TraceWindow | None:
    """`(first, stop)` as in `range(first, stop)`; None records no trace (timers only).

    The first traced step must be 1 or later: the profiler spends one step warming up
    before its window, and that step is better taken from the user's warm-up."""
    if trace_steps is None:
        return None
    first, stop = (int(n) for n in trace_steps)
    if first < 1 or stop <= first:
        raise ValueError(f"trace_steps must be (first, stop) with 1 <= first < stop, got {trace_steps!r}")
    return TraceWindow(first, stop - first)


def default_warmup(window: TraceWindow | None, warmup_steps: int | None) -> int:
    """Unless told, the first 5 steps are warm-up, or fewer where the trace starts earlier."""
    if warmup_steps is not None:
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        return warmup_steps
    return min(5, window.first) if window else 5


class UserRun(RunWithViews):
    """The run directory of a capture, named after the user's run; its life (pid and host,
    complete or failed, interrupted) is run_lifecycle's, as for gapscope's own runs.

    A loop that ends early (Ctrl-C, SIGTERM through stop_on_sigterm, an exception) after some
    steps is recorded `interrupted` with the steps it did, which breakdown analyses; before any,
    `failed`. A process killed outright (SIGKILL) leaves the manifest `running` with a pid that
    is gone, and the steps.csv its live flushes wrote: effective_status reads it as interrupted,
    and breakdown its whole steps."""

    def __init__(self, name: str, framework: str, out: str | Path, settings: dict,
                 warmup_steps: int, place: RankPlace | None = None, *,
                 share: Callable[[str | None], str] | None = None, run_id: str | None = None):
        workload = safe_name(name)
        fields = {"workload": workload, "framework": framework, "variant": USER_VARIANT,
                  "settings": settings, "warmup_steps": warmup_steps}
        self.place, self.job_dir, self._job_ended = place, None, False
        if place is None:
            run = RunLifecycle.create(out, (workload, framework, USER_VARIANT),
                                      {**fields, "device": None, "versions": None})
        else:  # one rank of a job: `rank<r>/` of the job directory the ranks agree on
            # How the ranks agree on the job's name: the caller's broadcast or id (a TF
            # script's), else torch.distributed's broadcast, else the launcher's run id.
            share = share or (None if run_id else torch_share())
            self.job_dir = job_dir_for(out, workload, framework, place.rank, place.world_size,
                                       share=share, run_id=run_id or launch_run_id())
            if place.rank == 0 and not (self.job_dir / MANIFEST).exists():
                start_job(self.job_dir, fields, {
                    "world_size": place.world_size, "nnodes": _nnodes(place),
                    "backend": place.backend, "launcher": "user"})
            directory = rank_dir(self.job_dir, place.rank)
            directory.mkdir()
            run = RunLifecycle.start(directory, {**fields, "device": None, "versions": None,
                                                 **place.fields(self.job_dir.name)})
        super().__init__(run.run_dir, run.manifest)
        self._load_before = load_snapshot()  # whether others shared the machine meanwhile

    def complete(self, rows: list[dict], facts: dict) -> None:
        """TensorBoard's summaries and trace viewer are views of the run: failing to write them
        must not turn a finished training loop into an exception, so the problem is recorded and
        warned of."""
        facts = {**facts, "machine_load": load_between(self._load_before, load_snapshot())}
        problem = super().complete(rows, {**facts, **self._late_backend()})
        if problem:
            warnings.warn(f"gapscope: TensorBoard views of {self.run_dir} incomplete: {problem}",
                          stacklevel=3)
        self._end_job()

    def fail(self, rows, facts, exc) -> bool:
        self.stopped_status = INTERRUPTED_STATUS if rows else "failed"
        with stop_signals_deferred():  # the rank's end and, on rank 0, the job's
            recorded = super().fail(rows, {**facts, **self._late_backend()}, exc)
            self._end_job()
        return recorded

    def _late_backend(self) -> dict:
        """The backend of a process group the script initialised after the capture started."""
        if self.place is None or self.manifest.data.get("backend"):
            return {}
        dist = _torch_distributed()
        return {"backend": str(dist.get_backend())} if dist is not None else {}

    def _end_job(self) -> None:
        """Rank 0 writes the job's end once the ranks' ends are known: after its own complete
        run it waits (on their files: a dead rank joins no barrier) for the others to end; after
        its own failure it does not, since ranks blocked in a collective with it end only once
        this process has gone."""
        if self.place is None or self.place.rank != 0 or self._job_ended:
            return
        self._job_ended = True
        if self.status == "complete":
            wait_for_ranks(self.job_dir, range(self.place.world_size), RANKS_WAIT_S)
        try:
            finish_job(self.job_dir, self.place.world_size)
        except OSError as exc:
            warnings.warn(f"gapscope: the job manifest of {self.job_dir} could not be written: {exc}",
                          stacklevel=3)


def _nnodes(place: RankPlace) -> int:
    local = int(os.environ.get("LOCAL_WORLD_SIZE", place.world_size) or place.world_size)
    return max(1, place.world_size // max(1, local))
