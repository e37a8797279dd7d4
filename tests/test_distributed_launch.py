"""`gapscope run --framework torch --nproc N` and the two-"node" run: real torchrun jobs of DDP
ranks, each an ordinary run in one job directory; bad input and dying ranks end honestly."""
from __future__ import annotations

import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from gapscope.profilers.job_dir import root_cause
from gapscope.workloads.settings import RunSettings

ROOT = Path(__file__).resolve().parent.parent
# Tiny ranks: a 2-core machine runs both ranks and their torchrun agent at once.
TINY = ["--steps", "12", "--warmup", "3", "--trace-steps", "4", "--batch-size", "16", "-q"]


def _gapscope(args: list[str], env: dict | None = None) -> subprocess.Popen:
    """gapscope in its own session, so a signal reaches it alone and the test can end it."""
    return subprocess.Popen([sys.executable, str(ROOT / "cli.py"), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)


def _finish(process: subprocess.Popen, timeout: float = 240) -> tuple[str, str]:
    try:
        return process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _manifest(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def _wait_for(condition, timeout: float = 120, what: str = "it", poll_s: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(poll_s)
    raise AssertionError(f"timed out waiting for {what}")


def _job(out: Path) -> Path:
    jobs = [p for p in out.iterdir() if p.is_dir()]
    assert len(jobs) == 1, jobs
    return jobs[0]


def _processes_of(job_dir: Path) -> list[psutil.Process]:
    """Processes still running anything of this job (torchrun, its ranks)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(str(job_dir) in part for part in process.info["cmdline"] or []):
            found.append(process)
    return found


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp")
    process = _gapscope(["run", "mlp", "--framework", "torch", "--nproc", "2", *TINY,
                         "--out", str(out)])
    stdout, stderr = _finish(process)
    assert process.returncode == 0, stderr
    return _job(out)


def test_job_directory_holds_one_ordinary_run_per_rank(job):
    assert job.name.startswith("mlp-torch-default-x2-")
    manifest = _manifest(job)
    assert manifest["status"] == "complete" and manifest["error"] is None
    assert manifest["settings"]["nproc"] == 2
    distributed = manifest["distributed"]
    assert {k: distributed[k] for k in ("world_size", "nnodes", "backend", "launcher")} == {
        "world_size": 2, "nnodes": 1, "backend": "gloo", "launcher": "torchrun"}
    assert [(r["rank"], r["dir"], r["status"], r["node_rank"]) for r in distributed["ranks"]] == [
        (0, "rank0", "complete", 0), (1, "rank1", "complete", 0)]
    assert all(r["host"] == socket.gethostname() for r in distributed["ranks"])
    assert (job / "run.log").stat().st_size > 0
    for rank in (0, 1):
        run = _manifest(job / f"rank{rank}")
        assert (run["status"], run["rank"], run["world_size"], run["job_id"], run["backend"]) == (
            "complete", rank, 2, job.name, "gloo")
        # What each step all-reduces: every gradient, float32, in DDP's buckets.
        ddp = run["ddp"]
        assert ddp["total_parameter_size_bytes"] == 4 * run["parameters"]
        assert sum(ddp["rebuilt_bucket_sizes"]) == ddp["total_parameter_size_bytes"]
        steps = (job / f"rank{rank}" / "steps.csv").read_text().splitlines()
        assert len(steps) == 1 + 12  # every rank ran every step
        assert (job / f"rank{rank}" / "resources.csv").exists()
        assert (job / f"rank{rank}" / "run.log").exists()


def test_each_rank_trace_says_its_rank_and_shows_ddp_allreduces(job):
    """The facts the analysis builds on, checked on this torch: distributedInfo in every rank's
    trace; DDP's all-reduces as c10d::allreduce_ ops inside backward on the training thread;
    gloo's own work as gloo:all_reduce ranges on other threads."""
    for rank in (0, 1):
        [trace] = (job / f"rank{rank}").glob("*.pt.trace.json.gz")
        data = json.loads(gzip.decompress(trace.read_bytes()))
        info = data["distributedInfo"]
        assert (info["backend"], info["rank"], info["world_size"]) == ("gloo", rank, 2)
        events = [e for e in data["traceEvents"] if e.get("ph") == "X"]
        backward = [e for e in events if e["name"] == "gapscope/backward"]
        allreduces = [e for e in events if e["name"] == "c10d::allreduce_"]
        assert len(allreduces) >= 4  # at least one bucket in each of the 4 traced steps
        main_thread = {e["tid"] for e in backward}
        assert all(e["tid"] in main_thread and any(
            b["ts"] <= e["ts"] and e["ts"] + e["dur"] <= b["ts"] + b["dur"] for b in backward)
            for e in allreduces)
        gloo = [e for e in events if e["name"] == "gloo:all_reduce"]
        assert gloo and not {e["tid"] for e in gloo} & main_thread


def test_ranks_train_on_disjoint_shards_of_the_job_data():
    from gapscope.workloads.registry import get_workload
    from gapscope.workloads.shards import rank_shard
    settings = RunSettings("mlp", "torch", steps=6, batch_size=8)
    spec = get_workload("mlp").sized(8, None)
    shards = [rank_shard(spec, settings, rank, 3) for rank in range(3)]
    assert [len(x) for x, _ in shards] == [6 * 8] * 3  # each rank: its steps at the batch
    rows = np.concatenate([x for x, _ in shards])
    assert len(np.unique(rows, axis=0)) == 3 * 6 * 8  # no sample on two ranks


def test_one_process_settings_are_unchanged():
    data = RunSettings("mlp", "torch").to_dict()
    assert not {"nproc", "nnodes", "node_rank", "rdzv_endpoint", "job_id"} & set(data)
    assert RunSettings.from_dict(RunSettings("mlp", "torch", nproc=3).to_dict()).nproc == 3


@pytest.mark.parametrize("args, expected", [
    (["--nproc", "0"], "--nproc must be a whole number from 1"),
    (["--nproc", "2", "--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint"),
    (["--nproc", "2", "--rdzv-endpoint", "nohost"], "expected HOST:PORT"),
    (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "localhost:1", "--job-id", "a"],
     "--node-rank must be a whole number from 0 to 1"),
    (["--nproc", "2", "--job-id", "../up"], "--job-id '../up'"),
])
def test_bad_distributed_input_is_one_line_and_creates_nothing(tmp_path, args, expected):
    out = tmp_path / "out"
    process = _gapscope(["run", "mlp", "--framework", "torch", *args, *TINY, "--out", str(out)])
    _, stderr = _finish(process, timeout=60)
    assert process.returncode == 2
    assert stderr.count("\n") == 1 and expected in stderr, stderr
    assert not out.exists()


def test_a_rendezvous_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = _gapscope(["run", "mlp", "--framework", "torch", "--nproc", "2",
                             "--rdzv-endpoint", f"localhost:{port}", *TINY, "--out", str(tmp_path)])
        _, stderr = _finish(process, timeout=60)
    assert process.returncode == 2
    assert stderr.strip() == (f"gapscope: error: --rdzv-endpoint localhost:{port}: port {port} is "
                              "in use on this host; pick another, or leave --rdzv-endpoint out "
                              "for a free one (one node)")
    assert list(tmp_path.iterdir()) == []


def _long_job(out: Path, framework: str = "torch") -> tuple[subprocess.Popen, Path]:
    """A job long enough to be stopped midway, once both ranks are training."""
    steps = "100000" if framework == "torch" else "20000"  # Keras holds every step's data at once
    process = _gapscope(["run", "mlp", "--framework", framework, "--nproc", "2", "--steps", steps,
                         "--no-trace", "--batch-size", "16", "-q", "--out", str(out)])
    job = _wait_for(lambda: next((p for p in out.iterdir() if p.is_dir()), None) if out.exists()
                    else None, what="the job directory")
    _wait_for(lambda: all((job / f"rank{r}" / "manifest.json").exists() for r in (0, 1)),
              what="both ranks' manifests")
    # Into the training loop, past the process group's start (TF workers take longer to start).
    time.sleep(3 if framework == "torch" else 10)
    return process, job


def test_a_rank_killed_fails_the_job_naming_it_and_stops_the_others(tmp_path):
    process, job = _long_job(tmp_path)
    os.kill(_manifest(job / "rank1")["pid"], signal.SIGKILL)
    _, stderr = _finish(process)
    assert process.returncode == 1
    manifest = _manifest(job)
    assert manifest["status"] == "failed"
    assert manifest["error"].startswith("rank 1: rank process exited with code -9"), manifest["error"]
    ranks = {r["rank"]: r for r in manifest["distributed"]["ranks"]}
    assert ranks[1]["status"] == ranks[0]["status"] == "failed"
    assert _manifest(job / "rank0")["status"] == "failed"
    assert f"run {job.name} failed: rank 1:" in stderr
    assert _processes_of(job) == []


@pytest.mark.parametrize("framework, signum", [("torch", signal.SIGTERM), ("torch", signal.SIGINT),
                                               ("keras", signal.SIGINT)])
def test_a_stopped_launcher_records_every_rank_and_the_job_interrupted(tmp_path, framework, signum):
    # Keras: TF's preemption notifier had taken SIGTERM from the workers (they trained on to the
    # end), and a SIGTERM landing in TF's error handling came out as a RuntimeError.
    process, job = _long_job(tmp_path, framework)
    process.send_signal(signum)
    _, stderr = _finish(process)
    assert process.returncode == 128 + signum
    manifest = _manifest(job)
    assert (manifest["status"], manifest["error"]) == ("failed", "interrupted")
    for rank in (0, 1):
        assert (_manifest(job / f"rank{rank}")["status"], _manifest(job / f"rank{rank}")["error"]) == (
            "failed", "interrupted")
        assert manifest["distributed"]["ranks"][rank]["error"] == "interrupted"
    assert _processes_of(job) == []


def test_root_cause_prefers_a_rank_whose_error_is_its_own():
    entries = [
        {"rank": 0, "status": "failed", "ended_at": "2026-01-01T00:00:01",
         "error": "DistBackendError: Connection closed by peer [127.0.0.1]:1234"},
        {"rank": 1, "status": "failed", "ended_at": "2026-01-01T00:00:02",
         "error": "ValueError: the user's loop broke"},
        {"rank": 2, "status": "failed", "ended_at": "2026-01-01T00:00:00", "error": "interrupted"},
        {"rank": 3, "status": "complete", "ended_at": "2026-01-01T00:00:00", "error": None},
    ]
    assert root_cause(entries)["rank"] == 1
    assert root_cause(entries[:1] + entries[2:])["rank"] == 2  # only consequences: the first
    assert root_cause(entries[3:]) is None


def test_two_nodes_on_localhost_write_one_job_directory(tmp_path):
    """The README's two-node command, both "nodes" on this host: node 0 hosts the rendezvous
    and finalises the job once node 1's rank has ended too."""
    port = _free_port()
    common = ["run", "mlp", "--framework", "torch", "--nnodes", "2", "--nproc", "1",
              "--rdzv-endpoint", f"localhost:{port}", "--job-id", "two-nodes", *TINY,
              "--out", str(tmp_path)]
    node0 = _gapscope([*common, "--node-rank", "0"])
    time.sleep(1)  # node 0 checks its port before node 1 comes and connects to it
    node1 = _gapscope([*common, "--node-rank", "1"])
    out1, err1 = _finish(node1)
    out0, err0 = _finish(node0)
    assert (node0.returncode, node1.returncode) == (0, 0), (err0, err1)
    assert "node 1: its ranks ended" in out1
    job = _job(tmp_path)
    assert job.name == "mlp-torch-default-x2-two-nodes"
    manifest = _manifest(job)
    assert manifest["status"] == "complete"
    assert manifest["distributed"]["nnodes"] == 2 and manifest["distributed"]["world_size"] == 2
    assert [(r["rank"], r["node_rank"], r["status"]) for r in manifest["distributed"]["ranks"]] == [
        (0, 0, "complete"), (1, 1, "complete")]
    assert (job / "run.log").exists() and (job / "run.node1.log").exists()
    assert _manifest(job / "rank1")["node_rank"] == 1
    # The id names one job: reusing it once the job ended would mix two jobs' ranks.
    again = _gapscope([*common, "--node-rank", "0"])
    _, stderr = _finish(again, timeout=60)
    assert again.returncode == 2 and "job id two-nodes:" in stderr and "holds a job" in stderr


def test_ranks_whose_files_are_not_visible_fail_the_job_saying_so(tmp_path):
    from gapscope.profilers.job_dir import finish_job, start_job
    from gapscope.profilers.run_lifecycle import RunLifecycle
    job = tmp_path / "job"
    job.mkdir()
    start_job(job, {"workload": "mlp"}, {"world_size": 2})
    (job / "rank0").mkdir()
    RunLifecycle.start(job / "rank0", {"rank": 0}).manifest.finish()
    status, error = finish_job(job, 2)
    assert status == "failed"
    assert error.startswith("rank 1: its run directory rank1 is not here")
    assert "same shared --out" in error
    ranks = _manifest(job)["distributed"]["ranks"]
    assert [r["status"] for r in ranks] == ["complete", "failed"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def test_local_agent_gives_each_worker_its_place_and_stops_the_rest_when_one_fails():
    """The agent of Keras/TF jobs: RANK, WORLD_SIZE and a TF_CONFIG per worker; the first
    failure stops the others and heads torchrun's failure summary."""
    worker = ("import json, os, sys, time; rank = int(os.environ['RANK']); "
              "config = json.loads(os.environ['TF_CONFIG']); "
              "print(rank, os.environ['WORLD_SIZE'], config['task']['index'], "
              "len(set(config['cluster']['worker'])), flush=True); "
              "time.sleep(0.5 if rank == 0 else 120); sys.exit(3)")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gapscope.workloads.runners.local_agent", "2", "--",
                           sys.executable, "-c", worker], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert time.monotonic() - started < 30  # rank 1 did not sleep its 120 s
    assert done.returncode == 1
    assert "[default0]:0 2 0 2" in done.stdout and "[default1]:1 2 1 2" in done.stdout
    summary = done.stdout[done.stdout.index("Root Cause"):]
    assert "rank      : 0 (local_rank: 0)\n  exitcode  : 3" in summary
    assert "rank      : 1 (local_rank: 1)\n  exitcode  : -15" in summary


def test_keras_nproc_runs_its_workers_into_one_job(tmp_path):
    process = _gapscope(["run", "mlp", "--framework", "keras", "--nproc", "2", *TINY,
                         "--format", "json", "--out", str(tmp_path)])
    _, stderr = _finish(process)
    assert process.returncode == 0, stderr
    job = _job(tmp_path)
    assert job.name.startswith("mlp-keras-default-x2-")
    manifest = _manifest(job)
    assert (manifest["status"], manifest["distributed"]["launcher"],
            manifest["distributed"]["backend"]) == ("complete", "tf.distribute", "tf-collective")
    assert [_manifest(job / f"rank{r}")["rank"] for r in (0, 1)] == [0, 1]
    # Only the chief traced; the job still breaks down, its ranks compared on their timers.
    done = subprocess.run([sys.executable, str(ROOT / "cli.py"), "breakdown", str(job), "--format", "json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    text = json.dumps(result)
    assert "rank 1 was not traced: a TensorFlow multi-worker run traces rank 0 only" in text
    assert "rank1 not traced: waiting, skew and straggler taken on every rank's step timers" in text


# Put on the job's PYTHONPATH, this holds rank 0 inside stop_tf_profiler (the marker set, the
# stop not yet begun) long enough for a signal to land there at any load: the stop itself lasts
# ~0.1 s, which a poll on a loaded machine missed in 1 of 3 suites even with three attempts.
_HOLD_RANK0_IN_STOP = """
import os
if os.environ.get("RANK") == "0":
    import time
    import gapscope.profilers.written_traces as written
    _checked_writes = written.checked_writes

    def _held(*args, **kwargs):
        time.sleep(120)
        return _checked_writes(*args, **kwargs)
    written.checked_writes = _held
"""


def _abort_in_profiler_stop(tmp_path: Path, marker_name: str):
    """A two-worker TF job whose rank 0 gets SIGABRT while its profiler stops, run to its end:
    (process, stderr, out)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_HOLD_RANK0_IN_STOP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(hook), str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "out"
    process = _gapscope(["run", "mlp", "--framework", "tf", "--nproc", "2", *TINY,
                         "--out", str(out)], env)
    marker = _wait_for(lambda: next(out.glob(f"*/rank0/{marker_name}"), None)
                       or process.poll() is not None, timeout=300,
                       what="rank 0 stopping its profiler")
    assert marker is not True, "the job ended before rank 0 stopped its profiler"
    os.kill(_manifest(marker.parent)["pid"], signal.SIGABRT)
    _, stderr = _finish(process)
    assert marker.exists()  # a process that dies inside the stop leaves the marker behind
    return process, stderr, out


def test_a_tf_worker_crashing_in_its_profiler_stop_fails_the_job_naming_it(tmp_path):
    # What TensorFlow 2.21 did to non-chief workers (which no longer trace), done on purpose to
    # the chief: SIGABRT while its profiler stops. The job names the crash and the rank; the
    # peer, whose collective broke or who was told to stop, is not blamed.
    from gapscope.profilers.written_traces import TF_PROFILER_ABORT, TF_PROFILER_STOPPING
    process, stderr, out = _abort_in_profiler_stop(tmp_path, TF_PROFILER_STOPPING)
    job = _job(out)
    assert process.returncode == 1
    assert stderr.strip().splitlines()[-1] == f"gapscope: run {job.name} failed: rank 0: {TF_PROFILER_ABORT}"
    assert (_manifest(job)["status"], _manifest(job)["error"]) == ("failed", f"rank 0: {TF_PROFILER_ABORT}")
    assert _manifest(job / "rank0")["error"] == TF_PROFILER_ABORT
    rank1 = _manifest(job / "rank1")
    assert rank1["status"] == "failed"
    assert rank1["error"] == "interrupted" or rank1["error"].startswith("PeerLost:"), rank1["error"]


def test_a_rank_torchrun_had_to_kill_is_not_blamed_for_the_rank_that_failed_first(tmp_path):
    # Seen on a loaded machine: rank 1 killed (-9) while rank 0 still waited in the process
    # group's start-up, where Python cannot take torchrun's SIGTERM; 30 s later torchrun killed
    # it too. Both ended -9 without a word, and the job blamed rank 0, the lower rank.
    from gapscope.workloads.distributed_launch import _record
    job = tmp_path / "job"
    for rank, pid in ((0, 4100), (1, 4101)):
        (job / f"rank{rank}").mkdir(parents=True)
        (job / f"rank{rank}" / "manifest.json").write_text(json.dumps(
            {"run_id": f"rank{rank}", "rank": rank, "status": "running", "pid": pid,
             "host": socket.gethostname(), "started_at": "2026-01-01T00:00:00"}))
    (job / "manifest.json").write_text(json.dumps({"run_id": "job", "status": "running"}))
    output = ("W1126 torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process 4100 "
              "closing signal SIGTERM\n"
              "W1126 torch.distributed.elastic.multiprocessing.api: [WARNING] Unable to shutdown "
              "process 4100 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL\n"
              "Failures:\n[1]:\n  time      : 2026-11-26_05:20:01\n  host      : h\n"
              "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 (pid: 4101)\n"
              "Root Cause (first observed failure):\n[0]:\n  time      : 2026-11-26_05:20:01\n"
              "  host      : h\n  rank      : 0 (local_rank: 0)\n  exitcode  : -9 (pid: 4100)\n")
    outcome = _record(job, RunSettings("mlp", "torch", nproc=2), 1, output, interrupted=False)
    assert (outcome.status, outcome.error) == (
        "failed", "rank 1: rank process exited with code -9 before recording its end")
    assert _manifest(job / "rank0")["error"] == ("stopped by torchrun (SIGTERM) after another rank "
                                                "failed, and exited with code -9 before recording its end")


def test_a_worker_tensorflow_aborted_in_its_profiler_stop_is_named_so(tmp_path):
    # What a TF 2.21 worker leaves when TensorFlow aborts it inside the profiler's stop: its
    # manifest `running` with a pid that is gone, and the marker stop_tf_profiler had set.
    from gapscope.profilers.job_dir import finish_job
    from gapscope.profilers.written_traces import TF_PROFILER_ABORT, TF_PROFILER_STOPPING
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    job = tmp_path / "job"
    for rank, fields in ((0, {"status": "failed", "error": "PeerLost: remote worker went away",
                              "ended_at": "2026-01-01T00:00:02"}),
                         (1, {"status": "running", "pid": gone.pid, "host": socket.gethostname(),
                              "started_at": "2026-01-01T00:00:00"})):
        (job / f"rank{rank}").mkdir(parents=True)
        (job / f"rank{rank}" / "manifest.json").write_text(json.dumps(
            {"run_id": f"rank{rank}", "rank": rank, **fields}))
    (job / "rank1" / TF_PROFILER_STOPPING).touch()
    (job / "manifest.json").write_text(json.dumps({"run_id": "job", "status": "running"}))
    status, error = finish_job(job, 2)
    assert (status, error) == ("failed", f"rank 1: {TF_PROFILER_ABORT}")
