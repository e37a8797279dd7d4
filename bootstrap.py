"""Sets up gapscope in its own virtual environment (.venv), then runs the demo or the tests.

    python3 bootstrap.py            set up, then run the MLP in PyTorch and Keras/TF side by side
    python3 bootstrap.py test       set up, then run the whole test suite
    python3 bootstrap.py --gpu ...  the same with the CUDA builds of torch and TensorFlow

Only the Python standard library is used here, so a fresh machine needs nothing but Python
and pip. Installing is skipped when nothing it depends on has changed since the last time.
"""
from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
INSTALL_INPUTS = ("setup.cfg", "pyproject.toml", "requirements/cpu.txt", "requirements/gpu.txt")
PYPI = "https://pypi.org/simple"
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# An index URL for the +cpu torch build (a mirror of PyTorch's CPU index), or "none" for none.
TORCH_INDEX_ENV = "GAPSCOPE_TORCH_INDEX"
# A mirror that does not answer within this is taken not to carry the +cpu build.
PROBE_TIMEOUT_S = 15
# The PIP_* variables that name where packages come from (the local probe drops them).
_SOURCE_VARIABLES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX",
                     "PIP_CONFIG_FILE")


def main(argv: list[str]) -> int:
    gpu = "--gpu" in argv
    args = [a for a in argv if a != "--gpu"]
    if sys.version_info < (3, 11):
        print("gapscope needs Python 3.11 or newer", file=sys.stderr)
        return 2
    setup(gpu)
    if args[:1] == ["test"]:
        return run([str(BIN / "python"), "-m", "pytest", *args[1:]])
    return run([str(BIN / "gapscope"), "demo", *args])


def setup(gpu: bool) -> None:
    flavour = "gpu" if gpu else "cpu"
    stamp = VENV / f".gapscope-installed-{flavour}"
    digest = _inputs_digest(flavour)
    if stamp.exists() and stamp.read_text() == digest:
        return
    if not (BIN / "python").exists():
        print(f"creating {VENV} ...", file=sys.stderr)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print(f"installing gapscope and its {flavour} dependencies (first time: a few minutes) ...",
          file=sys.stderr)
    pip = [str(BIN / "python"), "-m", "pip", "--disable-pip-version-check"]
    check(pip + ["install", "--quiet", "--upgrade", "pip", "setuptools", "wheel"])
    check(install_command(pip, flavour))
    for other in VENV.glob(".gapscope-installed-*"):
        other.unlink()
    stamp.write_text(digest)


def install_command(pip: list[str], flavour: str, env: dict | None = None) -> list[str]:
    """The pip command that installs gapscope with the pinned `flavour` dependencies; for the
    CPU flavour with PyTorch's CPU wheel index added where pip's own sources lack the pin."""
    env = dict(os.environ if env is None else env)
    command = pip + ["install", "--quiet", "-c", str(ROOT / "requirements" / f"{flavour}.txt"),
                     "-e", f"{ROOT}[{flavour},test]"]
    if flavour == "cpu":
        command += torch_index_args(pip, env)
    return command


def torch_index_args(pip: list[str], env: dict) -> list[str]:
    """`--extra-index-url` of PyTorch's CPU wheels, or nothing where pip finds the pinned +cpu
    torch without it. PyPI holds no +cpu builds (it refuses local versions), so a machine with
    only the public index needs PyTorch's own; a machine with a local wheel folder (find-links,
    a file:// index) or a mirror that carries the build must not contact it (it may be
    unreachable, and pip would wait out its time-out there)."""
    chosen = env.get(TORCH_INDEX_ENV)
    if chosen is not None:  # the user's word: a mirror of PyTorch's CPU index, or "none"
        chosen = chosen.strip()
        return [] if chosen.lower() in ("", "none") else ["--extra-index-url", chosen]
    torch = _pinned("torch", ROOT / "requirements" / "cpu.txt")
    sources = _pip_sources(pip, env)
    if _local_probe(pip, env, torch, sources):
        _note(f"{torch}: found in pip's local sources")
        return []
    mirrors = [url for url in sources["index"] if not _is_local(url) and not _is_pypi(url)]
    mirrors += [link for link in sources["find-links"] if not _is_local(link)]
    if mirrors and _probe(pip, env, torch, ["--timeout", str(PROBE_TIMEOUT_S), "--retries", "0"]):
        _note(f"{torch}: found on the configured index {mirrors[0]}")
        return []
    _note(f"{torch}: not in pip's configured sources; adding PyTorch's CPU index {PYTORCH_CPU_INDEX}"
          f" (set {TORCH_INDEX_ENV} to use a mirror of it instead)")
    return ["--extra-index-url", PYTORCH_CPU_INDEX]


