"""The command line through click's CliRunner: formats, exit codes and one-line errors."""
import csv
import io
import json
import os
import shutil

import pytest
from click.testing import CliRunner

from gapscope.analysis.renderers import registry
from gapscope.cli import cli


@pytest.fixture
def runner():
    return CliRunner()


def _commands():
    return sorted(cli.commands)


@pytest.mark.parametrize("name", _commands())
def test_every_command_has_help_with_an_example(runner, name):
    result = runner.invoke(cli, [name, "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output
    # Example lines are kept as written (\b): they must fit a terminal by themselves.
    assert max(map(len, result.output.splitlines())) <= 80, result.output


def test_list_json(runner):
    result = runner.invoke(cli, ["list", "--format", "json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    workloads = {w["name"]: w for w in doc["workloads"]}
    assert set(workloads) == {"linreg", "mlp", "mlp_bn_dropout", "cnn", "lstm", "dynamic"}
    assert doc["frameworks"] == ["torch", "keras", "keras-torch", "keras-jax", "tf"]
    # The same architecture in every framework: 100*128+128 + 128*10+10
    assert workloads["mlp"]["parameters"] == {"torch": 14_218, "keras": 14_218, "tf": 14_218,
                                              "keras-torch": 14_218, "keras-jax": 14_218}
    # Keras on JAX builds every workload with torch's count (counted in its own process).
    assert {n: w["parameters"]["keras-jax"] for n, w in workloads.items()} == \
        {n: w["parameters"]["torch"] for n, w in workloads.items()}
    assert workloads["cnn"]["parameters"]["keras-jax"] == 563_018
    assert "compile-reduce-overhead" in doc["variants"]["torch"]


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "markdown"])
def test_breakdown_formats_on_fixture(runner, fixtures_dir, fmt):
    path = str(fixtures_dir / "marked_two_steps.pt.trace.json")
    result = runner.invoke(cli, ["breakdown", path, "--format", fmt])
    assert result.exit_code == 0, result.output
    if fmt == "json":
        assert json.loads(result.output)["phases"]["backward"]["ms"] == pytest.approx(0.035)
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(result.output)))
        # The fixture's other (5 µs a step) has no event over it: all of it is the loop's.
        assert [r["phase"] for r in rows] == ["data_load", "forward", "backward", "optimizer", "other",
                                              "other: loop and callbacks", "step"]
        assert rows[5]["time(ms)"] == rows[4]["time(ms)"]
        assert float(rows[2]["time(ms)"]) == pytest.approx(0.035)
    elif fmt == "markdown":
        assert "| backward | 0.035 ±0.005 | 31.8 | R |" in result.output
    else:
        assert "backward" in result.output and "0.035" in result.output


