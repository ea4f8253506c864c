"""Synthetic images of the demo world: one visual prototype per class, jittered per image.

A prototype is a background colour with stripes (orientation, frequency) and a foreground shape
of another colour. Each image moves, scales and recolours the shape a little and adds noise, so
a small CNN learns the classes in a few epochs at 64x64 while no two images are identical.
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass

import numpy as np

from imagenot.clutter import SHAPES, _grid, _noise, shape_mask

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


def truncated(data: bytes, rng: np.random.Generator) -> bytes:
    """A corrupt JPEG: the file cut off part way through its scan data."""
    return data[: int(len(data) * rng.uniform(0.2, 0.6))]


def html_page(url: str) -> bytes:
    """What a web server returns instead of an image: an HTML page, saved as .jpg."""
    return (
        "<!DOCTYPE html>\n<html><head><title>403 Forbidden</title></head>\n"
        f"<body><h1>Forbidden</h1><p>You don't have permission to access {url}.</p></body></html>\n"
    ).encode()
