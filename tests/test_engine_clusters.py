"""The same job on the local pool, a Dask LocalCluster of two worker processes and a local Ray of
two CPUs gives byte-identical JSON (less the `engine` entry naming which did the work); a rank
that always raises on a cluster is a named missing rank there too. Each cluster starts once for
the module: Dask's in about 3 s, Ray's in about 10 s on this machine."""
from __future__ import annotations

import json

import pytest

from analysis.model.job import load_job
from analysis.results.distributed_breakdown import job_breakdown
from analysis.results.engines.choose import using_engine
from analysis.results.engines.faults import FAULT_ENV
from analysis.results.engines.local import LocalEngine
from engine_job import job_json, make_job


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return make_job(tmp_path_factory.mktemp("clusters") / "job")


@pytest.fixture(scope="module")
def pooled(job):
    engine = LocalEngine(2)
    with engine, using_engine(engine):
        return job_json(job_breakdown(load_job(job)))


@pytest.fixture(scope="module", params=["dask", "ray"])
def cluster(request):
    pytest.importorskip({"dask": "distributed", "ray": "ray"}[request.param],
                        reason=f"the {request.param} extra is not installed")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GAPSCOPE_JOB_WORKERS", "2")  # two workers, as on a 2-core CI machine
        if request.param == "dask":
            from analysis.results.engines.dask_engine import DaskEngine
            engine = DaskEngine.open(None)
        else:
            from analysis.results.engines.ray_engine import RayEngine
            engine = RayEngine.open(None)
    with engine:
        yield engine


def test_a_cluster_gives_the_local_pools_json_byte_for_byte(job, pooled, cluster):
    with using_engine(cluster):
        result = job_breakdown(load_job(job))
    assert result.engine == {"name": cluster.name, "workers": 2}
    assert job_json(result) == pooled
    assert json.loads(pooled)["job"]["straggler"]["rank"] == 3


def test_a_rank_always_raising_on_a_cluster_is_a_named_missing_rank(job, cluster, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "2=raise")
    with using_engine(cluster, retries=1):
        result = job_breakdown(load_job(job))
    assert result.numbers == [0, 1, 3] and not result.complete and result.straggler is None
    assert any(note.startswith("warning: rank 2 failed to analyse (rank 2: InjectedFault")
               for note in result.notes), result.notes


@pytest.fixture(scope="module")
def skewed_scheduler(tmp_path_factory):
    """A Dask scheduler and one worker started apart, as a user's cluster is, whose gapscope is
    another version: a copy of this code with one line added."""
    import os
    import shutil
    import socket
    import subprocess
    import sys
    from pathlib import Path
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    from distributed import Client
    root = Path(__file__).resolve().parents[1]
    code = tmp_path_factory.mktemp("other_gapscope")
    for package in ("analysis", "profilers"):
        shutil.copytree(root / package, code / package, ignore=shutil.ignore_patterns("__pycache__"))
    with open(code / "profilers" / "errors.py", "a") as f:
        f.write("# another version\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).parent / "dask")
    env = {**os.environ, "PYTHONPATH": str(code)}
    quiet = {"cwd": code, "env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    started = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                                 "--no-dashboard"], **quiet)]
    started.append(subprocess.Popen([dask, "worker", address, "--nworkers", "1", "--nthreads", "1",
                                     "--no-dashboard"], **quiet))
    try:
        with Client(address, timeout=60) as client:
            client.wait_for_workers(1, timeout=120)
        yield address
    finally:
        for process in reversed(started):
            process.terminate()
            process.wait(timeout=30)


def test_a_cluster_running_other_gapscope_code_is_refused_in_one_line(job, skewed_scheduler):
    from click.testing import CliRunner

    from cli import cli
    result = CliRunner().invoke(cli, ["breakdown", str(job), "--engine", skewed_scheduler])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"--engine {skewed_scheduler}: version skew: the workers run gapscope's code" in lines[0]


def test_gapscope_engine_starts_dask_for_the_command_and_stops_it(job, pooled, monkeypatch):
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    from click.testing import CliRunner

    from cli import cli
    monkeypatch.setenv("GAPSCOPE_ENGINE", "dask")
    monkeypatch.setenv("GAPSCOPE_JOB_WORKERS", "2")
    result = CliRunner().invoke(cli, ["breakdown", str(job), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["job"].pop("engine") == {"name": "dask", "workers": 2}
    expected = json.loads(pooled)
    expected["job"].pop("engine")
    assert doc == expected
