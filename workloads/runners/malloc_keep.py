"""The malloc-keep variant: glibc told, before the run builds anything, to keep the memory it frees."""
from __future__ import annotations

import ctypes

from gapscope.profilers.errors import UnsupportedVariantError

# mallopt's parameters (glibc's malloc.h) and the values the variant sets: the largest mmap
# threshold glibc takes on 64-bit (blocks up to it come from the heap and are reused, not
# mapped and unmapped each step), a trim threshold no step reaches, and a top pad that grows
# the heap in steps of 256 MiB. Fixing them also stops glibc adjusting the thresholds to what
# a process freed before (which made processes of one loop differ: benchmarks/README.md).
SETTINGS = {"M_MMAP_THRESHOLD": (-3, 32 << 20), "M_TRIM_THRESHOLD": (-1, 1 << 30),
             "M_TOP_PAD": (-2, 256 << 20)}


def keep_freed_memory() -> dict[str, int]:
    """Sets them in this process; what was set, for the manifest."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        raise UnsupportedVariantError("variant 'malloc-keep': this C library has no mallopt")
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    for name, (parameter, value) in SETTINGS.items():
        if mallopt(parameter, value) != 1:  # glibc returns 1 on success
            raise UnsupportedVariantError(f"variant 'malloc-keep': mallopt({name}, {value}) was refused")
    return {name: value for name, (_, value) in SETTINGS.items()}
