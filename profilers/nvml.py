"""NVIDIA GPUs through NVML (nvidia-ml-py): present or not, without importing a framework."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def nvml():
    """The initialised pynvml module, or None where there is no NVIDIA driver."""
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:  # no library, no driver, no device: all mean "no NVML here"
        return None
    return pynvml


def gpu_count() -> int:
    lib = nvml()
    return lib.nvmlDeviceGetCount() if lib else 0
