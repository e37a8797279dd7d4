"""`gapscope capture grpc://host:port`: a Keras fit whose process started TensorFlow's profiler
server, traced from the CLI for 2 s; an unserved or malformed address gets one line, exit 2."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tf_served")
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "tf_served_fit.py"), str(port),
                                str(folder / "job"), str(folder / "stop")],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout.readline().strip() == "ready"
    yield port, folder
    (folder / "stop").touch()
    process.wait(timeout=120)


def test_a_served_tf_job_is_traced_and_broken_down(served):
    port, folder = served
    result = CliRunner().invoke(cli, ["capture", f"grpc://localhost:{port}", "--duration", "2",
                                      "--out", str(folder / "captures"), "--format", "json"])
    assert result.exit_code == 0, result.output
    (capture,) = (folder / "captures").iterdir()
    assert list(capture.glob("plugins/profile/*/*.xplane.pb"))
    doc = json.loads(result.stdout)
    # capture_keras's marked train_step: its phases are in the trace TF's server recorded. The
    # optimizer's scope is found in some windows only (where not, it is said unidentified).
    assert doc["framework"] == "tensorflow" and doc["steps"] >= 1
    assert doc["phases"]["forward"]["ms"] > 0 and doc["phases"]["backward"]["ms"] > 0, doc["phases"]
    assert doc["phases"]["optimizer"]["ms"] > 0 or doc["unidentified_phases"] == ["optimizer"]


@pytest.mark.parametrize("target, words", [("grpc://localhost:notaport", "not a profiler server address"),
                                           ("grpc://localhost:1", "no trace from a TensorFlow profiler server")])
def test_a_bad_or_unserved_address_is_one_line(tmp_path, target, words):
    result = CliRunner().invoke(cli, ["capture", target, "--duration", "0.5", "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert words in result.stderr and result.stderr.count("gapscope:") == 1
    assert not any(tmp_path.iterdir())  # no empty capture folder left behind


def test_neither_or_both_targets_is_one_line():
    result = CliRunner().invoke(cli, ["capture"])
    assert result.exit_code == 2 and "either --pid" in result.stderr
