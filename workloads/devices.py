"""Resolving `--device` for each framework, refusing what the machine cannot run."""
from __future__ import annotations

from gapscope.profilers.errors import UnsupportedVariantError

DEVICES = ("auto", "cpu", "cuda")


def torch_device(requested: str):
    import torch
    if requested == "cuda" and not torch.cuda.is_available():
        raise UnsupportedVariantError("device cuda requested, but torch sees no CUDA GPU")
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(requested)


def jax_device(requested: str) -> str:
    """"cuda" or "cpu": where JAX computes (its first device). JAX_PLATFORMS, which the keras-jax
    runner sets to cpu for --device cpu before JAX is imported, decides which devices exist."""
    import jax
    gpu = jax.devices()[0].platform == "gpu"
    if requested == "cuda" and not gpu:
        raise UnsupportedVariantError("device cuda requested, but JAX sees no GPU (a CPU jaxlib?)")
    return "cuda" if gpu else "cpu"


def tf_device(requested: str) -> str:
    """A TF device string; TF places ops on a GPU by itself when it sees one."""
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if requested == "cuda" and not gpus:
        raise UnsupportedVariantError("device cuda requested, but TensorFlow sees no GPU")
    if requested == "cpu" or not gpus:
        return "/CPU:0"
    return "/GPU:0"
