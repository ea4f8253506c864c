"""Synthetic images of the demo world: one visual prototype per class, jittered per image.

A prototype is a background colour with stripes (orientation, frequency) and a foreground shape
of another colour. Each image moves, scales and recolours the shape a little and adds noise, so
a small CNN learns the classes in a few epochs at 64x64 while no two images are identical.
"""

from __future__ import annotations

import colorsys
import functools
import io
from dataclasses import dataclass

import numpy as np

SHAPES = ("circle", "square", "triangle", "ring", "cross", "diamond")
ANGLES = (0.0, np.pi / 4, np.pi / 2, 3 * np.pi / 4)
FREQUENCIES = (2.0, 4.0, 7.0)


@dataclass(frozen=True)
class Prototype:
    """The visual identity of one class."""

    background: tuple[float, float, float]
    stripes: tuple[float, float, float]
    foreground: tuple[float, float, float]
    shape: str
    angle: float
    frequency: float


def _rgb(hue: float, saturation: float, value: float) -> tuple[float, float, float]:
    return colorsys.hsv_to_rgb(hue % 1.0, saturation, value)


def make_prototypes(n: int, rng: np.random.Generator) -> list[Prototype]:
    """``n`` well-separated prototypes: evenly spaced hues, shapes and stripe settings mixed."""
    hues = (np.arange(n) / max(n, 1) + rng.random())[rng.permutation(n)]
    shapes = rng.permutation(np.resize(np.arange(len(SHAPES)), n))
    out = []
    for i in range(n):
        hue = float(hues[i])
        out.append(
            Prototype(
                background=_rgb(hue, 0.55, 0.85),
                stripes=_rgb(hue + 0.08, 0.7, 0.45),
                foreground=_rgb(
                    hue + 0.5 + rng.uniform(-0.1, 0.1), 0.8, float(rng.uniform(0.6, 1))
                ),
                shape=SHAPES[int(shapes[i])],
                angle=float(ANGLES[int(rng.integers(len(ANGLES)))]),
                frequency=float(FREQUENCIES[int(rng.integers(len(FREQUENCIES)))]),
            )
        )
    return out


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


def render(proto: Prototype, rng: np.random.Generator, size: int) -> np.ndarray:
    """One jittered image of ``proto`` as uint8 HxWx3."""
    yy, xx = _grid(size)
    angle = proto.angle + rng.normal(0, 0.12)
    phase = rng.uniform(0, 2 * np.pi)
    along = xx * np.float32(np.cos(angle)) + yy * np.float32(np.sin(angle))
    stripe = (np.sin(np.float32(2 * np.pi * proto.frequency) * along + np.float32(phase)) > 0)[
        ..., None
    ]
    shift = rng.normal(0, 0.05, size=3)
    stripes = np.asarray(proto.stripes, np.float32) + shift.astype(np.float32)
    background = np.asarray(proto.background, np.float32) + shift.astype(np.float32)
    image = np.where(stripe, stripes, background)
    cy, cx = rng.uniform(0.35, 0.65, size=2)
    radius = rng.uniform(0.18, 0.28)
    mask = shape_mask(proto.shape, yy - cy, xx - cx, radius)[..., None]
    foreground = np.asarray(proto.foreground, np.float32) + rng.normal(0, 0.05, 3).astype(
        np.float32
    )
    image = np.where(mask, foreground, image)
    image = image * np.float32(rng.uniform(0.8, 1.15)) + _noise(rng, image.shape, 0.06)
    return (np.clip(image, 0, 1) * 255).astype(np.uint8)


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


def truncated(data: bytes, rng: np.random.Generator) -> bytes:
    """A corrupt JPEG: the file cut off part way through its scan data."""
    return data[: int(len(data) * rng.uniform(0.2, 0.6))]


def html_page(url: str) -> bytes:
    """What a web server returns instead of an image: an HTML page, saved as .jpg."""
    return (
        "<!DOCTYPE html>\n<html><head><title>403 Forbidden</title></head>\n"
        f"<body><h1>Forbidden</h1><p>You don't have permission to access {url}.</p></body></html>\n"
    ).encode()
