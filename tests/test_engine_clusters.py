"""The same job on the local pool, a Dask LocalCluster of two worker processes and a local Ray of
two CPUs gives byte-identical JSON (less the `engine` entry naming which did the work); a rank
that always raises on a cluster is a named missing rank there too; a Dask cluster started apart
whose workers lack gapscope gets its code and gives the same JSON, one whose workers run other
gapscope code is refused in one line; Ctrl-C stops a cluster started by the command, its processes
and all. Each cluster starts once for the module: Dask's in about
3 s, Ray's in about 10 s on this machine."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.model.job import load_job
from gapscope.analysis.results.distributed_breakdown import job_breakdown
from gapscope.analysis.results.engines.choose import using_engine
from gapscope.analysis.results.engines.faults import FAULT_ENV
from gapscope.analysis.results.engines.local import LocalEngine
from engine_job import ctrl_c_while_a_rank_hangs, job_json, make_job

ROOT = Path(__file__).resolve().parents[1]


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
            from gapscope.analysis.results.engines.dask_engine import DaskEngine
            engine = DaskEngine.open(None)
        else:
            from gapscope.analysis.results.engines.ray_engine import RayEngine
            engine = RayEngine.open(None)
    with engine:
        yield engine


def test_a_cluster_gives_the_local_pools_json_byte_for_byte(job, pooled, cluster):
    with using_engine(cluster):
        result = job_breakdown(load_job(job))
    assert result.engine == {"name": cluster.name, "workers": 2}
    assert job_json(result) == pooled
    assert json.loads(pooled)["job"]["straggler"]["rank"] == 3


def test_dasks_workers_keep_glibcs_own_trim_threshold(cluster):
    # Dask's default MALLOC_TRIM_THRESHOLD_=65536 made glibc give freed memory back to the
    # kernel and fault it in again: a rank took twice its time. The local cluster unsets it.
    if cluster.name != "dask":
        pytest.skip("a Dask setting: Ray leaves the environment alone")
    import os
    found = cluster.client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
    assert len(found) == 2 and set(found.values()) == {None}
    # Its workers' stack sampler is off and their loops tick rarely (dask_engine.QUIET).
    import dask
    from gapscope.analysis.results.engines.dask_engine import QUIET
    settings = cluster.client.run(lambda: {key: dask.config.get(key) for key in QUIET})
    assert list(settings.values()) == [QUIET, QUIET]


def test_a_rank_always_raising_on_a_cluster_is_a_named_missing_rank(job, cluster, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "2=raise")
    with using_engine(cluster, retries=1):
        result = job_breakdown(load_job(job))
    assert result.numbers == [0, 1, 3] and not result.complete and result.straggler is None
    assert any(note.startswith("warning: rank 2 failed to analyse (rank 2: InjectedFault")
               for note in result.notes), result.notes


@contextlib.contextmanager
def _cluster_apart(code: Path):
    """A Dask scheduler and one worker started apart, as a user's cluster is, importing from
    `code` first and run there: the address, while they run."""
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    from distributed import Client
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    dask = str(Path(sys.executable).parent / "dask")
    quiet = {"cwd": code, "env": {**os.environ, "PYTHONPATH": str(code)},
             "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
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


@pytest.fixture(scope="module")
def skewed_scheduler(tmp_path_factory):
    """Workers whose gapscope is another version: a copy of this code with one line added."""
    code = tmp_path_factory.mktemp("other_gapscope")
    shutil.copy(ROOT / "gapscope" / "__init__.py", code / "gapscope" / "__init__.py") \
        if (code / "gapscope").mkdir() is None else None
    for package in ("analysis", "profilers"):
        shutil.copytree(ROOT / package, code / "gapscope" / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    with open(code / "gapscope" / "profilers" / "errors.py", "a") as f:
        f.write("# another version\n")
    with _cluster_apart(code) as address:
        yield address


@pytest.fixture(scope="module")
def bare_scheduler(tmp_path_factory):
    """Workers without gapscope: the venv's editable install of it taken off their import path
    (sitecustomize runs after site-packages' .pth files), nothing of it on PYTHONPATH."""
    code = tmp_path_factory.mktemp("no_gapscope")
    (code / "sitecustomize.py").write_text(
        "import sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n")
    with _cluster_apart(code) as address:
        yield address


def test_workers_without_gapscope_get_its_code_and_give_the_same_json(job, pooled, bare_scheduler):
    from distributed import Client

    from gapscope.analysis.results.engines.probe import make_probe
    from gapscope.cli import cli
    with Client(bare_scheduler, timeout=60) as client:
        assert [w["gapscope"] for w in client.run(make_probe()).values()] == [None]
    result = CliRunner().invoke(cli, ["breakdown", str(job), "--format", "json",
                                      "--engine", bare_scheduler])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["job"].pop("engine") == {"name": "dask", "workers": 1}
    expected = json.loads(pooled)
    expected["job"].pop("engine")
    assert doc == expected
    with Client(bare_scheduler, timeout=60) as client:  # uploaded: the client's very code
        assert [w["gapscope"] for w in client.run(make_probe()).values()] == [make_probe()()["gapscope"]]


def test_a_cluster_running_other_gapscope_code_is_refused_in_one_line(job, skewed_scheduler):
    from gapscope.cli import cli
    result = CliRunner().invoke(cli, ["breakdown", str(job), "--engine", skewed_scheduler])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"--engine {skewed_scheduler}: version skew: the workers run gapscope's code" in lines[0]


def test_gapscope_engine_starts_dask_for_the_command_and_stops_it(job, pooled, monkeypatch):
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    from gapscope.cli import cli
    monkeypatch.setenv("GAPSCOPE_ENGINE", "dask")
    monkeypatch.setenv("GAPSCOPE_JOB_WORKERS", "2")
    result = CliRunner().invoke(cli, ["breakdown", str(job), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["job"].pop("engine") == {"name": "dask", "workers": 2}
    expected = json.loads(pooled)
    expected["job"].pop("engine")
    assert doc == expected


def test_a_cluster_runs_small_ranks_in_batches_with_the_same_json(cluster, tmp_path):
    from gapscope.analysis.results.engines.batches import group
    from gapscope.analysis.results.engines.local import SerialEngine
    from gapscope.analysis.results.rank_summary import _rank_bytes
    job = make_job(tmp_path / "job16", world=16)
    sizes = _rank_bytes(load_job(job))  # what gather_ranks hands the batching
    assert group(range(16), sizes, cluster.batch_bytes, cluster.workers) == [
        [k, k + 1] for k in range(0, 16, 2)]  # kB files: 16 / (4 x 2) a batch
    with using_engine(cluster):
        batched = job_json(job_breakdown(load_job(job)))
    with using_engine(SerialEngine()):
        assert batched == job_json(job_breakdown(load_job(job)))


@pytest.mark.parametrize("engine", ["dask", "ray"])
def test_ctrl_c_stops_a_cluster_started_here(job, tmp_path, engine):
    """SIGINT to the command while a rank hangs in a cluster's worker (the fault hook, in any
    process but the command's): exit 130 in one line, and the cluster's processes (Dask's
    nannies and workers; Ray's raylet, GCS and workers) are all gone."""
    pytest.importorskip({"dask": "distributed", "ray": "ray"}[engine],
                        reason=f"the {engine} extra is not installed")
    code, said, started, alive = ctrl_c_while_a_rank_hangs(job, tmp_path / "waiting", "--engine", engine)
    assert (code, said) == (130, ["gapscope: interrupted (SIGINT)"]), "\n".join(said)
    assert len(started) >= 2 and alive == []


def test_a_cluster_that_loses_its_worker_then_its_scheduler_says_each_in_one_line(job, tmp_path):
    """Issue 47 items 4 and 5. Rank 1 hangs in the only worker (the fault hook) while the others
    finish; the worker is SIGKILLed: a note says the cluster has no worker (it waited over 60 s
    without a word); then the scheduler is SIGKILLed: one line naming the ranks not analysed,
    exit 1 (a 45-line traceback of FutureCancelledError in gather_ranks before). Nothing the
    command started is left running."""
    import re
    import signal
    import time

    import psutil
    marker = tmp_path / "waiting"
    with _cluster_apart(ROOT) as address:
        def apart(word):
            found = []
            for process in psutil.Process().children():
                try:
                    if word in " ".join(process.cmdline()):
                        found.append(process)
                except psutil.Error:  # a zombie of another test
                    pass
            return found
        env = {**os.environ, FAULT_ENV: f"1=hang:{marker}"}
        command = subprocess.Popen([sys.executable, "-c", "from gapscope.cli import main; main()", "breakdown",
                                    str(job), "--engine", address], env=env, cwd=ROOT,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while not marker.exists() and command.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            assert marker.exists(), command.stderr.read()
            started = psutil.Process(command.pid).children(recursive=True)
            for nanny in apart("worker"):
                for process in [*nanny.children(recursive=True), nanny]:
                    process.kill()
            note = command.stderr.readline().strip()  # within the 5 s the engine waits quietly
            for scheduler in apart("scheduler"):
                scheduler.send_signal(signal.SIGKILL)
            code, said = command.wait(timeout=120), command.stderr.read().strip().splitlines()
        finally:
            command.kill()
    assert note == (f"gapscope: note: --engine {address}: the Dask cluster has no worker now; its ranks "
                    "wait for one (Ctrl-C stops)")
    assert code == 1 and len(said) == 1, said
    assert said[0].startswith(f"gapscope: error: --engine {address}: the Dask scheduler went away"), said
    # Rank 1 and those batched with it or after it (one worker: small ranks go in batches).
    missing = re.search(r": ranks? ([\d, ]+) not analysed$", said[0]).group(1).split(", ")
    assert "1" in missing and set(missing) <= {"0", "1", "2", "3"}, said
    assert psutil.wait_procs(started, timeout=30)[1] == []


def test_an_address_that_accepts_and_never_answers_is_refused_in_one_line(job, monkeypatch):
    """Issue 47 item 5: `--engine tcp://` to such an address hung without a word."""
    import socket
    import time
    pytest.importorskip("distributed", reason="the dask extra is not installed")
    from gapscope.analysis.results.engines import dask_engine
    from gapscope.cli import cli
    monkeypatch.setattr(dask_engine, "CONNECT_TIMEOUT_S", 1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel accepts; nobody ever answers
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        result = CliRunner().invoke(cli, ["breakdown", str(job), "--engine", address])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "accepts connections but sent no Dask handshake within 1 s" in result.stderr
    assert time.monotonic() - start < 30
