"""Small ranks in batches (engines.batches): how ranks are grouped, worked by hand; a job run in
batches on a real pool gives the figures of one rank a task; a rank raising inside a batch fails
alone (its batch mates come back) and is retried alone."""
from __future__ import annotations

import pytest

from gapscope.analysis.model.job import load_job
from gapscope.analysis.results.distributed_breakdown import job_breakdown
from gapscope.analysis.results.engines.batches import call_batch, group
from gapscope.analysis.results.engines.choose import using_engine
from gapscope.analysis.results.engines.faults import FAULT_ENV
from gapscope.analysis.results.engines.local import LocalEngine, SerialEngine
from engine_job import job_json, make_job

MB = 1_000_000


def test_ranks_are_grouped_to_the_batch_size_keeping_four_batches_a_worker():
    sizes = dict.fromkeys(range(16), 3 * MB)
    # one worker: at most 16 / 4 = 4 a batch; 3 ranks of 3 MB reach 8 MB first
    assert group(range(16), sizes, 8 * MB, workers=1) == [
        [0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11], [12, 13, 14], [15]]
    # two workers: at most 16 / 8 = 2 a batch, before the 8 MB
    assert group(range(16), sizes, 8 * MB, workers=2) == [[k, k + 1] for k in range(0, 16, 2)]
    # a rank of 20 MB is a batch alone; the next ones gather again
    sizes.update({0: 20 * MB})
    assert group(range(6), sizes, 8 * MB, workers=1)[:1] == [[0]]
    assert group(range(16), sizes, 8 * MB, workers=1)[:2] == [[0], [1, 2, 3]]
    # no batching asked, or no sizes: a rank a task
    assert group(range(3), sizes, 0, workers=1) == [[0], [1], [2]]
    assert group(range(3), None, 8 * MB, workers=1) == [[0], [1], [2]]


class BatchingPool(LocalEngine):
    """The real pool, batching as Dask does (any size is small enough), counting what it sends."""

    batch_bytes = 10**12

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.sent: list[int] = []

    def submit(self, key, fn, args, where=None) -> None:
        self.sent.append(len(args[1]) if fn is call_batch else 1)
        super().submit(key, fn, args, where)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return make_job(tmp_path_factory.mktemp("batches") / "job", world=16)


@pytest.fixture(scope="module")
def one_a_task(job):
    with using_engine(SerialEngine()):
        return job_json(job_breakdown(load_job(job)))


def test_a_job_in_batches_gives_the_figures_of_one_rank_a_task(job, one_a_task):
    with BatchingPool(2) as engine, using_engine(engine):
        result = job_breakdown(load_job(job))
    assert engine.sent == [2] * 8  # 16 ranks, 2 workers: batches of 16 / (4 x 2)
    assert job_json(result) == one_a_task


def test_a_rank_raising_in_a_batch_fails_alone(job, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "5=raise")
    with BatchingPool(2) as engine, using_engine(engine, retries=1):
        result = job_breakdown(load_job(job))
    assert result.numbers == [r for r in range(16) if r != 5]  # rank 4, its batch mate, is there
    assert engine.sent == [2] * 8 + [1]  # rank 5 tried again alone
    assert any(note.startswith("warning: rank 5 failed to analyse (rank 5: InjectedFault")
               for note in result.notes), result.notes


def test_a_rank_raising_once_in_a_batch_is_retried_alone_and_the_job_completes(
        job, one_a_task, tmp_path, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, f"5=raise:{tmp_path / 'raised-once'}")
    with BatchingPool(2) as engine, using_engine(engine, retries=1):
        result = job_breakdown(load_job(job))
    assert engine.sent == [2] * 8 + [1]
    assert job_json(result) == one_a_task
