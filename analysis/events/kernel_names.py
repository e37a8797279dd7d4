"""Kernel names as people read them: demangled by the C++ runtime's own demangler, and shortened."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re

# ROCm traces (roctracer, rocprofiler) keep HIP kernels' mangled Itanium names (_ZN2at6native…);
# Kineto demangles CUDA's. The demangler is the one the C++ runtime exports (libstdc++, or
# libc++abi on macOS): the maintained implementation, with nothing to install.
_MANGLED = re.compile(r"^_Z[A-Za-z0-9_.$]+$")
# `at::native::` and `std::`: a qualifier says where a name lives, not which kernel it is.
_QUALIFIER = re.compile(r"\b(?:[A-Za-z_]\w*::)+")
_LONGEST = 80


@functools.cache
def _cxa_demangle():
    """abi::__cxa_demangle and free, or None where no C++ runtime can be loaded."""
    for name in ("libstdc++.so.6", ctypes.util.find_library("stdc++"), ctypes.util.find_library("c++abi")):
        if not name:
            continue
        try:
            runtime = ctypes.CDLL(name)
            demangle = runtime.__cxa_demangle
        except (OSError, AttributeError):
            continue
        demangle.restype = ctypes.c_void_p
        demangle.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
        free = ctypes.CDLL(None).free
        free.argtypes = [ctypes.c_void_p]
        return demangle, free
    return None


@functools.lru_cache(maxsize=4096)
def demangled(name: str) -> str:
    """The C++ name a mangled symbol stands for (`_ZN2at6native…` -> `void at::native::…(…)`);
    any other name, or one the demangler refuses, as it is."""
    if not _MANGLED.match(name):
        return name
    found = _cxa_demangle()
    if found is None:
        return name
    demangle, free = found
    status = ctypes.c_int(0)
    # A HIP code object's kernel symbol may end in ".kd" (its descriptor): the kernel's name.
    pointer = demangle(name.removesuffix(".kd").encode(), None, None, ctypes.byref(status))
    if not pointer:
        return name
    try:
        return ctypes.string_at(pointer).decode("utf-8", "replace") if status.value == 0 else name
    finally:
        free(pointer)


def short_kernel_name(name: str, longest: int = _LONGEST) -> str:
    """A kernel's name to print: demangled, without `void`, its argument list and the namespaces
    of every name in it, template arguments kept (they tell FillFunctor's kernel from GELU's):
    `vectorized_elementwise_kernel<4, FillFunctor<float>, array<char*, 1ul>>`; at most `longest`
    characters."""
    text = demangled(name)
    if "<" not in text and "(" not in text:  # no C++ signature: an op's name (aten::addmm) as it is
        return text if len(text) <= longest else text[:longest - 1] + "…"
    text = text.replace("(anonymous namespace)::", "").removeprefix("void ")
    depth = 0
    for i, char in enumerate(text):
        depth += char == "<"
        depth -= char == ">"
        if char == "(" and depth == 0 and i:
            text = text[:i]
            break
    text = _QUALIFIER.sub("", text).replace("> >", ">>").strip() or name
    return text if len(text) <= longest else text[:longest - 1] + "…"
