"""Starts a distributed run, one rank per process (workloads.runners.execute_rank) into a job directory:
torch through torchrun, Keras/TF through workloads.runners.local_agent (a TF_CONFIG per worker); records
in the job manifest how the job and each rank ended."""
from __future__ import annotations

import ctypes
import errno
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from gapscope.profilers import strict_json
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.job_dir import (RANKS_WAIT_S, STOPPED_BY_TORCHRUN, create_job_dir, finish_job,
                               job_id_parts, rank_dir, start_job, wait_for_ranks)
from gapscope.profilers.nvml import gpu_count
from gapscope.profilers.run_lifecycle import INTERRUPTED, RunLifecycle
from gapscope.workloads.child_process import RunInterrupted, RunOutcome, _Forwarder, _last_line, child_env
from gapscope.workloads.registry import check_framework, get_workload
from gapscope.workloads.settings import RunSettings, split_endpoint
from gapscope.workloads.runners.step_report import parse

# torchrun --tee prefixes each line of a worker with its role and local rank: "[default1]:...".
_TEE_LINE = re.compile(r"^\[default(\d+)\]:(.*)$", re.DOTALL)
# torchrun's failure summary: "rank : 1 (local_rank: 1)" then "exitcode : -9 (pid: 4321)".
_FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
# torchrun's warning for each worker it stops because another failed (then, 30 s later, SIGKILL
# for one still there): such a rank followed the failure, whatever its exit code says.
_CLOSING = re.compile(r"Sending process (\d+) closing signal (\w+)")
_PR_SET_PDEATHSIG = 1
# The backend recorded for Keras/TF jobs: MultiWorkerMirroredStrategy's collectives.
TF_BACKEND = "tf-collective"


def launch_job(settings: RunSettings, out_dir: str | Path,
               on_steps: Callable[[int], None] = lambda done: None) -> RunOutcome:
    """This node's part of a distributed run: its ranks under torchrun, each an ordinary run in
    `<job>/rank<r>/`; node 0 also writes the job manifest and, once every rank's run has ended
    (those of other nodes too, waited for), its end. Signals are forwarded as for one run:
    torchrun passes them to its ranks, which record `failed: interrupted`."""
    get_workload(settings.workload)
    check_framework(settings.framework)
    use_torchrun = settings.framework == "torch"
    if settings.framework in ("keras-torch", "keras-jax"):
        raise GapscopeInputError(f"--nproc/--nnodes with --framework {settings.framework}: Keras on "
                                 f"{settings.framework[6:]} has no multi-process strategy here; use "
                                 "torch, or keras (TF)")
    if not use_torchrun and settings.nnodes > 1:
        raise GapscopeInputError(f"--nnodes with --framework {settings.framework}: only torch "
                                 "runs on several nodes here (TensorFlow: set TF_CONFIG yourself)")
    settings = settings.with_variant(cuda_available=gpu_count() > 0)
    backend = _backend(settings) if use_torchrun else TF_BACKEND
    endpoint = _endpoint(settings) if use_torchrun else None
    job_dir = create_job_dir(out_dir, job_id_parts(settings.workload, settings.framework,
                                                   settings.variant, settings.world_size),
                             settings.job_id)
    if settings.node_rank == 0:
        start_job(job_dir, {"workload": settings.workload, "framework": settings.framework,
                            "variant": settings.variant, "settings": settings.to_dict(),
                            "warmup_steps": settings.warmup_steps},
                  {"world_size": settings.world_size, "nnodes": settings.nnodes,
                   "nproc_per_node": settings.nproc, "backend": backend,
                   "launcher": "torchrun" if use_torchrun else "tf.distribute", "rdzv_endpoint": endpoint})
    logs = tempfile.mkdtemp(prefix="gapscope-torchrun-")  # torchrun's --tee needs a log folder
    try:
        rank_args = [str(job_dir), strict_json.dumps(settings.to_dict()), backend]
        if use_torchrun:
            command = _torchrun(settings, endpoint, settings.job_id or job_dir.name, logs) + [
                "-m", "gapscope.workloads.runners.execute_rank", *rank_args]
        else:  # TensorFlow's workers: local_agent gives each its TF_CONFIG
            command = [sys.executable, "-m", "gapscope.workloads.runners.local_agent", str(settings.nproc), "--",
                       sys.executable, "-m", "gapscope.workloads.runners.execute_rank", *rank_args]
        with _Forwarder() as forwarder:
            process = subprocess.Popen(command, env=child_env(), stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                       errors="replace", process_group=0,
                                       preexec_fn=_stop_with_launcher)
            output = forwarder.wait(process, on_steps, _first_rank_progress)
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    interrupted = forwarder.signum is not None
    outcome = _record(job_dir, settings, process.returncode, output, interrupted)
    if interrupted:
        raise RunInterrupted(forwarder.signum, outcome)
    return outcome


def _backend(settings: RunSettings) -> str:
    """gloo on CPU, nccl on CUDA GPUs (one per rank of this node)."""
    cuda = settings.device == "cuda" or (settings.device == "auto" and gpu_count() > 0)
    if not cuda:
        return "gloo"
    if gpu_count() < settings.nproc:
        raise GapscopeInputError(f"--nproc {settings.nproc} on CUDA needs a GPU per rank; "
                                 f"this machine has {gpu_count()} (or use --device cpu)")
    return "nccl"


