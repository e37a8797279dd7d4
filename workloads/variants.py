"""Execution variants by short name, and how a comma-separated combination becomes run settings.

Variants are data: each names the frameworks it applies to and the settings it sets. A
combination that cannot run here, or makes no sense, is refused with one line, never
silently changed."""
from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass, field

from gapscope.profilers.errors import UnsupportedVariantError

TORCH, KERAS, KERAS_TORCH, KERAS_JAX, TF = "torch", "keras", "keras-torch", "keras-jax", "tf"
KERAS_PATHS = (KERAS, KERAS_TORCH, KERAS_JAX)
# Keras on JAX always jits its step (jit_compile 'auto' is True there): jit is its baseline.
KERAS_JIT_CHOICE = (KERAS, KERAS_TORCH)


@dataclass(frozen=True)
class Variant:
    name: str
    frameworks: tuple[str, ...]
    description: str
    settings: dict = field(default_factory=dict)
    needs_cuda: bool = False
    needs_glibc: bool = False


_FIXED = (
    # Eager says "no compiler": combined with a compile variant or torchscript it contradicts it.
    Variant("eager", (TORCH,), "PyTorch eager execution (the baseline)",
            {"compile_mode": None, "compile_backend": None, "torchscript": None}),
    Variant("default", (TORCH, KERAS, KERAS_TORCH, KERAS_JAX, TF),
            "the framework's baseline: torch eager, Keras fit without XLA (on JAX: jitted, as "
            "always there), TF tf.function"),
    Variant("compile", (TORCH,), "torch.compile, default mode (Inductor)", {"compile_mode": "default"}),
    Variant("compile-reduce-overhead", (TORCH,), "torch.compile mode='reduce-overhead'",
            {"compile_mode": "reduce-overhead"}),
    Variant("compile-max-autotune", (TORCH,), "torch.compile mode='max-autotune'",
            {"compile_mode": "max-autotune"}),
    Variant("cudagraphs", (TORCH,), "torch.compile backend='cudagraphs' (drops the last partial batch)",
            {"compile_backend": "cudagraphs", "drop_last": True}, needs_cuda=True),
    # TorchScript compiles the model itself, so it says "no torch.compile", as eager does:
    # beside a compile variant the two disagree and the combination is refused.
    Variant("torchscript", (TORCH,), "TorchScript: torch.jit.script, torch.jit.trace on the first "
            "batch where scripting fails", {"torchscript": True, "compile_mode": None,
                                            "compile_backend": None}),
    Variant("high-precision", (TORCH,), "torch.set_float32_matmul_precision('high') (TF32 on GPUs)",
            {"matmul_precision": "high"}),
    Variant("amp-fp16", (TORCH,), "autocast to float16", {"amp_dtype": "float16"}),
    Variant("amp-bf16", (TORCH,), "autocast to bfloat16", {"amp_dtype": "bfloat16"}),
    Variant("scaler", (TORCH,), "torch.amp.GradScaler (with amp-fp16)", {"grad_scaler": True}),
    Variant("jit", KERAS_JIT_CHOICE, "compile(jit_compile=True): XLA on TF, torch.compile on torch",
            {"jit_compile": True}),
    Variant("jit-auto", KERAS_JIT_CHOICE, "compile(jit_compile='auto')", {"jit_compile": "auto"}),
    Variant("mixed-float16", KERAS_PATHS, "keras mixed_float16 dtype policy",
            {"mixed_precision": "mixed_float16"}),
    Variant("tf-eager", (TF,), "raw TF loop, GradientTape executed eagerly", {"tf_mode": "eager"}),
    Variant("tf-function", (TF,), "raw TF loop inside tf.function", {"tf_mode": "function"}),
    Variant("tf-xla", (TF,), "raw TF loop inside tf.function(jit_compile=True)", {"tf_mode": "xla"}),
    Variant("transforms", (TORCH, KERAS_TORCH),
            "torch Dataset with per-sample transforms (uint8 -> CHW float, standardise)",
            {"pipeline": "transforms"}),
    Variant("tensor-dataset", (TORCH, KERAS_TORCH), "TensorDataset over prepared tensors",
            {"pipeline": "tensor-dataset"}),
    Variant("preload", (TORCH,), "prepared tensors preloaded to the device, index shuffling",
            {"pipeline": "preload"}),
    # On a GPU the DataLoader pins its batches; this one leaves them pageable, which the driver
    # stages through a pinned buffer of its own before the copy.
    Variant("pageable", (TORCH,), "DataLoader without pin_memory: batches in pageable host memory",
            {"pageable": True}, needs_cuda=True),
    Variant("tfdata", (KERAS, TF), "tf.data from_tensor_slices, shuffle(20000), batch, "
            "num_parallel_calls and prefetch AUTOTUNE", {"pipeline": "tfdata"}),
    Variant("numpy", KERAS_PATHS, "NumPy arrays straight into fit, fit shuffles",
            {"pipeline": "numpy"}),
    Variant("inference", (TORCH, *KERAS_PATHS), "forward only, no gradients",
            {"inference": True}),
    # An allocator setting, not a framework one: a CPU step that frees tens of MB and takes them
    # again pays a page fault per 4 KiB each time (the torch CNN here: 19 % of its step).
    Variant("malloc-keep", (TORCH, *KERAS_PATHS, TF),
            "glibc keeps the memory it frees (mallopt: mmap threshold 32 MiB, trim threshold "
            "1 GiB, top pad 256 MiB): steps take no fresh pages from the kernel",
            {"malloc_keep": True}, needs_glibc=True),
)
# Parametrised names: spe512 (Keras steps_per_execution), nw6 (DataLoader num_workers),
# cache64 (torch._dynamo.config.cache_size_limit).
_PATTERNS = (
    (re.compile(r"^spe(\d+)$"), KERAS_PATHS, "steps_per_execution", "steps_per_execution N (1 ... 512)"),
    (re.compile(r"^nw(\d+)$"), (TORCH, KERAS_TORCH), "num_workers",
     "DataLoader(num_workers=N): 0 synchronous, N > 0 worker processes"),
    (re.compile(r"^cache(\d+)$"), (TORCH,), "dynamo_cache_limit", "torch._dynamo.config.cache_size_limit N"),
)
VARIANTS = {v.name: v for v in _FIXED}
PATTERN_HELP = {"spe<N>": _PATTERNS[0][3], "nw<N>": _PATTERNS[1][3], "cache<N>": _PATTERNS[2][3]}


