"""Synthetic data sets (deterministic, shaped, cached, learnable) and the real MNIST file readers."""
from __future__ import annotations

import gzip
import struct
from dataclasses import replace

import numpy as np
import pytest

from gapscope.profilers.errors import GapscopeInputError
from gapscope.workloads import data
from gapscope.workloads.data import load_dataset
from gapscope.workloads.registry import WORKLOADS

SMALL = 512
CNN = WORKLOADS["cnn"]


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
    """Each test gets an empty cache folder and an empty in-process cache."""
    monkeypatch.setenv("GAPSCOPE_CACHE", str(tmp_path / "cache"))
    data.clear_memory_cache()
    yield tmp_path / "cache"
    data.clear_memory_cache()


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_same_seed_same_bytes_other_seed_other_bytes(name, tmp_path, monkeypatch):
    spec = WORKLOADS[name]
    x, y = load_dataset(spec, samples=SMALL)
    # A second generation, not a cache hit: new process cache, new cache folder.
    data.clear_memory_cache()
    monkeypatch.setenv("GAPSCOPE_CACHE", str(tmp_path / "elsewhere"))
    again_x, again_y = load_dataset(spec, samples=SMALL)
    assert x is not again_x
    assert x.tobytes() == again_x.tobytes() and y.tobytes() == again_y.tobytes()
    other_x, _ = load_dataset(replace(spec, seed=spec.seed + 1), samples=SMALL)
    assert x.tobytes() != other_x.tobytes()


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_shapes_and_dtypes(name):
    spec = WORKLOADS[name]
    x, y = load_dataset(spec, samples=SMALL)
    assert x.shape == (SMALL, *spec.input_shape) and x.dtype == np.float32
    if spec.task == "classification":
        assert y.shape == (SMALL,) and y.dtype == np.int64
        assert set(np.unique(y)) == set(range(spec.num_classes))
    else:
        assert y.shape == (SMALL, 1) and y.dtype == np.float32
    assert np.isfinite(x).all() and np.isfinite(y).all()


def test_mnist_like_epoch_is_shaped_like_mnist():
    raw, labels = load_dataset(CNN, raw=True)
    assert raw.shape == (60_000, 28, 28, 1) and raw.dtype == np.uint8
    assert labels.shape == (60_000,) and labels.dtype == np.int64
    counts = np.bincount(labels, minlength=10)
    assert len(counts) == 10 and counts.min() > 5_000
    # Mostly dark background with bright strokes, as MNIST is.
    assert 0.05 < (raw > 128).mean() < 0.3 and raw.max() == 255
    prepared, same_labels = load_dataset(CNN)
    assert prepared.dtype == np.float32 and prepared.shape == raw.shape
    assert same_labels is labels
    np.testing.assert_allclose(prepared[:4], data.normalize_images(raw[:4]))


def test_torch_layout_is_channels_first():
    x, _ = load_dataset(CNN, samples=8)
    nchw = data.to_torch_layout(x)
    assert nchw.shape == (8, 1, 28, 28) and nchw.flags.c_contiguous
    assert np.array_equal(nchw[:, 0], x[..., 0])
    flat, _ = load_dataset(WORKLOADS["mlp"], samples=8)
    assert data.to_torch_layout(flat) is flat


def test_cache_hits_in_process_then_on_disk(fresh_cache, monkeypatch):
    spec = WORKLOADS["mlp"]
    x, y = load_dataset(spec, samples=SMALL)
    assert load_dataset(spec, samples=SMALL)[0] is x
    files = list(fresh_cache.iterdir())
    assert len(files) == 1 and files[0].suffix == ".npz"  # written whole: no temporary left

    data.clear_memory_cache()
    monkeypatch.setattr(data, "_generate", _must_not_generate)
    cached_x, cached_y = load_dataset(spec, samples=SMALL)
    assert cached_x is not x and np.array_equal(cached_x, x) and np.array_equal(cached_y, y)


def test_a_damaged_cache_file_is_made_again(fresh_cache):
    spec = WORKLOADS["lstm"]
    x, _ = load_dataset(spec, samples=SMALL)
    (cache_file,) = fresh_cache.iterdir()
    cache_file.write_bytes(cache_file.read_bytes()[:100])
    data.clear_memory_cache()
    assert np.array_equal(load_dataset(spec, samples=SMALL)[0], x)
    assert cache_file.stat().st_size > 100


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_learnable(name):
    """A few full-batch SGD steps of a linear torch model lower the loss: the targets follow
    from the inputs, so the real models' falling loss means something."""
    import torch
    spec = WORKLOADS[name]
    x, y = load_dataset(spec, samples=2048)
    x = torch.from_numpy(x).flatten(1)
    y = torch.from_numpy(y)
    torch.manual_seed(0)
    model = torch.nn.Linear(x.shape[1], spec.outputs)
    loss_fn = torch.nn.CrossEntropyLoss() if spec.loss == "cross_entropy" else torch.nn.MSELoss()
    # Cross-entropy's curvature is bounded, the squared error's grows with the inputs.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3 if spec.task == "classification" else 0.05)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses


