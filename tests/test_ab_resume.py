"""An A/B measurement that stopped goes on where it stopped: `compare --measure FOLDER`."""
import json
import os
import shutil

from click.testing import CliRunner

from gapscope.cli import cli
from gapscope.profilers import environment
from gapscope.profilers.run_dir import utc_now


def _stopped_copy(ab_folder, tmp_path):
    """The finished A/B folder as a Ctrl-C in its last run would have left it: that run's
    folder kept (failed), but not listed."""
    folder = tmp_path / ab_folder.name
    shutil.copytree(ab_folder, folder)
    state = json.loads((folder / "ab.json").read_text())
    last_config = state["configs"][0]  # round 2 runs in reverse order: the first config is last
    dropped = state["runs"][last_config].pop()
    state.update(status="failed", error=f"{last_config} repeat 2: interrupted")
    (folder / "ab.json").write_text(json.dumps(state))
    return folder, state, last_config, dropped


def test_a_stopped_measurement_resumes_with_only_its_missing_run(ab_folder, tmp_path):
    folder, before, config, dropped = _stopped_copy(ab_folder, tmp_path)
    runs_before = {p.name for p in folder.iterdir() if p.is_dir()}
    result = CliRunner().invoke(cli, ["compare", "--measure", str(folder), "-q"])
    assert result.exit_code in (0, 3), result.output  # 3: measured beside other work
    state = json.loads((folder / "ab.json").read_text())
    assert state["status"] == "complete" and "error" not in state
    assert [len(state["runs"][c]) for c in state["configs"]] == [2, 2]
    new_runs = {p.name for p in folder.iterdir() if p.is_dir()} - runs_before
    assert len(new_runs) == 1  # exactly the run the stop took; the other three kept
    assert state["runs"][config][-1] in new_runs and state["runs"][config][-1] != dropped
    for other in state["configs"][1:]:
        assert state["runs"][other] == before["runs"][other]
    assert "linreg:torch" in result.output


def test_an_unfinished_folder_says_how_to_resume(ab_folder, tmp_path):
    folder, *_ = _stopped_copy(ab_folder, tmp_path)
    result = CliRunner().invoke(cli, ["compare", str(folder)])
    assert result.exit_code == 2
    assert f"resume it with `gapscope compare --measure {folder}`" in result.output


def test_a_complete_or_busy_folder_is_not_resumed(ab_folder, tmp_path):
    result = CliRunner().invoke(cli, ["compare", "--measure", str(ab_folder)])
    assert result.exit_code == 2 and "is complete" in result.output
    folder, state, *_ = _stopped_copy(ab_folder, tmp_path)
    state.update(status="running", pid=os.getpid(), host=environment.host(), started_at=utc_now())
    (folder / "ab.json").write_text(json.dumps(state))
    result = CliRunner().invoke(cli, ["compare", "--measure", str(folder)])
    assert result.exit_code == 2 and "is in use" in result.output
    assert len(result.output.strip().splitlines()) == 1
