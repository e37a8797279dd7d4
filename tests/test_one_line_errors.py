"""Everyday mistakes end with one line on stderr and exit 2, never a traceback, and are refused
before anything runs: contradictory step counts and variants, absurd numbers, an --out that
cannot be written, a manifest field of the wrong type, click's own usage errors."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.cli import cli

RUN = ["run", "mlp", "--framework", "torch"]


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def nothing_runs(monkeypatch):
    """A refusal that regressed must fail the test, not start the run it should refuse (with
    `nw99999999` that run would fork until the machine gives out)."""
    def launched(*args, **kwargs):
        raise AssertionError("a run was started")
    # Every module that binds `launch` by name is patched where it binds it; importing them
    # first keeps one imported during the test from binding the fake for the tests after it.
    from gapscope.workloads import ab, matrix
    monkeypatch.setattr("gapscope.workloads.launch.launch", launched)
    monkeypatch.setattr(matrix, "launch", launched)
    monkeypatch.setattr(ab, "launch", launched)


def _one_line(result, fragment: str, code: int = 2) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == code, result.output
    assert len(lines) == 1 and lines[0].startswith("gapscope: error:"), lines
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.output and result.exception is None or \
        isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("args,fragment", [
    (["--variant", "eager,compile"], "'eager' and 'compile' disagree on compile_mode"),
    (["--variant", ""], "has an empty name"),
    (["--variant", "compile,"], "has an empty name"),
    (["--variant", "default,compile"], "default means no variant"),
    (["--variant", "compile,compile"], "named twice"),
    (["--variant", "transforms,nw99999999"], "at most"),
    (["--variant", "nw" + "9" * 5000], "far too large"),
    (["--trace-steps", "50", "--steps", "20"], "--trace-steps 50 after 5 warm-up step(s) needs --steps 55"),
    (["--warmup", "20", "--steps", "10"], "--warmup 20 leaves none of the 10 steps"),
])
def test_contradictions_are_refused_before_anything_runs(runner, nothing_runs, tmp_path, args,
                                                         fragment):
    out = tmp_path / "out"
    result = runner.invoke(cli, [*RUN, *args, "--out", str(out)])
    _one_line(result, fragment)
    assert not out.exists(), "something ran or was written"


def test_absurd_step_count_is_a_short_usage_error(runner, nothing_runs, tmp_path):
    result = runner.invoke(cli, [*RUN, "--steps", str(10**23), "--out", str(tmp_path / "out")])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and 1 <= len(lines) <= 2, result.output
    assert lines[0].startswith("gapscope: error:") and "--steps" in lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [["run"], ["run", "mlp", "--framework", "nope"],
                                  ["breakdown", "--no-such-option", "x"], ["no-such-command"]])
def test_click_usage_errors_take_two_lines_at_most(runner, args):
    result = runner.invoke(cli, args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and 1 <= len(lines) <= 2, result.output
    assert lines[0].startswith("gapscope: error:")


def _under_a_file(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    return blocker / "out"


@pytest.mark.parametrize("where", ["under a file", "unwritable"])
@pytest.mark.parametrize("command", ["run", "matrix", "report", "trace"])
def test_out_that_cannot_be_written_is_one_line(runner, torch_run, tmp_path, where, command):
    # /proc refuses new folders even to root, which os.access would let through.
    out = _under_a_file(tmp_path) if where == "under a file" else Path("/proc/gapscope-out")
    args = {"run": [*RUN, "--steps", "8", "--warmup", "2", "--trace-steps", "3", "--out", str(out)],
            "matrix": ["matrix", "seed-examples", "--steps", "8", "--out", str(out)],
            "report": ["report", str(torch_run), "--out", str(out / "report.md")],
            "trace": ["trace", str(torch_run), "--out", str(out / "t.json")]}[command]
    _one_line(runner.invoke(cli, args), "output folder")


def test_matrix_baseline_that_is_no_row_is_refused_before_running(runner, nothing_runs, tmp_path):
    result = runner.invoke(cli, ["matrix", "seed-examples", "--baseline", "nope",
                                 "--out", str(tmp_path / "out")])
    _one_line(result, "no row 'nope'")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field,value,fragment", [
    ("warmup_steps", "abc", "field 'warmup_steps' should be a whole number"),
    ("settings", [1, 2], "field 'settings' should be a JSON object"),
    ("status", "done", "unknown status"),
    ("steps_run", 1.5, "field 'steps_run' should be a whole number"),
    ("warmup_steps", True, "field 'warmup_steps' should be a whole number"),
])
@pytest.mark.parametrize("command", ["breakdown", "compare", "report"])
def test_manifest_field_of_the_wrong_type_is_one_line(runner, torch_run, tmp_path, field, value,
                                                       fragment, command):
    bad = tmp_path / "bad-run"
    shutil.copytree(torch_run, bad)
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest[field] = value
    (bad / "manifest.json").write_text(json.dumps(manifest))
    args = {"breakdown": ["breakdown", str(bad)], "compare": ["compare", str(torch_run), str(bad)],
            "report": ["report", str(bad), "--out", str(tmp_path / "r" / "r.md"), "-q"]}[command]
    _one_line(runner.invoke(cli, args), fragment)


def test_tensorboard_port_in_use_or_bad_host_is_one_line(runner, tmp_path):
    import socket
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _one_line(runner.invoke(cli, ["tensorboard", str(tmp_path), "--port", str(port)]),
                  f"cannot listen on 127.0.0.1:{port}")
    _one_line(runner.invoke(cli, ["tensorboard", str(tmp_path), "--host", "no such host"]),
              "not an address")


def test_worker_count_is_bounded_wherever_settings_come_from():
    """Settings built by hand (the API, a settings JSON) meet the same bound as --variant."""
    from gapscope.profilers.errors import GapscopeInputError
    from gapscope.workloads.settings import RunSettings
    with pytest.raises(GapscopeInputError, match="DataLoader workers"):
        RunSettings("mlp", "torch", num_workers=10**8).check_lengths()


def test_an_unknown_workload_is_named_before_a_missing_framework(runner, nothing_runs):
    """Issue 23 item 9: `run nosuch` gave click's six-line "Missing option '--framework'"."""
    _one_line(runner.invoke(cli, ["run", "nosuch"]), "unknown workload 'nosuch'; known: ")
    _one_line(runner.invoke(cli, ["run", "mlp"]), "--framework is required: torch, keras")