def lookup(name: str) -> Variant:
    if name in VARIANTS:
        return VARIANTS[name]
    for pattern, frameworks, key, help_text in _PATTERNS:
        match = pattern.match(name)
        if match and len(match.group(1)) > 9:  # no count is that large (nor fits a C int)
            raise UnsupportedVariantError(f"variant {_shown(name)!r}: the number is far too large")
        if match:
            return Variant(name, frameworks, help_text, {key: int(match.group(1))})
    known = ", ".join(list(VARIANTS) + list(PATTERN_HELP))
    raise UnsupportedVariantError(f"unknown variant {_shown(name)!r}; known: {known}")


def _shown(name: str) -> str:
    """A name as an error message quotes it: one line, even for a huge one."""
    return name if len(name) <= 40 else f"{name[:40]}..."


def names_for(framework: str) -> list[str]:
    fixed = [v.name for v in _FIXED if framework in v.frameworks]
    return fixed + [n for (p, fw, _, _), n in zip(_PATTERNS, PATTERN_HELP) if framework in fw]


def resolve(framework: str, combination: str, cuda_available: bool) -> tuple[str, dict]:
    """(canonical name, settings) of a comma-separated combination for one framework."""
    names = _names(combination)
    settings: dict = {}
    set_by: dict[str, str] = {}
    for name in names:
        variant = lookup(name)
        if framework not in variant.frameworks:
            raise UnsupportedVariantError(
                f"variant {name!r} does not apply to {framework} (only {', '.join(variant.frameworks)})")
        if variant.needs_cuda and not cuda_available:
            raise UnsupportedVariantError(f"variant {name!r} needs a CUDA GPU; none is present")
        if variant.needs_glibc and platform.libc_ver()[0] != "glibc":
            raise UnsupportedVariantError(f"variant {name!r} sets glibc's allocator; this "
                                          f"Python runs on {platform.libc_ver()[0] or 'another C library'}")
        for key, value in variant.settings.items():
            if key in settings and settings[key] != value:
                raise UnsupportedVariantError(
                    f"variants {set_by[key]!r} and {name!r} disagree on {key} "
                    f"({settings[key]!r} vs {value!r}); keep one")
            settings[key], set_by[key] = value, name
    settings = {k: v for k, v in settings.items() if v is not None}  # eager's "no compile"
    _check_combination(framework, settings)
    canonical = ",".join(n for n in names if n not in ("default", "eager")) or "default"
    return canonical, settings


