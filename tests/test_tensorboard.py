"""TensorBoard's two profiler plugins list the run directories gapscope writes."""
from __future__ import annotations

import os
import socket
import time

import psutil
import pytest

from analysis.tensorboard_server import (TensorBoardError, TensorBoardServer, listed_runs,
                                         wait_for_runs)


def test_plugins_list_torch_and_keras_runs(runs_dir, torch_run, keras_run):
    """runs_dir holds the session's torch run and keras run: the two trace layouts."""
    torch_run, keras_run = torch_run.name, keras_run.name
    with TensorBoardServer(runs_dir, ready_timeout=60) as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert {"pytorch_profiler", "profile"} <= set(server.plugins)
        listed = wait_for_runs(server.url, {"pytorch_profiler": [torch_run],
                                            "profile": [keras_run]}, timeout=45)
        # Each plugin lists the runs in its own format, and only those (other tests may
        # have added more runs of either kind to this folder).
        assert torch_run in listed["pytorch_profiler"] and keras_run in listed["profile"]
        assert torch_run not in listed["profile"] and keras_run not in listed["pytorch_profiler"]
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