def test_breakdown_of_two_runs_side_by_side_json_is_a_list(runner, torch_run, keras_run):
    result = runner.invoke(cli, ["breakdown", str(torch_run), str(keras_run), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert [d["framework"] for d in json.loads(result.output)] == ["torch", "keras"]


def _assert_one_line_error(result, fragment):
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gapscope: error:") and fragment in lines[0]
    assert "Traceback" not in result.output


def test_missing_path(runner, tmp_path):
    _assert_one_line_error(runner.invoke(cli, ["breakdown", str(tmp_path / "nope")]), "no such file")


def test_corrupt_torch_trace(runner, tmp_path):
    bad = tmp_path / "bad.pt.trace.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": ')
    _assert_one_line_error(runner.invoke(cli, ["breakdown", str(bad)]), "not a torch profiler trace")


def test_corrupt_gzip_trace(runner, tmp_path):
    bad = tmp_path / "w.1.pt.trace.json.gz"
    bad.write_bytes(b"not gzip at all")
    _assert_one_line_error(runner.invoke(cli, ["breakdown", str(bad)]), "not a torch profiler trace")


def test_folder_without_traces(runner, tmp_path):
    _assert_one_line_error(runner.invoke(cli, ["breakdown", str(tmp_path)]), "no trace file")


def test_unknown_workload_creates_nothing(runner, tmp_path):
    result = runner.invoke(cli, ["run", "resnet9000", "--framework", "torch", "--out", str(tmp_path)])
    _assert_one_line_error(result, "unknown workload 'resnet9000'")
    assert list(tmp_path.iterdir()) == []


def test_cuda_on_a_cpu_machine_is_refused_up_front(runner, tmp_path):
    """As the README says: one line, exit 2, before a progress bar or a run directory."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    result = runner.invoke(cli, ["run", "mlp", "--framework", "torch", "--device", "cuda",
                                 "--steps", "4", "--warmup", "1", "--no-trace", "--out", str(tmp_path)])
    _assert_one_line_error(result, "--device cuda: this machine has no CUDA GPU")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("status,pid,fragment", [
    ("failed", None, "failed: boom"),
    # `running` whose process is gone from this host: killed without recording its end (a
    # capture killed so is analysed: test_capture_stops).
    ("running", None, "failed: interrupted (process"),
    # `running` whose process is alive (this one): still running, not analysable yet.
    ("running", os.getpid(), "did not finish")])
def test_failed_or_interrupted_run_is_refused(runner, torch_run, tmp_path, status, pid, fragment):
    copy = tmp_path / torch_run.name
    shutil.copytree(torch_run, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest.update(status=status, error="boom" if status == "failed" else None)
    if pid is not None:
        manifest["pid"] = pid
    (copy / "manifest.json").write_text(json.dumps(manifest))
    _assert_one_line_error(runner.invoke(cli, ["breakdown", str(copy)]), fragment)


def test_run_writes_a_new_directory_each_time_and_prints_the_breakdown(runner, tmp_path):
    args = ["run", "mlp", "--framework", "torch", "--steps", "8", "--warmup", "2",
            "--trace-steps", "3", "--out", str(tmp_path), "--format", "json", "--quiet"]
    first = runner.invoke(cli, args)
    second = runner.invoke(cli, args)
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    ids = {json.loads(r.stdout)["run_id"] for r in (first, second)}
    assert len(ids) == 2 and {p.name for p in tmp_path.iterdir()} == ids
    # Of 8 steps, 2 are unprofiled: the rest are warm-up, traced, or the teardown step after them.
    assert json.loads(first.stdout)["steps"] == 2


def test_run_quiet_says_where_the_run_went_last_on_stdout(runner, tmp_path):
    result = runner.invoke(cli, ["run", "mlp", "--framework", "torch", "--steps", "8", "--warmup",
                                 "2", "--trace-steps", "3", "--out", str(tmp_path), "--quiet"])
    assert result.exit_code == 0, result.output
    (run_dir,) = tmp_path.iterdir()
    assert result.stdout.splitlines()[-1] == f"run: {run_dir}"
    assert "gapscope breakdown" in result.stdout and result.stderr == ""


def test_breakdown_takes_quiet_and_no_legend(runner, torch_run):
    full = runner.invoke(cli, ["breakdown", str(torch_run), "--quiet"])
    bare = runner.invoke(cli, ["breakdown", str(torch_run), "--no-legend"])
    assert full.exit_code == 0 and bare.exit_code == 0, full.output + bare.output
    legend = "Phase source: T timers"
    assert legend in " ".join(full.stdout.split()) and legend not in " ".join(bare.stdout.split())
    # the table itself is the same
    assert full.stdout.split("steps")[0] == bare.stdout.split("steps")[0]


def test_list_json_says_its_progress_on_stderr_and_nothing_from_tensorflow():
    """Issue 23 item 9: 8 s with no progress, and TensorFlow's INFO lines. In a process of its
    own: the frameworks' start-up chatter is only said once per process."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "gapscope.cli", "list", "--format", "json"],
                          capture_output=True, text=True, timeout=600,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)
    lines = done.stderr.splitlines()
    assert lines and all(line.startswith("counting parameters: ") for line in lines), lines


def test_breakdown_of_a_folder_of_runs_breaks_down_each(runner, torch_run, keras_run):
    result = runner.invoke(cli, ["breakdown", str(torch_run.parent), "--format", "json"])
    assert result.exit_code == 0, result.output
    ids = [d["run_id"] for d in json.loads(result.output)]
    assert torch_run.name in ids and keras_run.name in ids


def test_variant_refused_before_anything_is_announced_or_written(runner, tmp_path):
    result = runner.invoke(cli, ["run", "mlp", "--framework", "keras", "--variant", "compile",
                                 "--out", str(tmp_path)])
    _assert_one_line_error(result, "variant 'compile' does not apply to keras")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command,renderers", [("breakdown", registry.BREAKDOWN),
                                               ("compare", registry.COMPARE),
                                               ("matrix", registry.MATRIX)])
def test_format_choices_are_the_registered_renderers(runner, command, renderers):
    # One renderer contract per result type: --format offers exactly what can be rendered.
    help_text = runner.invoke(cli, [command, "--help"], terminal_width=200).output
    assert f"--format [{'|'.join(renderers)}]" in help_text
    assert all(r.extension.startswith(".") and r.render for r in renderers.values())


def test_a_folder_breakdown_names_the_ab_folder_it_does_not_cover(runner, torch_run, ab_folder, tmp_path):
    import shutil
    shutil.copytree(torch_run, tmp_path / torch_run.name)
    shutil.copytree(ab_folder, tmp_path / ab_folder.name)
    result = runner.invoke(cli, ["breakdown", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == (f"gapscope: note: {tmp_path / ab_folder.name} is an A/B folder, not "
                                     f"broken down with the runs beside it: gapscope breakdown "
                                     f"{tmp_path / ab_folder.name}")
