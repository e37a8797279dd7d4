"""The local engine's faults on real processes: a worker SIGKILLed mid-analysis (a real pool,
broken and rebuilt) leaves the job's figures as they were; a rank that raises is retried with
--rank-retries and, still failing, is a named missing rank; bad input is never retried; an
engine that is no engine, or an address where nothing answers, is one line and exit 2."""
from __future__ import annotations

import json
import socket

import pytest
from click.testing import CliRunner

from gapscope.analysis.model.job import load_job, without_failed
from gapscope.analysis.results.distributed_breakdown import job_breakdown
from gapscope.analysis.results.engines.choose import parse_engine, using_engine
from gapscope.analysis.results.engines.faults import FAULT_ENV
from gapscope.analysis.results.engines.interface import stream
from gapscope.analysis.results.engines.local import LocalEngine, SerialEngine
from gapscope.cli import cli
from engine_job import ctrl_c_while_a_rank_hangs, job_json, make_job
from gapscope.profilers.errors import GapscopeInputError


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return make_job(tmp_path_factory.mktemp("engines") / "job")


@pytest.fixture(scope="module")
def serial(job):
    """The figures with every rank read in this process, one after another."""
    with using_engine(SerialEngine()):
        return job_json(job_breakdown(load_job(job)))


def test_the_serial_figures_are_the_hand_worked_ones(serial):
    doc = json.loads(serial)["job"]
    assert doc["ranks_present"] == [0, 1, 2, 3] and doc["complete"] is True
    assert doc["job_step_ms"]["mean"] == 1.1 and doc["straggler"]["rank"] == 3
    assert doc["straggler"]["phase"] == "data_load" and doc["skew_ms"] == 0.1


def test_a_worker_killed_mid_analysis_is_replaced_and_the_figures_stay(job, serial, tmp_path,
                                                                       monkeypatch):
    marker = tmp_path / "killed-once"
    monkeypatch.setenv(FAULT_ENV, f"2=kill:{marker}")
    with LocalEngine(2) as engine, using_engine(engine):
        result = job_breakdown(load_job(job))
    assert marker.exists() and engine.rebuilds == 1  # the worker of rank 2 died: a new pool
    assert result.engine == {"name": "local", "workers": 2}
    assert job_json(result) == serial