def _endpoint(settings: RunSettings) -> str:
    """The rendezvous host:port: the user's (checked free where this node hosts it), else a
    free port here."""
    if settings.rdzv_endpoint is None:
        return f"localhost:{_free_port()}"
    host, port = split_endpoint(settings.rdzv_endpoint)
    if settings.node_rank == 0:  # node 0 listens there; other nodes only connect
        _check_free(host, port, settings.rdzv_endpoint)
    return settings.rdzv_endpoint


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _check_free(host: str, port: int, endpoint: str) -> None:
    """Node 0's rendezvous store listens on every address of the port: anything else there
    (on any address) makes torchrun fail late and obscurely, so it is refused now."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise GapscopeInputError(f"--rdzv-endpoint {endpoint}: unknown host ({exc.strerror})") from None
    probes = [(socket.AF_INET, ("", port))] + [(family, address) for family, _, _, _, address in infos]
    for family, address in probes:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the store does
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise GapscopeInputError(
                        f"--rdzv-endpoint {endpoint}: port {port} is in use on this host; pick "
                        "another, or leave --rdzv-endpoint out for a free one (one node)") from None
                if exc.errno == errno.EADDRNOTAVAIL:
                    raise GapscopeInputError(
                        f"--rdzv-endpoint {endpoint}: {host} is not an address of this machine; "
                        "node 0 (--node-rank 0) runs where the endpoint points") from None
                raise GapscopeInputError(f"--rdzv-endpoint {endpoint}: {exc.strerror or exc}") from None


def _torchrun(settings: RunSettings, endpoint: str, run_id: str, logs: str) -> list[str]:
    command = [sys.executable, "-m", "torch.distributed.run",
               "--nproc-per-node", str(settings.nproc), "--nnodes", str(settings.nnodes),
               "--rdzv-endpoint", endpoint, "--rdzv-id", run_id, "--max-restarts", "0",
               "--tee", "3", "--log-dir", logs]
    if settings.nnodes == 1:
        return command + ["--rdzv-backend", "c10d"]
    # Static rendezvous: --node-rank is the user's (c10d would number the nodes as they come).
    return command + ["--rdzv-backend", "static", "--node-rank", str(settings.node_rank)]


def _stop_with_launcher() -> None:
    """In torchrun, before it starts: a SIGTERM when the launcher dies, even by SIGKILL; torchrun
    then stops its ranks, which record `interrupted` (each rank also watches torchrun)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _first_rank_progress(line: str) -> int | None:
    """The progress of this node's local rank 0 stands for the job's (the ranks keep step)."""
    match = _TEE_LINE.match(line)
    return parse(match.group(2)) if match and match.group(1) == "0" else None


def _record(job_dir: Path, settings: RunSettings, exit_code: int, output: str,
            interrupted: bool) -> RunOutcome:
    """Writes the logs, ends the runs of this node's ranks that could not end themselves, and
    (node 0) the job manifest; the outcome is the job's, or on another node its own ranks'."""
    node = settings.node_rank
    _write_logs(job_dir, settings, output)
    codes = {int(rank): int(code) for rank, code in _FAILURE.findall(output)}
    closed = {int(pid): signame for pid, signame in _CLOSING.findall(output)}
    local_ranks = range(node * settings.nproc, (node + 1) * settings.nproc)
    for rank in local_ranks:
        directory = rank_dir(job_dir, rank)
        if not directory.is_dir():
            continue
        run = RunLifecycle.reopen(directory)
        if run.status == "running":  # killed outright, or stopped before it could say so
            code = codes.get(rank, "?")
            stopped_by = closed.get(run.manifest.data.get("pid"))
            if interrupted:
                error = INTERRUPTED
            elif stopped_by:
                # Stuck where Python cannot take the signal (a store wait at start-up, on a
                # loaded machine), it ends by SIGKILL like the rank that really failed.
                error = (f"{STOPPED_BY_TORCHRUN} ({stopped_by}) after another rank failed, and "
                         f"exited with code {code} before recording its end")
            else:
                error = f"rank process exited with code {code} before recording its end"
            run.end_unrecorded(error)
    if node == 0:
        if settings.nnodes > 1:
            wait_for_ranks(job_dir, range(settings.world_size), RANKS_WAIT_S)
        status, error = finish_job(job_dir, settings.world_size, interrupted,
                                   note=f"torchrun exited with code {exit_code}: {_last_line(output)}")
        return RunOutcome(job_dir, status, error, exit_code)
    # Another node: its own ranks' outcome; node 0 records the job's.
    from gapscope.profilers.job_dir import rank_entries, root_cause
    mine = [e for e in rank_entries(job_dir, settings.world_size) if e["rank"] in local_ranks]
    cause = root_cause(mine)
    if cause is None:
        return RunOutcome(job_dir, "complete", None, exit_code)
    return RunOutcome(job_dir, "failed", f"rank {cause['rank']}: {cause['error']}", exit_code)


def _write_logs(job_dir: Path, settings: RunSettings, output: str) -> None:
    """torchrun's whole output beside the job manifest (one file per node), and each rank's
    own lines, without the progress lines, in its run directory's run.log."""
    per_rank: dict[int, list[str]] = {}
    for line in output.splitlines(keepends=True):
        match = _TEE_LINE.match(line)
        if match and parse(match.group(2)) is None:
            per_rank.setdefault(int(match.group(1)), []).append(match.group(2))
    name = "run.log" if settings.node_rank == 0 else f"run.node{settings.node_rank}.log"
    try:
        (job_dir / name).write_text(output)
        # Every rank gets its run.log, empty where it said nothing but progress (Kineto's own
        # lines are silenced), so a rank directory is laid out as a run's always is.
        for local in range(settings.nproc):
            directory = rank_dir(job_dir, settings.node_rank * settings.nproc + local)
            if directory.is_dir():
                (directory / "run.log").write_text("".join(per_rank.get(local, [])))
    except OSError:
        pass  # a full disk: the manifests written next matter more than the logs
