"""Sets up gapscope in its own virtual environment (.venv), then runs the demo or the tests.

    python3 bootstrap.py            set up, then run the MLP in PyTorch and Keras/TF side by side
    python3 bootstrap.py test       set up, then run the whole test suite
    python3 bootstrap.py --gpu ...  the same with the CUDA builds of torch and TensorFlow

Only the Python standard library is used here, so a fresh machine needs nothing but Python
and pip. Installing is skipped when nothing it depends on has changed since the last time.
"""
from __future__ import annotations

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
    check(pip + ["install", "--quiet", "-c", str(ROOT / "requirements" / f"{flavour}.txt"),
                 "-e", f"{ROOT}[{flavour},test]"])
    for other in VENV.glob(".gapscope-installed-*"):
        other.unlink()
    stamp.write_text(digest)


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
