"""A run whose manifest cannot be written at its end (a full disk) leaves the reason in run.failed,
and every reader says that reason instead of 'running' or 'interrupted'."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from click.testing import CliRunner

from gapscope.cli import cli
from gapscope.profilers.run_dir import FAILED_MARKER, UNRECORDED_FAILURE, Manifest, status_of
from gapscope.profilers.run_lifecycle import RunLifecycle


def _running_run(folder: Path) -> RunLifecycle:
    folder.mkdir()
    (folder / "steps.csv").write_text("step,step_ms\n0,1\n1,1\n")
    return RunLifecycle(folder, Manifest.start(folder, {"run_id": folder.name, "host": "elsewhere",
                                                        "pid": os.getpid()}))


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_the_cause_of_a_failure_the_manifest_could_not_record_is_kept(tmp_path, monkeypatch):
    run = _running_run(tmp_path / "run")
    monkeypatch.setattr(Manifest, "finish", _disk_full)
    assert run.end_unrecorded("OSError: [Errno 28] No space left on device") is False
    monkeypatch.undo()
    assert json.loads((run.run_dir / "manifest.json").read_text())["status"] == "running"
    assert "No space left on device" in (run.run_dir / FAILED_MARKER).read_text()
    status, error = status_of(run.run_dir)
    assert status == "failed" and error.startswith("OSError: [Errno 28] No space left on device")
    result = CliRunner().invoke(cli, ["breakdown", str(run.run_dir)])
    assert result.exit_code == 2 and "failed: OSError: [Errno 28] No space left on device" in result.stderr


def test_an_empty_marker_still_says_the_run_failed(tmp_path):
    run = _running_run(tmp_path / "run")
    (run.run_dir / FAILED_MARKER).write_text("")
    assert status_of(run.run_dir) == ("failed", UNRECORDED_FAILURE)


def test_a_marker_that_is_no_regular_file_is_ignored(tmp_path):
    run = _running_run(tmp_path / "run")
    os.mkfifo(run.run_dir / FAILED_MARKER)
    assert status_of(run.run_dir) == ("running", None)  # another host's run: nothing to tell
