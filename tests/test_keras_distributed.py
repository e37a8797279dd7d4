"""keras and tf runs over MultiWorkerMirroredStrategy: two real local workers on free ports, each an
ordinary run directory; the mirrored update, the chief's XPlane with its collectives (only the
chief traces), and the failures."""
from __future__ import annotations

import csv
import json
import os
import signal
import socket
import time
from collections import Counter
from pathlib import Path

import pytest

from gapscope.profilers.errors import GapscopeInputError
from tests.tf_workers import run_script_workers, run_workers, start_workers, wait_workers
from gapscope.workloads.settings import RunSettings
from gapscope.workloads.runners.tf_cluster import cluster_place, free_ports, tf_config_env, worker_envs
from conftest import tf_profile

TINY = dict(workload="mlp", steps=12, warmup_steps=2, trace_steps=4, batch_size=32, nproc=2)


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def _steps(run_dir: Path) -> list[dict]:
    with open(run_dir / "steps.csv") as handle:
        return list(csv.DictReader(handle))


def _collectives(run_dir: Path) -> dict[tuple[str, str], Counter]:
    """CollectiveReduceV2 events of the rank's XPlane by (plane, line kind): line names end in a
    per-thread id (`collective_ops/<id>`), so only the part before the slash is kept."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    path = tf_profile(run_dir)
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    found: dict[tuple[str, str], Counter] = {}
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if "CollectiveReduceV2" in name:
                    found.setdefault((plane.name, line.name.split("/")[0]), Counter())[name] += 1
    return found


def _check_ranks(job: Path, results, steps: int) -> list[dict]:
    assert [r.returncode for r in results] == [0, 0], "\n".join(
        f"rank {rank}:\n{result.stdout[-3000:]}" for rank, result in enumerate(results))
    manifests = [_manifest(job / f"rank{r}") for r in range(2)]
    for rank, manifest in enumerate(manifests):
        assert manifest["status"] == "complete", manifest.get("error")
        assert manifest["shard"] == f"{rank}::2" and manifest["global_batch_size"] == 64
        assert len(_steps(job / f"rank{rank}")) == steps == manifest["steps_run"]
    # Mirrored training: both ranks end with the very same weights, bit for bit.
    assert manifests[0]["weights_sha256"] == manifests[1]["weights_sha256"]
    return manifests


def _check_chief_traced(job: Path, traced_steps: int) -> None:
    """Rank 0 holds the trace, with the gradient all-reduce of every traced step; rank 1 none
    (TF 2.21's profiler crashes non-chief workers: workloads.runners.tf_distribute.traces_rank)."""
    found = _collectives(job / "rank0")
    # The collectives run on the host plane's `collective_ops` threads; the gradient
    # all-reduce is the optimizer's (StatefulPartitionedCall/gapscope_optimizer/<optimizer>/CollectiveReduceV2).
    on_threads = found.get(("/host:CPU", "collective_ops"), Counter())
    gradient = sum(n for name, n in on_threads.items() if "gapscope_optimizer/" in name)
    assert gradient >= traced_steps, found
    assert not list((job / "rank1").rglob("*.xplane.pb"))
    assert [_manifest(job / f"rank{r}")["traced_ranks"] for r in range(2)] == [[0], [0]]
    assert _manifest(job / "rank1")["trace_window"] is None
    assert not any(int(row["traced"]) for row in _steps(job / "rank1"))


def test_keras_fit_on_two_workers(tmp_path):
    job = tmp_path / "job"
    results = run_workers(job, {**TINY, "framework": "keras"}, 2)
    manifests = _check_ranks(job, results, 12)
    rows = [_steps(job / f"rank{r}") for r in range(2)]
    # Keras' fit reports each step's loss averaged over the workers: the same on both ranks.
    assert [r["loss"] for r in rows[0]] == [r["loss"] for r in rows[1]]
    # The chief traces the window after the warm-up, as a one-process run does.
    assert manifests[0]["trace_window"] == [2, 5]
    _check_chief_traced(job, traced_steps=4)


def test_tf_loop_on_two_workers(tmp_path):
    job = tmp_path / "job"
    results = run_workers(job, {**TINY, "framework": "tf"}, 2)
    _check_ranks(job, results, 12)
    rows = [_steps(job / f"rank{r}") for r in range(2)]
    # The raw loop records each rank's own batch loss: different shards, different losses,
    # while the weights (above) are the same.
    assert rows[0][0]["loss"] != rows[1][0]["loss"]
    assert _manifest(job / "rank0")["trace_window"] == [2, 5]
    _check_chief_traced(job, traced_steps=4)


def test_capture_keras_in_a_users_tf_distribute_script(tmp_path):
    """Each worker of the user's own script writes its rank into one job directory, whose
    manifest rank 0 completes once both ranks have."""
    results = run_script_workers(["tests/tf_user_fit.py", str(tmp_path)], 2, tmp_path)
    assert [r.returncode for r in results] == [0, 0], "\n".join(
        f"rank {rank}:\n{result.stdout[-3000:]}" for rank, result in enumerate(results))
    (job,) = tmp_path.iterdir()
    assert job.name.startswith("tfuser-keras-user-x2-")
    manifest = _manifest(job)
    assert manifest["status"] == "complete", manifest.get("error")
    distributed = manifest["distributed"]
    assert (distributed["world_size"], distributed["backend"], distributed["launcher"]) == (2, "tf-collective", "user")
    assert [entry["status"] for entry in distributed["ranks"]] == ["complete", "complete"]
    for rank in range(2):
        run = _manifest(job / f"rank{rank}")
        assert (run["rank"], run["world_size"], run["job_id"]) == (rank, 2, job.name)
        assert len(_steps(job / f"rank{rank}")) == 10
        assert run["traced_ranks"] == [0]
    assert _collectives(job / "rank0") and _manifest(job / "rank0")["trace_window"] == [3, 5]
    assert not list((job / "rank1").rglob("*.xplane.pb")) and _manifest(job / "rank1")["trace_window"] is None


def test_a_hung_worker_fails_its_peer_within_the_collective_timeout(tmp_path):
    """A peer that stops answering (SIGSTOP) turns into an error after the collective
    timeout, not a hang; a peer that dies outright fails the other at once."""
    job = tmp_path / "job"
    settings = {**TINY, "framework": "keras", "steps": 400, "trace": False}
    procs = start_workers(job, settings, 2, env={"GAPSCOPE_COLLECTIVE_TIMEOUT_S": "10"})
    try:
        deadline = time.monotonic() + 120
        # Training has started once the first steps are reported.
        while time.monotonic() < deadline and procs[0].poll() is None:
            line = procs[1].stdout.readline()
            if "gapscope-steps-done" in line and int(line.split()[-1]) >= 5:
                break
        os.kill(procs[1].pid, signal.SIGSTOP)
        stopped = time.monotonic()
        procs[0].wait(timeout=60)
        waited = time.monotonic() - stopped
    finally:
        os.kill(procs[1].pid, signal.SIGKILL)
        os.kill(procs[1].pid, signal.SIGCONT)
        wait_workers(procs, timeout=30)
    manifest = _manifest(job / "rank0")
    assert procs[0].returncode == 1 and manifest["status"] == "failed"
    # TF's coordination service notices the stopped heartbeats, else the collective times out:
    # either way one line that says a peer was lost, which the job takes for a secondary error.
    assert manifest["error"].startswith("PeerLost: a remote worker was lost: a collective failed"), manifest["error"]
    assert "\n" not in manifest["error"] and ("task:1" in manifest["error"] or "Deadline" in manifest["error"])
    assert waited < 45


def test_a_port_in_use_is_one_line(tmp_path):
    ports = free_ports(2)
    with socket.socket() as taken:
        taken.bind(("localhost", ports[0]))
        taken.listen()
        procs = start_workers(tmp_path / "job", {**TINY, "framework": "keras"}, 2, ports=ports)
        try:
            out, _ = procs[0].communicate(timeout=120)
        finally:
            procs[1].kill()
            wait_workers(procs, timeout=30)
    assert procs[0].returncode == 2, out
    manifest = _manifest(tmp_path / "job" / "rank0")
    assert manifest["status"] == "failed" and f"localhost:{ports[0]} is in use" in manifest["error"]


def test_tf_config_for_local_workers():
    ports = free_ports(3)
    assert len(set(ports)) == 3
    env = tf_config_env(3, 2, ports)
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("2", "3", "2")
    config = json.loads(env["TF_CONFIG"])
    assert config["cluster"]["worker"][2] == f"localhost:{ports[2]}"
    assert cluster_place(env) == (2, 3)
    chief = {"TF_CONFIG": json.dumps({"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]},
                                      "task": {"type": "worker", "index": 1}})}
    assert cluster_place(chief) == (2, 3)
    assert cluster_place({}) is None
    envs = worker_envs(2)
    assert [cluster_place(env) for env in envs] == [(0, 2), (1, 2)]
    assert envs[0]["TF_CONFIG"].replace('"index": 0', '"index": 1') == envs[1]["TF_CONFIG"]
    with pytest.raises(GapscopeInputError, match="only chief and worker"):
        cluster_place({"TF_CONFIG": json.dumps({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps"}})})


@pytest.mark.parametrize("framework, options, refused", [
    ("keras-torch", {}, "keras-torch"),
    ("keras", {"jit_compile": True}, "jit_compile"),
    ("keras", {"inference": True}, "inference"),
    ("keras", {"steps_per_execution": 2}, "steps_per_execution"),
    ("keras", {"pipeline": "dataloader"}, "pipeline"),
])
def test_unsupported_distributed_keras_is_refused(framework, options, refused):
    from gapscope.workloads.runners.keras_runner import refuse_distributed
    settings = RunSettings("mlp", framework, **options)
    with pytest.raises(GapscopeInputError, match=refused):
        refuse_distributed(settings, framework == "keras-torch", 2)


def test_nproc_without_tf_config_is_refused(monkeypatch):
    from gapscope.workloads.runners.tf_distribute import check_cluster
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(GapscopeInputError, match="needs a TF_CONFIG naming 2 workers"):
        check_cluster(2)


def test_distributed_raw_tf_under_xla_is_refused(tmp_path):
    from gapscope.workloads.registry import get_workload
    from gapscope.workloads.runners.tf_runner import run_tf
    settings = RunSettings("mlp", "tf", tf_mode="xla", nproc=2)
    with pytest.raises(GapscopeInputError, match="tf mode xla is not supported"):
        run_tf(get_workload("mlp"), settings, tmp_path)


@pytest.mark.parametrize("manifest, reason", [
    ({"rank": 1, "traced_ranks": [0]}, "rank 1 was not traced: a TensorFlow multi-worker run traces rank 0 only"),
    ({"rank": 0, "traced_ranks": [0]}, None),       # the chief, which traced
    ({"rank": 1, "traced_ranks": []}, None),        # --no-trace: nobody traced, nothing to explain
    ({"rank": 1}, None),                            # a torch rank, or one from before traced_ranks
])
def test_an_untraced_rank_says_why(manifest, reason):
    from gapscope.analysis.results.breakdown import untraced_rank_reason
    found = untraced_rank_reason(manifest)
    assert found == reason if reason is None else found.startswith(reason)
