"""Symlinks are not trusted: a job's rank swapped for a link to (or a copy of) an unrelated run is
refused, and a link inside a matrix folder is not followed outside it."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from gapscope.analysis.model.job import load_job  # noqa: E402
from gapscope.analysis.model.run import expand_runs  # noqa: E402
from gapscope.cli import cli  # noqa: E402
from gapscope.profilers.errors import GapscopeInputError  # noqa: E402
from test_run_files import make_run  # noqa: E402

import dist_job_loop  # noqa: E402


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return dist_job_loop.make_job(tmp_path_factory.mktemp("job") / "plain")


def _swapped(job: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "job"
    shutil.copytree(job, copy, symlinks=True)
    load_job(copy)  # the job as made is read
    return copy


def test_a_rank_swapped_for_a_symlink_to_an_unrelated_run_is_refused(job, tmp_path):
    copy = _swapped(job, tmp_path)
    unrelated = make_run(tmp_path / "unrelated")
    shutil.rmtree(copy / "rank1")
    (copy / "rank1").symlink_to(unrelated)
    with pytest.raises(GapscopeInputError, match="a symlink to .*unrelated, outside"):
        load_job(copy)


def test_a_rank_swapped_for_a_copy_of_an_unrelated_run_is_refused(job, tmp_path):
    copy = _swapped(job, tmp_path)
    shutil.rmtree(copy / "rank1")
    shutil.copytree(make_run(tmp_path / "unrelated"), copy / "rank1")
    with pytest.raises(GapscopeInputError, match="rank1 is no rank of this job"):
        load_job(copy)


def test_a_symlink_in_a_matrix_folder_is_not_followed_outside_it(tmp_path):
    matrix = tmp_path / "matrix"
    make_run(matrix / "good-run")
    outside = make_run(tmp_path / "outside", manifest={"variant": "OUTSIDE"})
    (matrix / "linked-run").symlink_to(outside)
    make_run(tmp_path / "elsewhere")
    (matrix / "inner-link").symlink_to(matrix / "good-run")  # inside the folder: fine
    (matrix / "matrix.json").write_text(json.dumps({"rows": {
        "good": {"status": "complete", "run_dir": "good-run"},
        "linked": {"status": "complete", "run_dir": "linked-run"},
        "inner": {"status": "complete", "run_dir": "inner-link"}}}))
    entries = {e.label: e for e in expand_runs([matrix])}
    assert entries["good"].path == matrix / "good-run" and entries["inner"].path == matrix / "inner-link"
    assert entries["linked"].path is None and "outside" in entries["linked"].problem
    result = CliRunner().invoke(cli, ["breakdown", str(matrix), "--format", "json"])
    assert "OUTSIDE" not in result.output and "not followed" in result.stderr
