"""Synthetic MNIST-like digits: seven-segment glyphs with varied shape and position, plus noise."""
from __future__ import annotations

import numpy as np

SIDE = 28
CLASSES = 10
# Segment end points in a unit box (x right, y down): a top, b/c right, d bottom, e/f left, g middle.
_SEGMENTS = {
    "a": ((0, 0), (1, 0)), "b": ((1, 0), (1, .5)), "c": ((1, .5), (1, 1)), "d": ((0, 1), (1, 1)),
    "e": ((0, .5), (0, 1)), "f": ((0, 0), (0, .5)), "g": ((0, .5), (1, .5)),
}
_DIGITS = ("abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc", "abcdefg", "abcdfg")
# Glyphs per class in the bank; samples draw from it and get their own brightness and noise,
# which keeps generation to a gather plus noise (60,000 images in well under 2 s).
_VARIANTS = 160
_NOISE = 0.2           # half width of the uniform pixel noise, as a fraction of full ink


def synthetic_digits(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`samples` uint8 images (N, 28, 28, 1) and int64 labels 0-9, the same bytes for the same seed.

    Classes differ by which strokes are drawn, as digits do, while position, size, slant and
    stroke width vary within a class, so a CNN has to learn the shapes, not memorise pixels."""
    rng = np.random.default_rng(seed)
    bank = _glyph_bank(rng)                                   # (10, V, 28, 28) in [0, 1]
    labels = rng.integers(0, CLASSES, samples)
    images = np.empty((samples, SIDE, SIDE, 1), np.uint8)
    chunk = 8192  # bounds the float32 scratch space to a few tens of MB
    for start in range(0, samples, chunk):
        stop = min(start + chunk, samples)
        n = stop - start
        pixels = bank[labels[start:stop], rng.integers(0, _VARIANTS, n)]
        # In place from here on: this loop is most of the generation time.
        pixels *= rng.uniform(0.7 * 255, 255, (n, 1, 1)).astype(np.float32)   # ink brightness
        noise = rng.random((n, SIDE, SIDE), np.float32)
        noise -= 0.5
        noise *= 2 * _NOISE * 255
        pixels += noise
        np.clip(pixels, 0, 255, out=pixels)
        images[start:stop, ..., 0] = pixels
    return images, labels.astype(np.int64)


def _glyph_bank(rng: np.random.Generator) -> np.ndarray:
    count = CLASSES * _VARIANTS
    width = rng.uniform(9, 14, count)
    height = rng.uniform(15, 20, count)
    left = 14 - width / 2 + rng.uniform(-3, 3, count)
    top = 14 - height / 2 + rng.uniform(-3, 3, count)
    slant = rng.uniform(-0.25, 0.25, count)               # x shift per unit of height, like italics
    half_stroke = rng.uniform(0.6, 1.4, count)

    ends = np.array(list(_SEGMENTS.values()), np.float64)  # (7, 2 ends, 2 coords)
    ex = left[:, None, None] + ends[None, :, :, 0] * width[:, None, None] \
        + slant[:, None, None] * (1 - ends[None, :, :, 1]) * height[:, None, None]
    ey = top[:, None, None] + ends[None, :, :, 1] * height[:, None, None]
    # float32 for the (count, 7, 784) arrays below: half the memory traffic of float64.
    (ax, bx), (ay, by) = np.moveaxis(ex, 2, 0).astype(np.float32), np.moveaxis(ey, 2, 0).astype(np.float32)

    centres = np.arange(SIDE, dtype=np.float32) + 0.5
    px, py = np.meshgrid(centres, centres)                # pixel centres, (28, 28)
    px, py = px.reshape(1, 1, -1), py.reshape(1, 1, -1)
    dx, dy = (bx - ax)[..., None], (by - ay)[..., None]
    # Distance from each pixel centre to each segment: project, clamp to the segment, measure.
    t = np.clip(((px - ax[..., None]) * dx + (py - ay[..., None]) * dy) / (dx * dx + dy * dy), 0, 1)
    square = (px - ax[..., None] - t * dx) ** 2 + (py - ay[..., None] - t * dy) ** 2

    used = np.array([[name in digit for name in _SEGMENTS] for digit in _DIGITS])  # (10, 7)
    used = np.repeat(used, _VARIANTS, axis=0)
    nearest = np.sqrt(np.where(used[..., None], square, np.inf).min(axis=1))
    # Anti-aliased strokes: full ink within the half width, fading over one pixel.
    ink = np.clip(half_stroke[:, None].astype(np.float32) + 0.5 - nearest, 0.0, 1.0)
    return ink.reshape(CLASSES, _VARIANTS, SIDE, SIDE)
