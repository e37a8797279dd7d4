"""The pip command bootstrap builds: PyTorch's CPU index only where pip's own sources lack the
pinned +cpu torch, asked of pip itself (dry runs: nothing is installed)."""
from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path

import pytest

import bootstrap

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
TORCH_PIN = bootstrap._pinned("torch", bootstrap.ROOT / "requirements" / "cpu.txt")
ADDED = ["--extra-index-url", bootstrap.PYTORCH_CPU_INDEX]


def _isolated(**variables) -> dict:
    """A machine with no pip configuration of its own: no config file, no PIP_* variable."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_") and k != bootstrap.TORCH_INDEX_ENV}
    return {**env, "PIP_CONFIG_FILE": os.devnull, **variables}


def _wheel_folder(folder: Path, version: str) -> Path:
    """A folder holding a (tiny, pure-Python) wheel named like the pinned torch build."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"torch-{version}.dist-info"
    with zipfile.ZipFile(folder / f"torch-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr("torch/__init__.py", "")
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                                         "Root-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return folder


def _tail(command: list[str]) -> list[str]:
    """What follows the editable install: the index options bootstrap chose."""
    return command[command.index(f"{bootstrap.ROOT}[cpu,test]") + 1:]


def test_public_index_only_adds_pytorchs_cpu_index():
    """The user's machine: PyPI alone, which never holds a +cpu build."""
    command = bootstrap.install_command(PIP, "cpu", _isolated())
    assert _tail(command) == ADDED
    assert command[command.index("-c") + 1].endswith("requirements/cpu.txt")


def test_a_local_wheel_folder_with_the_build_adds_nothing(tmp_path):
    links = _wheel_folder(tmp_path / "wheels", TORCH_PIN.split("==")[1])
    assert _tail(bootstrap.install_command(PIP, "cpu", _isolated(PIP_FIND_LINKS=str(links)))) == []


def test_a_local_wheel_folder_without_the_build_adds_the_index(tmp_path):
    links = _wheel_folder(tmp_path / "wheels", "2.13.0")  # the CUDA build's version: not the pin
    assert _tail(bootstrap.install_command(PIP, "cpu", _isolated(PIP_FIND_LINKS=str(links)))) == ADDED


def test_this_machines_configuration_installs_offline():
    """Here pip finds the +cpu wheel in its local wheel folder: the command must not name
    download.pytorch.org, which cannot be reached from here."""
    sources = bootstrap._pip_sources(PIP, dict(os.environ))
    local = [Path(link) for link in sources["find-links"] if bootstrap._is_local(link)]
    wheel = f"torch-{TORCH_PIN.split('==')[1]}-"
    if not any(p.is_dir() and any(f.name.startswith(wheel) for f in p.iterdir()) for p in local):
        pytest.skip("no local wheel folder with the pinned torch on this machine")
    env = {k: v for k, v in os.environ.items() if k != bootstrap.TORCH_INDEX_ENV}
    assert _tail(bootstrap.install_command(PIP, "cpu", env)) == []


@pytest.mark.parametrize("value, expected", [
    ("https://mirror.example/pytorch/cpu", ["--extra-index-url", "https://mirror.example/pytorch/cpu"]),
    ("none", []),
])
def test_the_users_torch_index_wins(value, expected):
    env = _isolated(**{bootstrap.TORCH_INDEX_ENV: value})
    assert _tail(bootstrap.install_command(PIP, "cpu", env)) == expected


def test_gpu_flavour_takes_torch_from_the_index_as_pinned():
    command = bootstrap.install_command(PIP, "gpu", _isolated())
    assert command[-1] == f"{bootstrap.ROOT}[gpu,test]" and "--extra-index-url" not in command
    assert command[command.index("-c") + 1].endswith("requirements/gpu.txt")


@pytest.mark.parametrize("carries_torch", [False, True])
def test_a_configured_mirror_is_asked_for_the_build(tmp_path, carries_torch):
    """An index other than PyPI is asked (it may carry PyTorch's builds): one that has the pin
    needs nothing more, one without it gets PyTorch's CPU index. A local HTTP index stands in."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
    (tmp_path / "simple" / "torch").mkdir(parents=True)
    if carries_torch:
        wheel = next(_wheel_folder(tmp_path / "files", TORCH_PIN.split("==")[1]).iterdir())
        href = f"../../files/{wheel.name.replace('+', '%2B')}"
        (tmp_path / "simple" / "torch" / "index.html").write_text(
            f'<html><body><a href="{href}">{wheel.name}</a></body></html>')
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        mirror = f"http://127.0.0.1:{server.server_address[1]}/simple"
        assert bootstrap._pip_sources(PIP, _isolated(PIP_INDEX_URL=mirror))["index"] == [mirror]
        command = bootstrap.install_command(PIP, "cpu", _isolated(PIP_INDEX_URL=mirror))
    finally:
        server.shutdown()
    assert _tail(command) == ([] if carries_torch else ADDED)