@pytest.mark.parametrize("command", [RUN, ["demo"]])
def test_device_cuda_without_a_gpu_is_refused_up_front(runner, nothing_runs, monkeypatch,
                                                       tmp_path, command):
    """No progress bar and no failed run directory (issue 23 item 8): refused before either."""
    monkeypatch.setattr("gapscope.profilers.nvml.gpu_count", lambda: 0)
    out = tmp_path / "out"
    result = runner.invoke(cli, [*command, "--device", "cuda", "--out", str(out)])
    _one_line(result, "--device cuda: this machine has no CUDA GPU")
    assert not out.exists()


def test_demo_takes_the_size_options_the_readme_gives_it(runner, nothing_runs):
    """`demo --batch-size` said "No such option"; now it is demo's option, checked as run's."""
    result = runner.invoke(cli, ["demo", "--batch-size", "0"])
    assert result.exit_code == 2 and "No such option" not in result.stderr
    assert "--batch-size" in result.stderr and "range" in result.stderr
    assert "--batch-size" in runner.invoke(cli, ["demo", "--help"]).stdout


@pytest.mark.parametrize("args,fragment", [
    (["--precision", "5%", "--budget", "nan"], "'nan' is not a number"),
    (["--budget", "3"], "--budget goes with --precision"),
])
def test_a_budget_that_cannot_apply_is_refused_before_measuring(runner, nothing_runs, tmp_path,
                                                                args, fragment):
    result = runner.invoke(cli, ["compare", "--measure", "mlp:torch", "mlp:keras", *args,
                                 "--out", str(tmp_path / "out")])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and 1 <= len(lines) <= 2, result.output
    assert lines[0].startswith("gapscope: error:") and fragment in result.stderr, lines
    assert not (tmp_path / "out").exists()