def test_mnist_npz(tmp_path):
    images, labels = _tiny_mnist()
    path = tmp_path / "mnist.npz"
    np.savez(path, x_train=images, y_train=labels, x_test=images[:2], y_test=labels[:2])
    raw, y = load_dataset(CNN, data_path=str(path), raw=True)
    assert raw.shape == (5, 28, 28, 1) and np.array_equal(raw[..., 0], images)
    assert y.dtype == np.int64 and list(y) == list(labels)
    prepared, _ = load_dataset(CNN, data_path=str(path))
    assert prepared.dtype == np.float32
    np.testing.assert_allclose(prepared, data.normalize_images(raw))
    assert len(load_dataset(CNN, samples=3, data_path=str(path))[0]) == 3


@pytest.mark.parametrize("compressed", [False, True])
def test_mnist_idx_files(tmp_path, compressed):
    images, labels = _tiny_mnist()
    _write_idx(tmp_path / "train-images-idx3-ubyte", images, compressed)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", labels, compressed)
    suffix = ".gz" if compressed else ""
    for given in (tmp_path, tmp_path / f"train-images-idx3-ubyte{suffix}"):
        data.clear_memory_cache()
        raw, y = load_dataset(CNN, data_path=str(given), raw=True)
        assert np.array_equal(raw[..., 0], images) and list(y) == list(labels)
        assert raw.flags.writeable  # torch.from_numpy warns on read-only arrays


def _bad_npz(path):
    np.savez(path, images=np.zeros((2, 28, 28), np.uint8))


def _float_npz(path):
    np.savez(path, x_train=np.zeros((2, 28, 28), np.float32), y_train=np.zeros(2, np.uint8))


def _truncated_idx(path):
    images, labels = _tiny_mnist()
    _write_idx(path / "train-images-idx3-ubyte", images, False)
    (path / "train-images-idx3-ubyte").write_bytes(
        (path / "train-images-idx3-ubyte").read_bytes()[:-10])
    _write_idx(path / "train-labels-idx1-ubyte", labels, False)


def _label_count_mismatch(path):
    images, labels = _tiny_mnist()
    _write_idx(path / "train-images-idx3-ubyte", images, False)
    _write_idx(path / "train-labels-idx1-ubyte", labels[:4], False)


def _labels_out_of_range(path):
    images, _ = _tiny_mnist()
    _write_idx(path / "train-images-idx3-ubyte", images, False)
    _write_idx(path / "train-labels-idx1-ubyte", np.full(5, 12, np.uint8), False)


def _not_gzip(path):
    (path / "train-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    _write_idx(path / "train-labels-idx1-ubyte", _tiny_mnist()[1], False)


@pytest.mark.parametrize("make, given, says", [
    (None, "absent.npz", "no such file"),
    (lambda p: None, ".", "no train-images-idx3-ubyte"),
    (lambda p: (p / "notes.txt").write_text("hello"), "notes.txt", "not an IDX file"),
    (lambda p: _bad_npz(p / "m.npz"), "m.npz", "no x_train, y_train"),
    (lambda p: _float_npz(p / "m.npz"), "m.npz", "expected 28x28 uint8 images"),
    (lambda p: (p / "m.npz").write_bytes(b"PK\x03\x04" + b"\0" * 40), "m.npz", "unreadable npz"),
    (_truncated_idx, ".", "truncated"),
    (_label_count_mismatch, ".", "5 images but"),
    (_labels_out_of_range, ".", "labels must be integers 0-9"),
    (_not_gzip, ".", "unreadable"),
])
def test_bad_mnist_files_give_one_line_errors(tmp_path, make, given, says):
    if make is not None:
        make(tmp_path)
    with pytest.raises(GapscopeInputError) as caught:
        load_dataset(CNN, data_path=str(tmp_path / given))
    message = str(caught.value)
    assert says in message and "\n" not in message and str(tmp_path) in message


def test_a_data_file_only_replaces_mnist(tmp_path):
    with pytest.raises(GapscopeInputError, match="only replaces MNIST"):
        load_dataset(WORKLOADS["mlp"], data_path=str(tmp_path))


def test_asking_a_file_for_more_samples_than_it_holds(tmp_path):
    images, labels = _tiny_mnist()
    np.savez(tmp_path / "mnist.npz", x_train=images, y_train=labels)
    with pytest.raises(GapscopeInputError, match="6 samples asked for, it holds 5"):
        load_dataset(CNN, samples=6, data_path=str(tmp_path / "mnist.npz"))


def _must_not_generate(spec, n):
    raise AssertionError("generated although the cache file was there")


def _tiny_mnist() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.integers(0, 256, (5, 28, 28), dtype=np.uint8), np.array([3, 1, 4, 1, 5], np.uint8)


def _write_idx(path, array: np.ndarray, compressed: bool) -> None:
    """The IDX layout: zero, zero, type 0x08 (uint8), the number of dimensions, sizes big-endian."""
    payload = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    payload += array.astype(np.uint8).tobytes()
    if compressed:
        path = path.with_name(path.name + ".gz")
        payload = gzip.compress(payload)
    path.write_bytes(payload)
