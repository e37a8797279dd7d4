"""`gapscope watch`: a growing steps.csv read line by line, the state of a hand-made run whose
figures are derivable by hand, and its views (--once table and JSON, a line per step piped)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.readers.live_steps import StepsFollower
from gapscope.cli import cli

HEADER = "step,epoch,warmup,traced,step_ms,data_load_ms,forward_ms,backward_ms,optimizer_ms,loss,minor_faults\n"


def _row(step, step_ms, phases=(1.0, 2.0, 3.0, 1.0), warmup=0, traced=0):
    return f"{step},,{warmup},{traced},{step_ms},{','.join(map(str, phases))},2.0,0\n"


@pytest.fixture
def ended_run(tmp_path) -> Path:
    """Step 0 warm-up, step 3 traced; the steady steps 1, 2, 4 take 8, 10 and 12 ms (mean 10),
    their marked phases 1, 2, 3, 1 ms (7), so other is 3 ms. Others used 50 % of the cores."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({
        "run_id": "run", "status": "complete", "machine_load": {"others_cpu_pct": 50.0}}))
    (run / "steps.csv").write_text(HEADER + _row(0, 90.0, warmup=1) + _row(1, 8.0) + _row(2, 10.0)
                                   + _row(3, 30.0, traced=1) + _row(4, 12.0))
    return run


def test_once_json_has_the_steady_means_derived_by_hand(ended_run):
    result = CliRunner().invoke(cli, ["watch", str(ended_run), "--once", "--format", "json"])
    assert result.exit_code == 0, result.output
    state = json.loads(result.stdout)
    assert (state["status"], state["steps"], state["steady_steps"]) == ("complete", 5, 3)
    assert state["steady_ms"] == pytest.approx(10.0)
    assert state["phases_ms"] == pytest.approx({"data_load": 1.0, "forward": 2.0, "backward": 3.0,
                                                "optimizer": 1.0, "other": 3.0})
    assert state["busy"] is True and state["others_cpu_pct"] == 50.0
    assert [row["step"] for row in state["latest"]] == [0, 1, 2, 3, 4]


def test_once_table_and_piped_lines(ended_run):
    table = CliRunner().invoke(cli, ["watch", str(ended_run), "--once"])
    assert table.exit_code == 0, table.output
    assert "run: complete, 5 steps" in table.stdout
    assert "steady: 10.000 ms a step over the last 3 unprofiled steps" in table.stdout
    piped = CliRunner().invoke(cli, ["watch", str(ended_run), "--interval", "0.1"])
    lines = piped.stdout.splitlines()
    assert piped.exit_code == 0 and len(lines) == 6  # a line per step, then how the run ended
    assert lines[3] == ("step 3: 30.000 ms data_load=1.000 forward=2.000 backward=3.000 "
                        "optimizer=1.000 [traced]")
    assert lines[-1].startswith("run: complete. steady: 10.000 ms")


def test_a_growing_file_is_read_line_by_line(tmp_path):
    path = tmp_path / "steps.csv"
    follower = StepsFollower(path)
    assert follower.new_rows() == []  # not written yet
    path.write_text(HEADER + _row(0, 8.0) + _row(1, 9.0) + "2,,0,0,1")  # a line half written
    assert [r["step"] for r in follower.new_rows()] == [0, 1]
    with open(path, "a") as handle:
        handle.write("0.0,1.0,2.0,3.0,1.0,2.0,0\n" + _row(3, 11.0))
    assert [(r["step"], r["step_ms"]) for r in follower.new_rows()] == [(2, 10.0), (3, 11.0)]
    assert follower.new_rows() == [] and not follower.restarted
    # The run's end rewrites the file whole (a new file renamed into place): read from the start.
    replaced = tmp_path / "new.csv"
    replaced.write_text(HEADER + _row(0, 8.0, warmup=1))
    replaced.replace(path)
    assert [r["warmup"] for r in follower.new_rows()] == [1] and follower.restarted


def test_not_a_run_directory_is_one_line(tmp_path):
    result = CliRunner().invoke(cli, ["watch", str(tmp_path), "--once"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "not a gapscope run directory" in result.stderr


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "dangling"])
@pytest.mark.parametrize("once", [True, False])
def test_a_steps_csv_that_is_no_regular_file_is_one_line_and_no_hang(ended_run, kind, once):
    """breakdown's checks: a link to /dev/zero read forever (RSS grew 125 MB/s), a FIFO hung
    --once; each is refused in one line, exit 2, before any read."""
    import os
    import resource
    steps = ended_run / "steps.csv"
    steps.unlink()
    if kind == "dev-zero":
        steps.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(steps)
    else:
        steps.symlink_to(ended_run / "gone.csv")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = CliRunner().invoke(cli, ["watch", str(ended_run), "--interval", "0.1", *(["--once"] if once else [])])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert result.stderr.startswith(f"gapscope: error: {steps}: cannot read (")
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB: no runaway read


def test_the_window_holds_a_bounded_tail_and_says_only_new_steps_after_a_rewrite():
    from gapscope.watch.state import LAST_STEPS, STEADY_WINDOW, StepWindow
    window = StepWindow()
    rows = [{"step": i, "step_ms": float(i), "warmup": int(i < 5), "traced": int(i % 100 == 7)}
            for i in range(10_000)]
    assert window.add(rows[:6000]) == rows[:6000]
    assert window.add(rows[6000:]) == rows[6000:]
    assert window.count == 10_000 and [r["step"] for r in window.latest] == list(range(9992, 10_000))
    assert len(window.latest) == LAST_STEPS and len(window.steady) == STEADY_WINDOW
    assert all(not r["traced"] and not r["warmup"] for r in window.steady)
    # The run's end rewrites the file with one more step: counted afresh, only that one is new.
    final = rows + [{"step": 10_000, "step_ms": 1.0, "warmup": 0, "traced": 0}]
    assert window.add(final, restarted=True) == final[-1:] and window.count == 10_001


def test_a_refresh_reads_only_what_was_appended(tmp_path):
    """20k rows read once; then every byte already read is overwritten in place with garbage
    (same file, same size): a refresh that read them again would drop or refuse rows. It
    returns exactly the one row appended, and its state counts the 20,001 steps."""
    from gapscope.watch.state import StepWindow, watch_state
    path = tmp_path / "steps.csv"
    path.write_text(HEADER + "".join(_row(i, 10.0) for i in range(20_000)))
    follower, window = StepsFollower(path), StepWindow()
    assert len(window.add(follower.new_rows())) == 20_000
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.write(b"x" * size)
        handle.write(_row(20_000, 16.0).encode())
    new = window.add(follower.new_rows())
    assert [(r["step"], r["step_ms"]) for r in new] == [(20_000, 16.0)] and not follower.restarted
    state = watch_state({"run_id": "run", "status": "running"}, window, None)
    assert state.steps == 20_001 and state.latest[-1]["step_ms"] == 16.0
