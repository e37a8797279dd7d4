"""TensorBoard's two profiler plugins list the run directories gapscope writes; `gapscope
tensorboard` lands on gapscope's tab, leaves torch-tb-profiler off unless asked, says what needs
the internet, warns about the network and stops on SIGTERM."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gapscope.analysis.tensorboard.server import (TORCH_TB_PROFILER_OFF, TensorBoardError,
                                         TensorBoardServer, _get_json, is_loopback, listed_runs,
                                         offline_note, serve_forever, tab_notes, wait_for_runs)
from gapscope.profilers.errors import GapscopeInputError

ROOT = Path(__file__).resolve().parents[1]


def test_plugins_list_torch_and_keras_runs(runs_dir, torch_run, keras_run):
    """runs_dir holds the session's torch run and keras run: the two trace layouts, and the
    XSpace gapscope writes of the torch trace."""
    torch_run, keras_run = torch_run.name, keras_run.name
    with TensorBoardServer(runs_dir, ready_timeout=60, torch_tb_profiler=True) as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert {"gapscope", "pytorch_profiler", "profile"} <= set(server.plugins)
        listed = wait_for_runs(server.url, {"pytorch_profiler": [torch_run],
                                            "profile": [keras_run, torch_run]}, timeout=45)
        # torch-tb-profiler lists torch traces only (other tests may have added more runs of
        # either kind to this folder); the profile plugin lists both, torch's as gapscope's XSpace.
        assert keras_run not in listed["pytorch_profiler"]
        pid = server.pid
    assert server.pid is None
    assert _live_group_members(pid) == []


def _live_group_members(pgid: int, grace: float = 5.0) -> list[int]:
    """Processes of the group still running; zombies wait for init to reap them."""
    deadline = time.monotonic() + grace
    while True:
        live = []
        for process in psutil.process_iter(["status"]):
            try:
                if os.getpgid(process.pid) == pgid and process.info["status"] != "zombie":
                    live.append(process.pid)
            except ProcessLookupError:
                pass
        if not live or time.monotonic() >= deadline:
            return live
        time.sleep(0.1)


def test_listed_runs_needs_a_live_server():
    with pytest.raises(OSError):
        listed_runs("http://127.0.0.1:9/")


def test_start_fails_clearly_when_the_port_is_taken(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = TensorBoardServer(tmp_path, port=taken.getsockname()[1], ready_timeout=60)
        with pytest.raises(TensorBoardError, match="exited with code"):
            server.start()
    assert server.pid is None


@pytest.mark.parametrize("flag", [[], ["--with-torch-tb-profiler"]])
def test_gapscope_tensorboard_lands_on_its_tab_names_offline_panes_and_stops_on_sigterm(
        tmp_path, flag):
    """`gapscope tensorboard` in the foreground as a user (or a service manager) runs it: one
    line on the panes that need the internet, the URL of gapscope's tab, torch-tb-profiler only
    when asked (the tab says which), and SIGTERM ends TensorBoard too."""
    command = [sys.executable, str(ROOT / "cli.py"), "tensorboard", str(tmp_path), "--port", "0",
               *flag]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=ROOT, start_new_session=True)
    try:
        url = process.stdout.readline().strip()  # printed once TensorBoard answers
        assert url.startswith("http://127.0.0.1:") and url.endswith("/#gapscope"), process.stderr.read()
        base = url.partition("#")[0]
        plugins = _get_json(base, "/data/plugins_listing")
        assert ("pytorch_profiler" in plugins) == bool(flag) and "gapscope" in plugins
        notes = _get_json(base, "/data/plugin/gapscope/runs")["tab_notes"]
        assert notes == tab_notes(bool(flag))
        assert (notes[0] == TORCH_TB_PROFILER_OFF) != bool(flag)
        server_group = _tensorboard_group(process.pid)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        stderr = process.stderr.read()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    offline = [line for line in stderr.splitlines() if "offline" in line]
    assert len(offline) == 1 and "XProf's Overview step-time graph" in offline[0]
    assert ("torch-tb-profiler's tab (every view" in offline[0]) == bool(flag)
    assert "warning" not in stderr
    assert _live_group_members(server_group) == []


def _tensorboard_group(parent: int) -> int:
    """The process group of the TensorBoard that `parent` started (its own session)."""
    (child,) = psutil.Process(parent).children()
    return os.getpgid(child.pid)


@pytest.mark.parametrize("host,warned", [("0.0.0.0", True), ("192.168.1.5", True), ("::", True),
                                         ("127.0.0.1", False), ("localhost", False), ("::1", False)])
def test_a_non_loopback_host_is_warned_about_before_anything_starts(tmp_path, host, warned):
    said = []
    with pytest.raises(GapscopeInputError):  # no such logdir: stops before binding anything
        serve_forever(tmp_path / "missing", host=host, warn=said.append)
    assert bool(said) == warned and is_loopback(host) != warned
    if warned:
        assert "reach this machine on the network" in said[0]


def test_offline_note_names_only_the_loaded_plugins():
    assert offline_note(["scalars", "gapscope"]) is None
    assert "torch-tb-profiler's tab (every view: Overview, Operator, Trace" in offline_note(
        ["pytorch_profiler"])
    assert "XProf" not in offline_note(["pytorch_profiler"])
    assert "XProf's Trace Viewer work" in offline_note(["pytorch_profiler", "profile"])
