"""Reads a real MNIST training set the user already has (Keras' mnist.npz or the IDX files); never downloads."""
from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import numpy as np

from gapscope.profilers.errors import GapscopeInputError

_IMAGES, _LABELS = "train-images-idx3-ubyte", "train-labels-idx1-ubyte"
_IDX_UINT8 = 0x08


def load_mnist(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """The training images (N, 28, 28) uint8 and labels (N,) int64 from `path`: an mnist.npz,
    a folder holding the two IDX files (gzipped or not), or the images IDX file itself."""
    path = Path(path)
    if not path.exists():
        raise GapscopeInputError(f"{path}: no such file or folder")
    if path.suffix == ".npz" or zipfile.is_zipfile(path):
        return _check(path, *_read_npz(path))
    images_path = _find(path, _IMAGES) if path.is_dir() else path
    images = _read_idx(images_path, dims=3)
    labels_path = _find(images_path.parent, _LABELS)
    labels = _read_idx(labels_path, dims=1)
    if len(images) != len(labels):
        raise GapscopeInputError(
            f"{images_path}: {len(images)} images but {labels_path.name} has {len(labels)} labels")
    return _check(images_path, images, labels)


def _find(folder: Path, stem: str) -> Path:
    # The files circulate as train-images-idx3-ubyte and as train-images.idx3-ubyte.
    dotted = stem.replace("-idx", ".idx")
    for name in (stem, f"{stem}.gz", dotted, f"{dotted}.gz"):
        if (folder / name).is_file():
            return folder / name
    raise GapscopeInputError(f"{folder}: no {stem}[.gz] here (expected mnist.npz or the IDX files)")


def _read_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as stored:
            missing = {"x_train", "y_train"} - set(stored.files)
            if missing:
                raise GapscopeInputError(
                    f"{path}: not a Keras mnist.npz (no {', '.join(sorted(missing))})")
            return stored["x_train"], stored["y_train"]
    except GapscopeInputError:
        raise
    except Exception as exc:  # a damaged zip or array surfaces as any of several errors
        raise GapscopeInputError(f"{path}: unreadable npz ({type(exc).__name__}: {exc})") from None


def _read_idx(path: Path, dims: int) -> np.ndarray:
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as exc:
        raise GapscopeInputError(f"{path}: unreadable ({exc})") from None
    # IDX header: two zero bytes, a type code, the number of dimensions, then each size (big-endian).
    if len(raw) < 4 or raw[:2] != b"\0\0" or raw[2] != _IDX_UINT8 or raw[3] != dims:
        raise GapscopeInputError(
            f"{path}: not an IDX file of {dims}-D uint8 (header {raw[:4].hex() or 'empty'})")
    header = 4 + 4 * dims
    shape = tuple(int(size) for size in np.frombuffer(raw[4:header], ">u4"))
    if len(shape) != dims or len(raw) - header != int(np.prod(shape)):
        raise GapscopeInputError(
            f"{path}: truncated or padded IDX file ({len(raw) - header} data bytes for shape {shape})")
    # A copy, because frombuffer over bytes is read-only and torch.from_numpy warns about that.
    return np.frombuffer(raw, np.uint8, offset=header).reshape(shape).copy()


def _check(path: Path, images: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if images.ndim == 4 and images.shape[-1] == 1:
        images = images[..., 0]
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (28, 28):
        raise GapscopeInputError(
            f"{path}: expected 28x28 uint8 images, got {images.dtype} {images.shape}")
    if labels.ndim != 1 or len(labels) != len(images) or len(labels) == 0:
        raise GapscopeInputError(
            f"{path}: expected {len(images)} labels in one dimension, got shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() > 9:
        raise GapscopeInputError(f"{path}: labels must be integers 0-9")
    return images, labels.astype(np.int64)
