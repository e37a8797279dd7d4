"""`gapscope capture --pid` signals only a process that proved it is the gapscope job that
registered: planted registrations against real processes that do not catch SIGUSR2 (sleep) are
refused in one line and the processes live on; a folder that is not private is refused on both
sides; a request the wait gave up on is withdrawn."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time

import psutil
import pytest
from click.testing import CliRunner

from gapscope.cli import cli
from gapscope.ondemand import registry
from gapscope.ondemand.registry import RUNTIME_ENV, TRIGGER


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    folder = tmp_path / "runtime"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv(RUNTIME_ENV, str(folder))
    return folder


@pytest.fixture
def sleeper():
    """A real process that does not catch SIGUSR2: its default action would end it."""
    started = []

    def start(**kwargs):
        process = subprocess.Popen(["sleep", "1000"], **kwargs)
        started.append(process)
        return process
    yield start
    for process in started:
        process.kill()
        process.wait()


def _plant(folder, process, fd: int, run_dir, mode: int = 0o600):
    path = folder / f"{process.pid}.json"
    path.write_text(json.dumps({"pid": process.pid, "create_time": psutil.Process(process.pid).create_time(),
                                "fd": fd, "token": "0" * 32, "run_dir": str(run_dir), "signal": "SIGUSR2"}))
    path.chmod(mode)
    return path


def _capture(pid: int, *extra: str):
    return CliRunner().invoke(cli, ["capture", "--pid", str(pid), "--steps", "3", "--timeout", "1", *extra])


def _refused_and_alive(result, process, words: str):
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and words in result.stderr, result.stderr
    time.sleep(0.2)  # a signal, had one been sent, would have ended it by now
    assert process.poll() is None


def test_a_planted_registration_for_sleep_is_refused_and_sleep_lives(runtime, sleeper, tmp_path):
    process = sleeper()
    _plant(runtime, process, 1, tmp_path)  # create_time is public: it matches
    result = _capture(process.pid)
    _refused_and_alive(result, process, "does not hold its registration")
    assert not registry.request_path(process.pid).exists()  # nothing left for it


def test_a_process_that_holds_the_entry_but_does_not_catch_sigusr2_is_not_signalled(runtime, sleeper, tmp_path):
    # The planted entry is sleep's stdin: its descriptor 0 is the very file, so only the SigCgt
    # check stands between it and the signal.
    entry = runtime / "entry"
    entry.write_text("")
    with open(entry) as stdin:
        process = sleeper(stdin=stdin)
    path = runtime / f"{process.pid}.json"
    os.replace(entry, path)
    _plant(runtime, process, 0, tmp_path)  # written into the same file
    assert os.stat(f"/proc/{process.pid}/fd/0").st_ino == path.stat().st_ino
    assert not registry.catches(process.pid, TRIGGER)
    _refused_and_alive(_capture(process.pid), process, f"does not catch {TRIGGER.name}")


@pytest.mark.parametrize("spoil, words", [
    (lambda folder: folder.chmod(0o755), "mode 755, open to other users"),
    (lambda folder: os.chown(folder, 65534, -1), "owned by uid 65534"),
])
def test_a_folder_that_is_not_private_is_refused_on_both_sides(runtime, sleeper, tmp_path, spoil, words):
    if "uid" in words and os.getuid() != 0:
        pytest.skip("chown to another user needs root")
    process = sleeper()
    _plant(runtime, process, 1, tmp_path)
    spoil(runtime)
    _refused_and_alive(_capture(process.pid), process, words)
    assert "no signal sent" in _capture(process.pid).stderr
    why = registry.register(tmp_path)  # the job's side: no entry, and why
    assert isinstance(why, str) and words in why
    assert not (runtime / f"{os.getpid()}.json").exists()


def test_the_temp_fallback_refuses_a_folder_made_first_or_a_symlink(sleeper, tmp_path, monkeypatch):
    """No XDG_RUNTIME_DIR: <tmp>/gapscope-<uid>, which anyone may have made first."""
    monkeypatch.delenv(RUNTIME_ENV, raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tmp_path / f"gapscope-{os.getuid()}"
    assert registry.runtime_dir() == folder
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir(mode=0o700)
    folder.symlink_to(elsewhere)
    process = sleeper()
    _plant(elsewhere, process, 1, tmp_path)
    _refused_and_alive(_capture(process.pid), process, "is a symlink")
    assert registry.register(tmp_path) == f"{folder} is a symlink"
    folder.unlink()
    folder.mkdir()
    folder.chmod(0o777)
    assert "open to other users" in registry.register(tmp_path)
    folder.rmdir()
    registration = registry.register(tmp_path)  # made here: private
    try:
        assert (folder.stat().st_mode & 0o777) == 0o700
    finally:
        registration.close()


def test_an_entry_with_a_second_link_or_open_to_others_is_refused(runtime, sleeper, tmp_path):
    process = sleeper()
    path = _plant(runtime, process, 1, tmp_path)
    os.link(path, tmp_path / "second")
    _refused_and_alive(_capture(process.pid), process, "not a private file of this user")
    (tmp_path / "second").unlink()
    path.chmod(0o644)
    _refused_and_alive(_capture(process.pid), process, "not a private file of this user")


@pytest.fixture
def registered(runtime, tmp_path):
    """This test process registered as a job would, catching SIGUSR2 (it never traces: its
    windows are the job tests' business); the signals it got."""
    got = []
    previous = signal.signal(TRIGGER, lambda signum, frame: got.append(signum))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    registration = registry.register(run_dir)
    yield {"registration": registration, "got": got, "run_dir": run_dir}
    registration.close()
    signal.signal(TRIGGER, previous)


def test_the_registered_job_passes_the_proof_and_a_wait_that_times_out_withdraws(registered):
    entry = registry.proven_entry(os.getpid())
    assert entry["token"] == registered["registration"].token and entry["run_dir"] == registered["run_dir"]
    result = _capture(os.getpid())
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.output
    assert "within 1 s" in result.stderr and "withdrawn" in result.stderr
    assert registered["got"] == [TRIGGER]
    assert not registry.request_path(os.getpid()).exists()  # a later capture is not refused


def test_an_entry_whose_run_dir_is_not_the_users_folder_is_refused(registered, tmp_path):
    path = registered["registration"].path
    (tmp_path / "link").symlink_to(registered["run_dir"])
    for run_dir in (tmp_path / "missing", tmp_path / "link"):
        entry = json.loads(path.read_text())
        entry["run_dir"] = str(run_dir)
        path.write_text(json.dumps(entry))  # the same file, which the job holds open
        result = _capture(os.getpid())
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
        assert "is not a folder of this user" in result.stderr
    assert registered["got"] == []


def test_a_request_without_the_token_is_ignored_by_the_job(registered):
    request = registry.request_path(os.getpid())
    request.write_text(json.dumps({"steps": 3, "window_dir": "/tmp/x", "token": "f" * 32}))
    assert registry.read_request(os.getpid(), registered["registration"].token) is None
    request.write_text(json.dumps({"steps": 3, "window_dir": "/tmp/x",
                                   "token": registered["registration"].token}))
    assert registry.read_request(os.getpid(), registered["registration"].token)["steps"] == 3


def test_a_capture_loop_outside_the_main_thread_is_said_and_not_signalled(runtime, tmp_path):
    """Issue 47 item 8: such a job was told it "runs no gapscope capture". Its entry now says
    why it cannot be asked (Python handles signals in the main thread only); nothing is sent."""
    import threading

    import torch

    import gapscope
    ready, finish = threading.Event(), threading.Event()

    def loop():
        with gapscope.capture("thread-mlp", trace_steps=None, out=tmp_path / "out", warmup_steps=1) as cap:
            for _ in range(3):
                with cap.phase("forward"):
                    torch.ones(4).sum()
                cap.step()
            ready.set()
            finish.wait(60)
    thread = threading.Thread(target=loop)
    thread.start()
    try:
        assert ready.wait(60)
        result = _capture(os.getpid())
    finally:
        finish.set()
        thread.join(60)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert (f"process {os.getpid()} runs a gapscope capture that cannot be asked for a window: its "
            "capture loop runs outside the main thread, where Python cannot handle SIGUSR2") in result.stderr
    assert signal.getsignal(TRIGGER) is signal.SIG_DFL and not list(runtime.glob("*.json"))


def test_a_job_with_its_own_sigusr2_handler_is_said_and_not_signalled(runtime, tmp_path):
    import torch

    import gapscope
    got = []
    previous = signal.signal(TRIGGER, lambda signum, frame: got.append(signum))
    try:
        with gapscope.capture("own-handler", trace_steps=None, out=tmp_path / "out", warmup_steps=1) as cap:
            for _ in range(3):
                with cap.phase("forward"):
                    torch.ones(4).sum()
                cap.step()
            result = _capture(os.getpid())
        kept = signal.getsignal(TRIGGER)
    finally:
        signal.signal(TRIGGER, previous)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "it has a SIGUSR2 handler of its own, which gapscope keeps" in result.stderr
    assert got == [] and kept is not signal.SIG_DFL and not list(runtime.glob("*.json"))