def _names(combination: str) -> list[str]:
    """The names in a combination, refused rather than guessed at: an empty name (`""`,
    `compile,`), one named twice, or `default` beside others (it means "no variant")."""
    names = [n.strip() for n in str(combination).split(",")]
    if not all(names):
        raise UnsupportedVariantError(f"--variant {combination!r} has an empty name; "
                                      "give variant names separated by commas, or default")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UnsupportedVariantError(f"variant {repeated[0]!r} is named twice in {combination!r}")
    if "default" in names and len(names) > 1:
        raise UnsupportedVariantError(f"--variant {combination!r}: default means no variant and "
                                      "combines with none; name only the variants")
    return names


def max_workers() -> int:
    """DataLoader workers worth starting here: more than a few per CPU only queue for them,
    and a huge count would fork until the machine gives out."""
    return 4 * (os.cpu_count() or 1)


def _check_combination(framework: str, settings: dict) -> None:
    workers = settings.get("num_workers") or 0
    if workers > max_workers():
        raise UnsupportedVariantError(f"nw{workers}: at most {max_workers()} DataLoader workers on "
                                      f"this machine ({os.cpu_count()} CPUs)")
    if settings.get("grad_scaler") and settings.get("amp_dtype") != "float16":
        raise UnsupportedVariantError(
            "GradScaler only makes sense with float16 autocast (amp-fp16): bfloat16 has "
            "float32's range, and without autocast there is nothing to scale")
    if settings.get("compile_backend") and settings.get("compile_mode"):
        raise UnsupportedVariantError("backend='cudagraphs' takes no compile mode")
    if settings.get("inference") and (settings.get("grad_scaler") or settings.get("compile_mode")
                                      in ("reduce-overhead", "max-autotune")):
        raise UnsupportedVariantError("inference runs no backward: drop scaler/training compile modes")
    if settings.get("pageable") and settings.get("pipeline") == "preload":
        raise UnsupportedVariantError("preloaded tensors are on the device already: nothing to copy from pageable memory")
    if settings.get("num_workers") and settings.get("pipeline") == "preload":
        raise UnsupportedVariantError("preloaded tensors need no DataLoader workers (nw0)")
    spe = settings.get("steps_per_execution")
    if spe is not None and not 1 <= spe <= 512:
        raise UnsupportedVariantError("steps_per_execution must be between 1 and 512")
    if spe and spe > 1 and framework == KERAS_JAX:
        raise UnsupportedVariantError("keras-jax runs steps_per_execution=1 only here: its steps are "
                                      "timed and traced one jitted call each")
    if spe and spe > 1 and framework == KERAS_TORCH:
        raise UnsupportedVariantError("Keras on the torch backend runs steps_per_execution=1 only")
