"""Ray Client: `--engine ray://HOST:PORT` joins a Ray head started apart (`ray start --head`, token
authentication on, as Ray 2.60 has it), ships gapscope's code to it and gives the local pool's JSON
byte for byte; a wrong token is refused in one line, at once rather than after Ray Client's 30 s
of retries ending in "connection timeout". The head starts once for the module (about 4 s here);
its processes, found by its own temp folder and client port, are stopped by id, never `ray stop`
(which stops every Ray of the user's, other tests' too)."""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from gapscope.analysis.model.job import load_job
from gapscope.analysis.results.distributed_breakdown import job_breakdown
from gapscope.analysis.results.engines.choose import using_engine
from gapscope.analysis.results.engines.local import LocalEngine
from gapscope.analysis.renderers import registry
from engine_job import make_job

pytest.importorskip("ray", reason="the ray extra is not installed")
pytest.importorskip("grpc", reason="Ray Client needs grpcio (the ray[client] extra), not installed")

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, timeout_s: float = 60) -> None:
    """`ray start` returns before its Ray Client server listens (refused, seen): until it does."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _head_processes(temp_dir: str, client_port: int) -> list[psutil.Process]:
    """The head's processes: those naming its temp folder or its client port, and theirs."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if temp_dir in line or ("ray.util.client.server" in line
                                and f"--port={client_port}" in line):
            found.append(process)
    for process in list(found):
        try:
            found += process.children(recursive=True)
        except psutil.Error:
            pass
    return list({p.pid: p for p in found}.values())


@pytest.fixture(scope="module")
def head():
    """A Ray head of 2 CPUs with its Ray Client server, whose workers lack gapscope (the venv's
    editable install of it taken off their import path, as in test_engine_clusters' bare
    scheduler): (address, token)."""
    token, port = secrets.token_hex(32), _free_port()
    temp_dir = tempfile.mkdtemp(prefix="gs-rc-", dir="/tmp")  # short: Ray's socket paths
    (Path(temp_dir) / "sitecustomize.py").write_text(
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n")
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
           "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": temp_dir}
    ray = str(Path(sys.executable).parent / "ray")
    try:
        subprocess.run([ray, "start", "--head", "--port=0", f"--ray-client-server-port={port}",
                        "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={temp_dir}"],
                       env=env, check=True, capture_output=True, timeout=120)
        _wait_for(port)
        yield f"ray://127.0.0.1:{port}", token
    finally:
        processes = _head_processes(temp_dir, port)
        for process in processes:  # killed outright: the raylet and GCS take 5 s over a SIGTERM
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(processes, timeout=10)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return make_job(tmp_path_factory.mktemp("ray_client") / "job")


def _breakdown(job: Path, address: str, token: str) -> subprocess.CompletedProcess:
    """The CLI in a process of its own, as a user runs it: the token by environment only."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PYTHONPATH=str(ROOT), RAY_AUTH_TOKEN=token)
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), "breakdown", str(job),
                           "--format", "json", "--engine", address],
                          env=env, capture_output=True, text=True, timeout=180)


def test_ray_client_ships_gapscope_and_gives_the_local_pools_json_byte_for_byte(job, head):
    address, token = head
    done = _breakdown(job, address, token)
    assert done.returncode == 0, done.stderr
    engine = LocalEngine(2)
    with engine, using_engine(engine):
        pooled = job_breakdown(load_job(job))
    assert pooled.engine == {"name": "local", "workers": 2}
    pooled.engine = {"name": "ray", "workers": 2}  # the one entry that may differ: Ray's here
    assert json.loads(done.stdout)["job"]["straggler"]["rank"] == 3
    assert done.stdout.rstrip("\n") == registry.JOB_BREAKDOWN["json"].render([pooled]).rstrip("\n")


def test_ray_client_with_a_wrong_token_is_refused_in_one_line_at_once(job, head):
    address, _ = head
    done = _breakdown(job, address, "0" * 64)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"gapscope: error: --engine {address}: the cluster refuses this "
                               "client's token"), lines[0]
