"""Seeded synthetic pictures: shapes over colour noise, and their JPEG bytes.

Shared by the demo world (its classes' images, its clutter) and by acquisition's generated-image
source (``acquire.url_map`` value ``generate:<seed>``, :mod:`imagenot.acquire.generated`), which
must not depend on the demo: a base module both import. NumPy and Pillow only.
"""

from __future__ import annotations

import functools
import io

import numpy as np

SHAPES = ("circle", "square", "triangle", "ring", "cross", "diamond")


@functools.cache
def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates in [0, 1] (rows, columns), float32."""
    coords = ((np.arange(size) + 0.5) / size).astype(np.float32)
    return tuple(np.meshgrid(coords, coords, indexing="ij"))


def _noise(rng: np.random.Generator, shape: tuple[int, ...], sigma: float) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(sigma)


def shape_mask(shape: str, dy: np.ndarray, dx: np.ndarray, r: float) -> np.ndarray:
    """Boolean mask of ``shape`` of radius ``r`` centred where ``dy = dx = 0``."""
    d2 = dy**2 + dx**2
    if shape == "circle":
        return d2 < r**2
    if shape == "ring":
        return (d2 < r**2) & (d2 > (0.55 * r) ** 2)
    if shape == "square":
        return np.maximum(abs(dy), abs(dx)) < r
    if shape == "diamond":
        return abs(dy) + abs(dx) < r
    if shape == "cross":
        arm = r / 3
        return ((abs(dx) < arm) & (abs(dy) < r)) | ((abs(dy) < arm) & (abs(dx) < r))
    if shape == "triangle":
        return (dy > -r) & (dy < r) & (abs(dx) < (dy + r) / 2)
    raise ValueError(f"unknown shape {shape!r}")


def render_clutter(rng: np.random.Generator, size: int) -> np.ndarray:
    """A generic image belonging to no class: blurred colour noise with random blobs."""
    cell = -(-size // 4)
    coarse = rng.random((4, 4, 3), dtype=np.float32)
    image = coarse.repeat(cell, axis=0).repeat(cell, axis=1)[:size, :size]
    yy, xx = _grid(size)
    for _ in range(int(rng.integers(1, 4))):
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        mask = shape_mask(shape, yy - rng.random(), xx - rng.random(), rng.uniform(0.08, 0.3))
        image = np.where(mask[..., None], rng.random(3, dtype=np.float32), image)
    image = image + _noise(rng, image.shape, 0.06)
    return (np.clip(image, 0, 1) * 255).astype(np.uint8)


def jpeg_bytes(image: np.ndarray, quality: int) -> bytes:
    """Encode an RGB uint8 array as baseline JPEG (no metadata, deterministic bytes)."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()
