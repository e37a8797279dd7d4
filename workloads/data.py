"""Deterministic synthetic data that a model can learn, shaped like the real data sets, cached once made."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from gapscope.profilers.errors import GapscopeInputError

# MNIST's per-pixel mean and standard deviation (torchvision's Normalize values): the one
# standardisation used for real and synthetic images, ahead of time or per sample.
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
# Part of every cache file name: bump it whenever a generator changes its output.
_GENERATOR_VERSION = 1
_memory: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def load_dataset(spec, samples: int | None = None, data_path: str | None = None, *,
                 raw: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and targets for `spec`: `samples` of them (default: one epoch, `spec.samples`).

    Images come channels-last (N, 28, 28, 1), normalised float32, or with `raw=True` the uint8
    pixels for pipelines that transform each sample themselves; other data has no raw form and
    comes back prepared either way. Class labels are int64 (N,), regression targets float32
    (N, 1). `data_path` is a real MNIST (mnist.npz or IDX files) for MNIST workloads.
    The arrays are shared by every caller in the process: copy before changing them in place."""
    if data_path is not None:
        if spec.data != "mnist":
            raise GapscopeInputError(
                f"a data file only replaces MNIST; workload {spec.name!r} uses {spec.data} data")
        key = ("file", str(Path(data_path).resolve()))
        x, y = _memory.get(key) or _memory.setdefault(key, _read_mnist(data_path))
        if samples is not None and samples > len(x):
            raise GapscopeInputError(f"{data_path}: {samples} samples asked for, it holds {len(x)}")
    else:
        n = spec.samples if samples is None else samples
        if n <= 0:
            raise ValueError(f"samples must be positive, not {n}")
        key = (spec.data, spec.input_shape, spec.num_classes, spec.seed, n)
        x, y = _memory.get(key) or _memory.setdefault(key, _from_disk_or_generate(spec, n))
    if spec.data == "mnist" and not raw:
        prepared_key = (*key, "prepared")
        if prepared_key not in _memory:
            _memory[prepared_key] = (normalize_images(x), y)
        x, y = _memory[prepared_key]
    if data_path is not None and samples is not None:
        x, y = x[:samples], y[:samples]
    return x, y


def normalize_images(images: np.ndarray) -> np.ndarray:
    """uint8 pixels to standardised float32, once for the whole set (the blog's prepared tensors)."""
    out = images.astype(np.float32)
    out *= 1.0 / 255.0
    out -= MNIST_MEAN
    out *= 1.0 / MNIST_STD
    return out


def to_torch_layout(x: np.ndarray) -> np.ndarray:
    """NHWC images to the NCHW that torch convolutions take; anything not 4-D passes unchanged."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if x.ndim == 4 else x


def cache_dir() -> Path:
    return Path(os.environ.get("GAPSCOPE_CACHE") or Path.home() / ".cache" / "gapscope")


def clear_memory_cache() -> None:
    """Forget the arrays held in this process (the files on disk stay)."""
    _memory.clear()


def synthetic_classification(samples: int, input_shape: tuple[int, ...], num_classes: int,
                             seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian inputs labelled by a fixed random linear teacher, so the labels are a function
    of the inputs (the loss falls) and the same seed gives the same bytes in every framework."""
    rng = np.random.default_rng(seed)
    features = int(np.prod(input_shape))
    teacher = rng.standard_normal((features, num_classes)) / np.sqrt(features)
    x = rng.standard_normal((samples, features), dtype=np.float32)
    # A little label noise keeps the task from being perfectly separable, as real data is.
    logits = x @ teacher + 0.1 * rng.standard_normal((samples, num_classes))
    y = logits.argmax(axis=1).astype(np.int64)
    return x.reshape((samples, *input_shape)), y


def linear_noise(samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seed 003's regression set: x uniform in [0, 1), y = 2x + 1 + 0.1 * standard normal noise."""
    rng = np.random.default_rng(seed)
    x = rng.random((samples, 1), dtype=np.float32)
    y = 2 * x + 1 + 0.1 * rng.standard_normal((samples, 1), dtype=np.float32)
    return x, y.astype(np.float32)


def sine_sequences(samples: int, window: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Windows of noisy sines (varied amplitude, period and phase) and the value that follows
    each window: a forecaster has to infer the period from the window to predict well."""
    rng = np.random.default_rng(seed)
    amplitude = rng.uniform(0.5, 1.5, (samples, 1))
    omega = 2 * np.pi / rng.uniform(8, 40, (samples, 1))    # periods of 8 to 40 steps
    phase = rng.uniform(0, 2 * np.pi, (samples, 1))
    series = amplitude * np.sin(omega * np.arange(window + 1) + phase)
    series += 0.05 * rng.standard_normal(series.shape)
    series = series.astype(np.float32)
    return series[:, :window, None], series[:, window:]


def mean_switch(samples: int, features: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Inputs whose batch mean sits right at seed 001's 0.5 threshold, so the dynamic model takes
    either branch about half the time, and a linear teacher's targets."""
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((features, 1)) / np.sqrt(features)
    x = rng.normal(0.5, 1.0, (samples, features)).astype(np.float32)
    y = x @ teacher + 1 + 0.1 * rng.standard_normal((samples, 1))
    return x, y.astype(np.float32)


def _generate(spec, n: int) -> tuple[np.ndarray, np.ndarray]:
    if spec.data == "mnist":
        from gapscope.workloads.digits import synthetic_digits
        return synthetic_digits(n, spec.seed)
    if spec.data == "gaussian_teacher":
        return synthetic_classification(n, spec.input_shape, spec.num_classes, spec.seed)
    if spec.data == "linear_noise":
        return linear_noise(n, spec.seed)
    if spec.data == "sine_sequences":
        return sine_sequences(n, spec.input_shape[0], spec.seed)
    if spec.data == "mean_switch":
        return mean_switch(n, spec.input_shape[0], spec.seed)
    raise ValueError(f"no generator for data {spec.data!r}")


def _from_disk_or_generate(spec, n: int) -> tuple[np.ndarray, np.ndarray]:
    shape = "x".join(map(str, spec.input_shape))
    path = cache_dir() / (f"{spec.data}-{shape}-c{spec.num_classes}-seed{spec.seed}-n{n}"
                          f"-v{_GENERATOR_VERSION}.npz")
    try:
        with np.load(path, allow_pickle=False) as stored:
            x, y = stored["x"], stored["y"]
        if len(x) == len(y) == n:
            return x, y
    except Exception:  # absent, or cut short by a crash of another writer: make it again
        pass
    x, y = _generate(spec, n)
    _write_atomically(path, x, y)
    return x, y


def _write_atomically(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    """A temporary file renamed into place, so a reader never sees half a file. The cache only
    saves time: where it cannot be written the data is simply made again next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(handle, "wb") as out:
            np.savez(out, x=x, y=y)
        os.replace(temporary, path)
    except OSError:
        Path(temporary).unlink(missing_ok=True)


def _read_mnist(path: str) -> tuple[np.ndarray, np.ndarray]:
    from gapscope.workloads.mnist import load_mnist
    images, labels = load_mnist(path)
    return images[..., None], labels
