"""A distributed run's job directory: one ordinary run directory per rank (`rank<r>/`) and a job
manifest that says how every rank ended, whichever launcher (torchrun, a user's script) ran them."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from gapscope.profilers import environment, state_json
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.run_lifecycle import INTERRUPTED
from gapscope.profilers.run_dir import ENDED, MANIFEST, Manifest, create_run_dir, ensure_out_dir, status_of

RANK_PREFIX = "rank"
# How long the job's finaliser waits for ranks it did not start (other nodes, other processes
# of a user's script) to record their end, once its own are done.
RANKS_WAIT_S = 60.0
# How the launcher words a rank that torchrun stopped because another rank had failed.
STOPPED_BY_TORCHRUN = "stopped by torchrun"
# Errors a rank gets because ANOTHER rank went away: a collective whose peer closed its socket,
# a store whose host died, a timeout waiting on a peer, the SIGTERM torchrun sends the
# survivors. Such a rank is not the root cause while a rank with any other error exists.
_SECONDARY = re.compile(
    r"interrupted|connection (closed|reset)|by peer|remote worker|broken pipe|DistBackendError|"
    r"DistNetworkError|DistStoreError|timed out|timeout|Gloo|NCCL|ProcessGroup|TCPStore|"
    r"exited with code (143|-15)|" + STOPPED_BY_TORCHRUN, re.IGNORECASE)


def rank_dir(job_dir: Path, rank: int) -> Path:
    return Path(job_dir) / f"{RANK_PREFIX}{int(rank)}"


def job_id_parts(workload: str, framework: str, variant: str, world_size: int) -> tuple[str, ...]:
    """The id parts of a job directory's name: the run's, plus `x<world size>`."""
    return (workload, framework, variant.replace(",", "+"), f"x{int(world_size)}")


def create_job_dir(out_dir: str | Path, parts: tuple[str, ...], job_id: str | None = None) -> Path:
    """A fresh job directory `<parts>-<stamp>-<hex>`; with `job_id` (several nodes, which must
    agree on the name without talking) `<parts>-<job_id>`, shared by the nodes that name it.
    A job id whose job has ended already is refused: its ranks would mix with the new ones."""
    if job_id is None:
        return create_run_dir(out_dir, *parts)
    job_dir = ensure_out_dir(out_dir) / "-".join([*(p for p in parts if p), job_id])
    status, _ = status_of(job_dir) if (job_dir / MANIFEST).exists() else (None, None)
    if status in ENDED:
        raise GapscopeInputError(f"job id {job_id}: {job_dir} holds a job that has ended "
                                 f"({status}); give this job another id (gapscope run --job-id, "
                                 "torchrun --rdzv-id)")
    try:
        job_dir.mkdir(exist_ok=True)
    except OSError as exc:
        raise GapscopeInputError(f"output folder {out_dir}: cannot create the job directory: "
                                 f"{exc.strerror or exc}") from None
    return job_dir


def start_job(job_dir: Path, fields: dict, distributed: dict) -> Manifest:
    """The job manifest, `running`, as an ordinary run manifest plus its "distributed" block."""
    return Manifest.start(job_dir, {
        "run_id": job_dir.name, **fields, "host": environment.host(), "pid": os.getpid(),
        "distributed": {**distributed, "ranks": []}})


def wait_for_ranks(job_dir: Path, ranks: range, timeout_s: float, poll_s: float = 0.25) -> None:
    """Returns once every rank's run has ended (or its process is gone), or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(status_of(rank_dir(job_dir, r))[0] in ENDED for r in ranks):
            return
        time.sleep(poll_s)


def rank_entries(job_dir: Path, world_size: int) -> list[dict]:
    """One entry per rank: its directory, host, node and how its run ended, as its files say."""
    entries = []
    for rank in range(world_size):
        directory = rank_dir(job_dir, rank)
        entry = {"rank": rank, "dir": directory.name, "host": None, "node_rank": None,
                 "status": "failed", "error": None, "ended_at": None}
        if not directory.is_dir():
            entry["error"] = (f"its run directory {directory.name} is not here: the rank never "
                              f"started, or its node writes to a folder {environment.host()} "
                              "cannot see (give every node the same shared --out)")
            entries.append(entry)
            continue
        try:
            manifest = state_json.load(directory / MANIFEST)
        except (OSError, ValueError):
            manifest = {}
        manifest = manifest if isinstance(manifest, dict) else {}
        status, error = status_of(directory)
        entry.update(host=manifest.get("host"), node_rank=manifest.get("node_rank"),
                     ended_at=manifest.get("ended_at"), backend=manifest.get("backend"))
        if status is None:
            entry["error"] = f"no readable manifest in {directory.name}: the rank never started"
        elif status == "running":
            entry.update(status="running", error="still running when the job was finalised "
                                                 "(a rank on another host: its end is unknown here)")
        else:
            entry.update(status=status, error=error)
        entries.append(entry)
    return entries


def root_cause(entries: list[dict]) -> dict | None:
    """The rank whose failure the others followed: of the failed (or unfinished) ranks, one whose
    error is not a consequence of another rank going away, first to end; else the first to end."""
    failed = [e for e in entries if e["status"] != "complete"]
    if not failed:
        return None
    # A rank whose process vanished without a word (killed, segfault) did not follow anyone.
    primary = [e for e in failed if e["status"] in ENDED and (
        not _SECONDARY.search(e["error"] or "") or " is gone)" in (e["error"] or ""))]
    pool = primary or failed
    return min(pool, key=lambda e: (e["ended_at"] or "~", e["rank"]))  # no end time sorts last


def finish_job(job_dir: Path, world_size: int, interrupted: bool = False,
               note: str | None = None) -> tuple[str, str | None]:
    """Writes the job manifest's end from its ranks' manifests: complete iff every rank is,
    else failed `rank R: <error>` (`interrupted` when the job was stopped by a signal).
    `note`: said instead when no rank got far enough to say anything (a launcher that failed)."""
    manifest = Manifest.reopen(job_dir)
    entries = rank_entries(job_dir, world_size)
    cause = root_cause(entries)
    error = None
    stopped = [e for e in entries if e["status"] != "complete"]
    if cause is not None and (interrupted or all(e["error"] == INTERRUPTED for e in stopped)):
        error = INTERRUPTED  # stopped by a signal, not by a rank's failure
    elif cause is not None:
        never_started = all(e["host"] is None for e in entries)
        error = (f"no rank started: {note}" if never_started and note else
                 f"rank {cause['rank']}: {cause['error'] or cause['status']}")
    distributed = {**manifest.data.get("distributed", {}),
                   "ranks": [{k: v for k, v in e.items() if k not in ("ended_at", "backend")}
                             for e in entries]}
    if not distributed.get("backend"):  # a user's script that set up its process group later
        distributed["backend"] = next((e["backend"] for e in entries if e.get("backend")), None)
    manifest.update(distributed=distributed)
    manifest.finish(error=error)
    return manifest.status, error
