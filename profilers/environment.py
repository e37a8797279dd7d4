"""What a run ran on: library versions, device and host, for the manifest."""
from __future__ import annotations

import platform
import socket
import sys
from importlib import metadata

_PACKAGES = ("torch", "tensorflow", "tensorflow-cpu", "keras", "tensorboard", "numpy")


def versions() -> dict[str, str | None]:
    found = {"python": platform.python_version()}
    for package in _PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    if found.pop("tensorflow-cpu") and not found["tensorflow"]:
        found["tensorflow"] = metadata.version("tensorflow-cpu")
    torch = sys.modules.get("torch")  # only if the runner already imported it
    found["cuda"] = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
    return found


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host() -> str:
    return socket.gethostname()
