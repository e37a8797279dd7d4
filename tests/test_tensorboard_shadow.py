"""TensorBoard's third-party plugins read a vetted shadow of the logdir, refreshed while the server
runs, under a memory limit: a FIFO or a /dev/zero link added after start-up never reaches them."""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from gapscope.analysis.tensorboard.server import (MEMORY_ENV, TensorBoardServer, listed_runs,
                                         memory_limit_bytes, wait_for_runs)
from gapscope.analysis.tensorboard.shadow import ShadowLogdir
from gapscope.profilers.errors import GapscopeInputError

FIXTURE = Path(__file__).parent / "fixtures" / "marked_two_steps.pt.trace.json"
# Growth of TensorBoard's processes past their size once up at which the watcher stops them: a
# runaway read of /dev/zero grows without end; TensorBoard's own size (830 MiB to over 1 GiB, with
# the plugins installed beside it) is no concern of this test.
RUNAWAY = 512 << 20


def _tree(shadow: Path) -> dict[str, str]:
    return {str(p.relative_to(shadow)): os.readlink(p) for p in sorted(shadow.rglob("*"))
            if p.is_symlink()}


def test_the_shadow_links_safe_files_only_and_follows_changes(tmp_path):
    logdir = tmp_path / "logdir"
    (logdir / "good").mkdir(parents=True)
    shutil.copy(FIXTURE, logdir / "good" / "w.1.pt.trace.json")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(FIXTURE, outside / "o.1.pt.trace.json")
    (logdir / "linked_folder").symlink_to(outside)   # not followed out of the logdir
    shadow = ShadowLogdir(logdir)
    try:
        shadow.refresh()
        assert _tree(shadow.path) == {"good/w.1.pt.trace.json": str(logdir / "good/w.1.pt.trace.json")}
        (logdir / "zero").mkdir()
        (logdir / "zero" / "x.pt.trace.json").symlink_to("/dev/zero")
        os.mkfifo(logdir / "zero" / "y.pt.trace.json")
        (logdir / "late").mkdir()
        shutil.copy(FIXTURE, logdir / "late" / "w.1.pt.trace.json")
        # A plugin's own file in its logdir (a cache) is not gapscope's to remove.
        (shadow.path / "good" / "cache.bin").write_bytes(b"x")
        shadow.refresh()
        assert sorted(_tree(shadow.path)) == ["good/w.1.pt.trace.json", "late/w.1.pt.trace.json"]
        assert shadow.skipped == {Path("zero/x.pt.trace.json"): "a character device, not a regular file",
                                  Path("zero/y.pt.trace.json"): "a FIFO, not a regular file"}
        # A vetted file swapped for a link to a device is withdrawn on the next refresh.
        (logdir / "good" / "w.1.pt.trace.json").unlink()
        (logdir / "good" / "w.1.pt.trace.json").symlink_to("/dev/zero")
        shadow.refresh()
        assert sorted(_tree(shadow.path)) == ["late/w.1.pt.trace.json"]
        assert (shadow.path / "good" / "cache.bin").read_bytes() == b"x"
    finally:
        shadow.stop()
    assert not shadow.path.exists() and (logdir / "late" / "w.1.pt.trace.json").is_file()


def test_memory_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, "2.5")
    assert memory_limit_bytes() == int(2.5 * (1 << 30))
    for bad in ("lots", "0", "nan"):
        monkeypatch.setenv(MEMORY_ENV, bad)
        with pytest.raises(GapscopeInputError, match=MEMORY_ENV):
            memory_limit_bytes()


def _group_rss(pgid: int) -> int:
    total = 0
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid:
                total += process.memory_info().rss
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return total


def test_a_dev_zero_link_and_a_fifo_added_after_start_up_never_reach_the_plugins(tmp_path):
    logdir = tmp_path / "logdir"
    (logdir / "good").mkdir(parents=True)
    shutil.copy(FIXTURE, logdir / "good" / "w.1.pt.trace.json")
    with TensorBoardServer(logdir, ready_timeout=90, torch_tb_profiler=True) as server:
        wait_for_runs(server.url, {"pytorch_profiler": ["good"]}, timeout=60)
        before = _group_rss(server.pid)  # ~830 MiB here: TensorFlow, the plugins, their worker
        limits = Path(f"/proc/{server.pid}/limits").read_text()
        assert f"{memory_limit_bytes()}" in next(l for l in limits.splitlines()
                                                 if l.startswith("Max address space"))
        (logdir / "zero_run").mkdir()
        (logdir / "zero_run" / "x.pt.trace.json").symlink_to("/dev/zero")
        (logdir / "fifo_run").mkdir()
        os.mkfifo(logdir / "fifo_run" / "x.pt.trace.json")
        (logdir / "late").mkdir()
        shutil.copy(FIXTURE, logdir / "late" / "w.1.pt.trace.json")
        peak, stop = [0], threading.Event()

        def watch():
            while not stop.wait(0.5):
                peak[0] = max(peak[0], _group_rss(server.pid))
                if peak[0] - before > RUNAWAY:  # what main did: stop it before it takes the machine
                    os.killpg(server.pid, 9)
                    return
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            # torch-tb-profiler rescans every 10 s: the late run shows the rescan happened.
            listed = wait_for_runs(server.url, {"pytorch_profiler": ["late"]}, timeout=60)
            time.sleep(12)  # a second rescan, and time for a runaway read to grow
            listed = listed_runs(server.url)
        finally:
            stop.set()
            watcher.join()
        assert peak[0] - before < 256 << 20, (before >> 20, peak[0] >> 20)  # no read ran away
        assert {"good", "late"} <= set(listed["pytorch_profiler"])
        assert not {"zero_run", "fifo_run"} & set(listed["pytorch_profiler"])
        # gapscope's own tab reads the logdir itself and says why those runs cannot be read.
        with urllib.request.urlopen(server.url + "data/plugin/gapscope/runs", timeout=30) as r:
            runs = {run["name"]: run for run in json.load(r)["runs"]}
        assert "a character device" in runs["zero_run"]["problem"]
        assert "a FIFO" in runs["fifo_run"]["problem"]
        assert runs["late"]["problem"] is None


def test_a_file_link_out_of_the_logdir_never_reaches_the_plugins(tmp_path):
    logdir = tmp_path / "logdir"
    (logdir / "run").mkdir(parents=True)
    shutil.copy(FIXTURE, logdir / "run" / "w.1.pt.trace.json")
    (logdir / "run" / "passwd.pt.trace.json").symlink_to("/etc/passwd")
    (logdir / "run" / "inside.pt.trace.json").symlink_to(logdir / "run" / "w.1.pt.trace.json")
    shadow = ShadowLogdir(logdir)
    try:
        shadow.refresh()
        assert sorted(_tree(shadow.path)) == ["run/inside.pt.trace.json", "run/w.1.pt.trace.json"]
        assert shadow.skipped == {Path("run/passwd.pt.trace.json"): "a link to a file outside the logdir"}
    finally:
        shadow.stop()