def _pinned(name: str, constraints: Path) -> str:
    for line in constraints.read_text().splitlines():
        if line.split("==")[0].strip().lower() == name:
            return line.strip()
    raise SystemExit(f"set-up failed: {constraints} pins no {name}")


def _pip_sources(pip: list[str], env: dict) -> dict[str, list[str]]:
    """Index URLs and find-links as pip itself sees them (config files and PIP_* variables,
    `pip config list`), the more specific winning: a PIP_* variable, then [install], then
    [global]. No index-url: PyPI; no-index: none."""
    output = subprocess.run(pip + ["config", "list"], env=env, capture_output=True, text=True,
                            cwd=ROOT).stdout
    found: dict[str, tuple[int, str]] = {}
    rank = {"global": 0, "install": 1, ":env:": 2}
    for line in output.splitlines():
        key, _, value = line.partition("=")
        section, _, option = key.rpartition(".")
        if section not in rank or option not in ("index-url", "extra-index-url", "find-links",
                                                 "no-index"):
            continue
        try:
            value = str(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            continue
        if option not in found or found[option][0] <= rank[section]:
            found[option] = (rank[section], value)
    value = {option: text.split() for option, (_, text) in found.items()}
    no_index = (value.get("no-index") or ["false"])[0].lower() in ("1", "true", "yes", "on")
    index = [] if no_index else (value.get("index-url") or [PYPI]) + value.get("extra-index-url", [])
    return {"index": index, "find-links": value.get("find-links", [])}


def _local_probe(pip: list[str], env: dict, requirement: str, sources: dict) -> bool:
    """Whether the local sources alone (find-links folders, file:// indexes) hold a wheel of
    `requirement` this Python installs: pip asked with everything else switched off, so it
    contacts no host."""
    indexes = [url for url in sources["index"] if _is_local(url)]
    links = [link for link in sources["find-links"] if _is_local(link)]
    if not indexes and not links:
        return False
    options = (["--index-url", indexes[0]] + [a for url in indexes[1:]
                                              for a in ("--extra-index-url", url)]
               if indexes else ["--no-index"])
    options += [a for link in links for a in ("--find-links", link)]
    isolated = {k: v for k, v in env.items() if k not in _SOURCE_VARIABLES}
    isolated["PIP_CONFIG_FILE"] = os.devnull  # pip then reads no configuration file
    return _probe(pip, isolated, requirement, options)


def _probe(pip: list[str], env: dict, requirement: str, options: list[str]) -> bool:
    """Whether pip would find `requirement`: a dry run that downloads no package."""
    command = pip + ["install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet",
                     *options, requirement]
    return subprocess.run(command, env=env, capture_output=True, cwd=ROOT).returncode == 0


def _is_local(location: str) -> bool:
    return location.startswith("file:") or "://" not in location


def _is_pypi(url: str) -> bool:
    return url.rstrip("/") in (PYPI, "https://pypi.python.org/simple")


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def _inputs_digest(flavour: str) -> str:
    sha = hashlib.sha256(flavour.encode())
    for name in INSTALL_INPUTS:
        sha.update((ROOT / name).read_bytes())
    return sha.hexdigest()


def check(command: list[str]) -> None:
    if subprocess.call(command, cwd=ROOT) != 0:
        print(f"set-up failed: {' '.join(command)}", file=sys.stderr)
        sys.exit(1)


def run(command: list[str]) -> int:
    return subprocess.call(command, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
