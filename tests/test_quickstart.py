"""The README's quick start, run exactly as written: every command of its bash blocks (but the
set-up, which made the environment these tests run in) and its Python loop, in a fresh folder,
in the order the README gives them."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import compare_exit_code

PROJECT = Path(__file__).resolve().parent.parent
README = PROJECT / "README.md"
SET_UP = "python3 bootstrap.py"
# The quick start's own words for the file its Python block goes to.
LOOP_FILE = "my_loop.py"
TENSORBOARD_PORT = 6006


def quick_start() -> str:
    text = README.read_text()
    start = text.index("## Quick start")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def commands(section: str) -> list[str]:
    return [line for block in blocks(section, "bash") for line in block.splitlines()
            if line.strip() and not line.startswith(SET_UP)]


def test_the_quick_start_is_short_and_keeps_the_set_up_commands():
    section = quick_start()
    lines = section.splitlines()
    assert len(lines) <= 50, len(lines)
    assert f"{SET_UP}        #" in section and f"{SET_UP} test   #" in section  # .ci/run's
    assert f"saved as `{LOOP_FILE}`" in section and "capture(" in section and 'out="' in section
    said = " ".join(commands(section))
    for step in ("gapscope run", "gapscope compare", f"python {LOOP_FILE}", "gapscope tensorboard"):
        assert step in said, step
    assert (PROJECT / "docs" / "reference.md").is_file() and "docs/reference.md" in section


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_every_quick_start_command_works_as_written(tmp_path):
    section = quick_start()
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # the commands say .venv/bin/...
    (loop,) = blocks(section, "python")
    (tmp_path / LOOP_FILE).write_text(loop)
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    for command in commands(section):
        if "gapscope tensorboard" in command:
            _tensorboard(command, tmp_path, env)
            continue
        done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600)
        # compare says INCONCLUSIVE (exit 3) where the runs ran beside other work.
        runs = (tmp_path / "quickstart").glob("mlp-*")
        expected = compare_exit_code(*runs) if " compare " in command else 0
        assert done.returncode == expected, (command, done.stdout[-2000:], done.stderr[-2000:])
        assert "Traceback" not in done.stderr, (command, done.stderr[-2000:])
        said = " ".join(done.stdout.split())  # lines wrap at 80 columns
        if " compare " in command:
            assert re.search(r"mlp keras is \d+\.\d\dx( \[[\d., ]+\])? (slower|faster) than mlp torch|within noise"
                             r"|^INCONCLUSIVE: mlp keras vs mlp torch", said), done.stdout
            assert "--measure mlp:torch mlp:keras" in said  # the one-process caveat
            assert len(done.stdout.splitlines()) <= 40
        if " breakdown " in command:
            assert "my-loop torch user" in said and "backward" in said
            if "--layers" in command:  # the loop's own model's layers: Sequential's 0 and 2
                assert re.search(r"│ 0 +│.*│ 2 +│.*outside layers", said), done.stdout
    runs = sorted(p.name.split("-2")[0] for p in (tmp_path / "quickstart").iterdir())
    assert runs == ["mlp-keras-default", "mlp-torch-default", "my-loop-torch-user"]


def _tensorboard(command: str, cwd: Path, env: dict) -> None:
    """Runs until Ctrl-C, as the quick start says: its URL is read, then it is interrupted."""
    deadline = time.monotonic() + 120
    while not _port_free(TENSORBOARD_PORT):  # another TensorBoard of this machine's tests
        if time.monotonic() > deadline:
            pytest.skip(f"port {TENSORBOARD_PORT} stayed taken: the command needs its default port")
        time.sleep(2)
    process = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = process.stdout.readline().strip()
        assert url.startswith(f"http://127.0.0.1:{TENSORBOARD_PORT}"), (url, process.stderr.read())
    finally:
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=60)
    assert code in (0, 130), code
