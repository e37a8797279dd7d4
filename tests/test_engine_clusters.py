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
