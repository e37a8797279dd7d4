"""What a run ran on: library versions, device and host, for the manifest."""
from __future__ import annotations

import os
import platform
import socket
import sys
from importlib import metadata
from pathlib import Path

_PACKAGES = ("torch", "tensorflow", "tensorflow-cpu", "keras", "jax", "jaxlib", "tensorboard", "numpy")
# Where this gapscope was imported from, the folder child processes put first on their path: this
# file's path as imported, not resolved (in a checkout profilers/ is linked into gapscope/ and the
# folder holding gapscope/ is the repository; in an installed wheel, site-packages).
IMPORT_ROOT = Path(__file__).parents[2]
GAPSCOPE_PACKAGE = IMPORT_ROOT / "gapscope"


def importing_this_gapscope(env: dict) -> dict:
    """`env` with IMPORT_ROOT first on PYTHONPATH: a child process imports the gapscope this one
    runs, not another copy an editable install or its working directory would find first."""
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join([str(IMPORT_ROOT), *paths])}


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
    found["tf_cpu_allocator"] = tf_cpu_allocator()
    return found


def tf_cpu_allocator() -> str | None:
    """Which allocator TensorFlow's CPU tensors came from, which decides what its profiler
    records: "onednn" (oneDNN on: its allocator's large blocks are recorded), "bfc"
    (TF_CPU_ALLOCATOR_USE_BFC: every block), "default" (neither: none at all). oneDNN is on by
    default only on CPUs with AVX-512/AMX features (off on an AVX2 AMD EPYC), or by
    TF_ENABLE_ONEDNN_OPTS. None where TensorFlow was not loaded."""
    if "tensorflow" not in sys.modules:
        return None
    try:
        from tensorflow.python.util import _pywrap_util_port
        onednn = bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return None
    if onednn:
        return "onednn"
    # TF reads it as a bool variable: true/false or 1/0, any case.
    bfc = os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").strip().lower() in ("1", "true")
    return "bfc" if bfc else "default"


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


def torch_device_name(device=None) -> str:
    """A CUDA device's product name, else the CPU's; None means torch's default choice."""
    import torch
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()


def tf_device_name(gpu: bool = True) -> str:
    """The first GPU TensorFlow sees (where `gpu` and there is one), else the CPU."""
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU") if gpu else []
    if gpus:
        return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
    return cpu_name()


def jax_device_name() -> str:
    """The device JAX computes on first: a GPU's kind ("NVIDIA H200"), else the CPU's name."""
    import jax
    device = jax.devices()[0]
    return cpu_name() if device.platform == "cpu" else device.device_kind


def omp_num_threads() -> str:
    """OMP_NUM_THREADS as this process has it ("unset": the frameworks use every core). torchrun
    sets 1 per rank where it is unset, so a scaling comparison must know each side's."""
    return os.environ.get("OMP_NUM_THREADS") or "unset"


def threads_of(manifest: dict) -> str | None:
    """The threads a run's process computed with, as its manifest says: the TF intra-op pool
    gapscope gave a local TF worker (cores // workers), else OMP_NUM_THREADS ("unset": every
    core); None where the run recorded neither (older runs)."""
    if isinstance(manifest.get("intra_op_threads"), int):
        return f"TF intra-op {manifest['intra_op_threads']}"
    threads = manifest.get("omp_num_threads")
    return None if threads is None else f"OMP_NUM_THREADS {threads}"