def test_a_rank_raising_once_is_retried_and_the_job_completes(job, serial, tmp_path, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, f"1=raise:{tmp_path / 'raised-once'}")
    monkeypatch.setenv("GAPSCOPE_JOB_WORKERS", "1")
    result = CliRunner().invoke(cli, ["breakdown", str(job), "--format", "json", "--rank-retries", "1"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    doc["job"]["engine"] = None
    assert doc == json.loads(serial)


def test_a_rank_that_always_raises_is_a_named_missing_rank(job, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "1=raise")
    monkeypatch.setenv("GAPSCOPE_JOB_WORKERS", "2")
    result = CliRunner().invoke(cli, ["breakdown", str(job), "--format", "json", "--rank-retries", "2"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)["job"]
    assert doc["ranks_present"] == [0, 2, 3] and doc["world_size"] == 4 and doc["complete"] is False
    assert doc["straggler"] is None and "job_step_ms" in doc["lower_bounds"]
    assert doc["job_step_ms"]["mean"] == 1.1  # rank 3, still the slowest present
    assert doc["notes"] == ["warning: rank 1 failed to analyse (rank 1: InjectedFault: failure "
                            f"injected by {FAULT_ENV}): missing 1; the job step and skew are lower "
                            "bounds, no straggler is named"]


def test_bad_input_is_never_retried():
    calls = []

    def rank(n):
        calls.append(n)
        raise GapscopeInputError(f"rank {n}: not a trace")
    with pytest.raises(GapscopeInputError, match="rank 0: not a trace"):
        list(stream(SerialEngine(), rank, {0: (0,)}, retries=5))
    assert calls == [0]


def test_every_rank_failing_leaves_no_job_to_break_down(job):
    failed = {r: "WorkerLost: a worker died 4 times" for r in range(4)}
    with pytest.raises(GapscopeInputError, match="job job: every rank failed to analyse "
                                                 r"\(rank 0: WorkerLost"):
        without_failed(load_job(job), failed)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("engine, said", [
    ("spark", "--engine 'spark': not an engine; give local, dask, ray"),
    ("tcp://127.0.0.1:{port}", "--engine tcp://127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}"),
    ("dask://127.0.0.1:{port}", "--engine tcp://127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}"),
    ("ray://127.0.0.1:{port}", "--engine ray://127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}"),
])
def test_an_engine_that_cannot_be_used_is_one_line_and_exit_2(job, engine, said):
    port = _closed_port()
    result = CliRunner().invoke(cli, ["breakdown", str(job), "--engine", engine.format(port=port)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert said.format(port=port) in lines[0]


def test_ray_client_named_by_ray_address_is_checked_as_its_engine_address(job, monkeypatch):
    # Ray's own convention: RAY_ADDRESS=ray://… with `--engine ray` is Ray Client.
    pytest.importorskip("ray", reason="the ray extra is not installed")
    port = _closed_port()
    monkeypatch.setenv("RAY_ADDRESS", f"ray://127.0.0.1:{port}")
    result = CliRunner().invoke(cli, ["breakdown", str(job), "--engine", "ray"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"--engine ray://127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}" in lines[0]


def test_gapscope_engine_names_the_engine_and_a_bad_one_is_refused(job, monkeypatch):
    monkeypatch.setenv("GAPSCOPE_ENGINE", "yarn")
    result = CliRunner().invoke(cli, ["breakdown", str(job)])
    assert result.exit_code == 2 and "--engine 'yarn': not an engine" in result.stderr
    assert parse_engine("dask://sched:8786").address == "tcp://sched:8786"
    assert (parse_engine("ray://head:10001").kind, parse_engine(None).kind) == ("ray", "local")


def test_summaries_travel_without_replicates_and_the_figures_equal_the_kept_ones(tmp_path):
    """The old path kept every rank's bootstrap replicates in its summary; now they stay behind
    and the driver rebuilds the few it needs (same fixed seed): the JSON and the scaling
    comparison's replicates are the same to the last bit, the summary 30x smaller."""
    import pickle

    import numpy as np

    from gapscope.analysis.results.distributed_breakdown import combine
    from gapscope.analysis.results.rank_summary import _slim, summarize_rank
    from gapscope.analysis.results.scaling import job_side
    from engine_job import make_timed_job
    job = load_job(make_timed_job(tmp_path / "job"))
    kept = [summarize_rank(r, run.place, run.label, "auto", job.hosts.get(r))
            for r, run in zip(job.rank_numbers, job.ranks)]
    assert kept[0].breakdown.replicates.shape == (2000, 6)
    old = combine(job, kept)
    with LocalEngine(2) as engine, using_engine(engine):
        new = job_breakdown(job)
    assert all(b.replicates is None for b in new.ranks)
    assert old.skew_ci95 is not None and old.skew_ci95[1] - old.skew_ci95[0] > 0.01  # a width
    assert old.straggler_extra_ci95 is not None and new.straggler == 3
    assert job_json(new) == job_json(old)
    before, after = job_side(old, None).part_replicates, job_side(new, None).part_replicates
    assert set(after) == set(before) == {"data_load", "forward", "backward", "optimizer", "other"}
    assert all(np.array_equal(before[p], after[p]) for p in before)
    full, slim = len(pickle.dumps(kept[1])), len(pickle.dumps(_slim(kept[1])))
    assert full > 190_000 and slim < 10_000, (full, slim)


def test_the_progress_callback_counts_ranks_and_the_megabytes_read(job, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "1=raise")
    calls = []
    with using_engine(SerialEngine(), on_ranks=lambda *told: calls.append(told)):
        job_breakdown(load_job(job))
    sizes = {r: (job / f"trace_{r}.pt.trace.json").stat().st_size for r in range(4)}
    assert [c[:5] for c in calls] == [("job x4", 4, 0, 0, 1), ("job x4", 4, 1, 0, 1),
                                      ("job x4", 4, 1, 1, 1), ("job x4", 4, 2, 1, 1),
                                      ("job x4", 4, 3, 1, 0)]
    assert calls[-1][5] == pytest.approx((sizes[0] + sizes[2] + sizes[3]) / 1e6)


def test_workers_without_the_dependencies_or_with_other_code_are_refused_in_one_line():
    from gapscope.analysis.results.engines.probe import check_workers, make_probe
    mine = make_probe()()
    assert mine["numpy"] and mine["msgspec"] and len(mine["gapscope"]) == 16
    check_workers("tcp://s:8786", mine, [dict(mine), dict(mine)])  # the same: accepted
    with pytest.raises(GapscopeInputError, match=r"^--engine tcp://s:8786: the workers lack msgspec"):
        check_workers("tcp://s:8786", mine, [dict(mine, msgspec=None)])
    with pytest.raises(GapscopeInputError, match=r"version skew: the workers run numpy 1\.0, this process"):
        check_workers("tcp://s:8786", mine, [dict(mine), dict(mine, numpy="1.0")])
    with pytest.raises(GapscopeInputError, match="version skew: the workers run gapscope's code 0+, "):
        check_workers("ray://h:10001", mine, [dict(mine, gapscope="0" * 16)])
    with pytest.raises(GapscopeInputError, match="the cluster has no workers"):
        check_workers("tcp://s:8786", mine, [])


def test_ctrl_c_stops_the_pool_and_its_workers(job, tmp_path):
    """SIGINT to the command alone while a rank's worker is busy (it waits, by the fault hook):
    exit 130 in one line, and no worker is left running the rank."""
    code, said, workers, alive = ctrl_c_while_a_rank_hangs(job, tmp_path / "waiting")
    assert (code, said) == (130, ["gapscope: interrupted (SIGINT)"])
    assert len(workers) >= 2 and alive == []
