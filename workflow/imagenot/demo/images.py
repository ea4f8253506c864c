"""Synthetic images of the demo world: one visual prototype per class, jittered per image.

A prototype is a background colour with stripes (orientation, frequency) and a foreground shape
of another colour. Each image moves, scales and recolours the shape a little, lights its
background with its own detail (:func:`scene`: a smooth light field and a few shadows and
highlights, as every photograph has its own surroundings) and adds noise, so a small CNN learns
the classes in a few epochs at 64x64 while no two images are identical, even two in one pose.
"""

from __future__ import annotations

import colorsys
import dataclasses
from dataclasses import dataclass

import numpy as np

from imagenot.core.clutter import SHAPES, _grid, _noise, jpeg_bytes, shape_mask

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
    return colorsys.hsv_to_rgb(float(hue) % 1.0, saturation, value)


def make_prototypes(n: int, rng: np.random.Generator) -> list[Prototype]:
    """``n`` well-separated prototypes: evenly spaced hues, shapes and stripe settings mixed."""
    hues = (np.arange(n) / max(n, 1) + rng.random())[rng.permutation(n)]
    shapes = rng.permutation(np.resize(np.arange(len(SHAPES)), n))
    return [
        Prototype(
            background=_rgb(hues[i], 0.55, 0.85),
            stripes=_rgb(hues[i] + 0.08, 0.7, 0.45),
            foreground=_rgb(
                hues[i] + 0.5 + rng.uniform(-0.1, 0.1), 0.8, float(rng.uniform(0.6, 1))
            ),
            shape=SHAPES[int(shapes[i])],
            angle=float(ANGLES[int(rng.integers(len(ANGLES)))]),
            frequency=float(FREQUENCIES[int(rng.integers(len(FREQUENCIES)))]),
        )
        for i in range(n)
    ]


@dataclass(frozen=True)
class Pose:
    """The per-image jitter of one render: everything but the pixel noise."""

    angle: float  # stripe orientation (radians)
    phase: float  # stripe phase (radians)
    shift: tuple[float, float, float]  # colour shift of background and stripes
    centre: tuple[float, float]  # shape centre (y, x) as fractions of the side
    radius: float  # shape radius as a fraction of the side
    foreground_shift: tuple[float, float, float]
    gain: float  # overall brightness


def draw_pose(proto: Prototype, rng: np.random.Generator) -> Pose:
    """One image's jitter of ``proto``, drawn from ``rng``."""
    # keyword arguments are evaluated in order: the draws come in the fields' order
    return Pose(
        angle=float(proto.angle + rng.normal(0, 0.12)),
        phase=float(rng.uniform(0, 2 * np.pi)),
        shift=tuple(float(v) for v in rng.normal(0, 0.05, size=3)),
        centre=tuple(float(v) for v in rng.uniform(0.35, 0.65, size=2)),
        radius=float(rng.uniform(0.18, 0.28)),
        foreground_shift=tuple(float(v) for v in rng.normal(0, 0.05, 3)),
        gain=float(rng.uniform(0.8, 1.15)),
    )


def lookalike_pose(pose: Pose, rng: np.random.Generator) -> Pose:
    """A pose close to ``pose`` that is another picture, not a copy: the same colours, angle,
    size and brightness, the shape moved by 5-8% of the side and the stripes by an eighth to a
    quarter period (another photograph of the same object in nearly the same pose; painted, it
    has its own :func:`scene` and noise)."""
    step = rng.uniform(0.05, 0.08)
    direction = rng.uniform(0, 2 * np.pi)
    cy = float(np.clip(pose.centre[0] + step * np.sin(direction), 0.3, 0.7))
    cx = float(np.clip(pose.centre[1] + step * np.cos(direction), 0.3, 0.7))
    phase = pose.phase + rng.choice((-1.0, 1.0)) * rng.uniform(0.25, 0.5) * np.pi
    return dataclasses.replace(pose, centre=(cy, cx), phase=float(phase))


#: A scene (:func:`scene`): its light field's amplitude (of three waves together) and most
#: cycles across the image, its patches' brightness factors and how many (high end excluded).
SCENE_LIGHT = 0.5
SCENE_CYCLES = 4.0
SCENE_PATCH_GAIN = (0.4, 1.6)
SCENE_PATCHES = (6, 11)


def scene(rng: np.random.Generator, size: int) -> np.ndarray:
    """One photograph's own light and surroundings, drawn from ``rng``: a brightness factor per
    pixel (size x size x 1, float32), a smooth field of three random waves (up to
    :data:`SCENE_CYCLES` cycles across the image, amplitude :data:`SCENE_LIGHT` together) times
    six to ten patches (:data:`SCENE_PATCHES`) of a random shape, place and size (radius 6-15%
    of the side), each darker or lighter (:data:`SCENE_PATCH_GAIN`). What a class's images
    share is the prototype; what tells one photograph from another in the same pose is this,
    as surroundings, light and clutter do in web photographs (docs/demo.md)."""
    yy, xx = _grid(size)
    field = np.ones((size, size), np.float32)
    for _ in range(3):
        fy, fx = rng.uniform(-SCENE_CYCLES, SCENE_CYCLES, size=2)
        phase = rng.uniform(0, 2 * np.pi)
        field += np.float32(SCENE_LIGHT / 3) * np.cos(
            np.float32(2 * np.pi) * (np.float32(fy) * yy + np.float32(fx) * xx) + np.float32(phase)
        )
    for _ in range(int(rng.integers(*SCENE_PATCHES))):
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        cy, cx = rng.random(2)
        mask = shape_mask(shape, yy - np.float32(cy), xx - np.float32(cx), rng.uniform(0.06, 0.15))
        field = np.where(mask, field * np.float32(rng.uniform(*SCENE_PATCH_GAIN)), field)
    return field[..., None]


def paint(proto: Prototype, pose: Pose, rng: np.random.Generator, size: int) -> np.ndarray:
    """``proto`` drawn in ``pose``, lit by its own :func:`scene`, plus pixel noise, both from
    ``rng``, as uint8 HxWx3."""
    yy, xx = _grid(size)
    along = xx * np.float32(np.cos(pose.angle)) + yy * np.float32(np.sin(pose.angle))
    stripe = (np.sin(np.float32(2 * np.pi * proto.frequency) * along + np.float32(pose.phase)) > 0)[
        ..., None
    ]
    shift = np.asarray(pose.shift, np.float32)
    stripes = np.asarray(proto.stripes, np.float32) + shift
    background = np.asarray(proto.background, np.float32) + shift
    image = np.where(stripe, stripes, background)
    mask = shape_mask(proto.shape, yy - pose.centre[0], xx - pose.centre[1], pose.radius)
    foreground = np.asarray(proto.foreground, np.float32) + np.asarray(
        pose.foreground_shift, np.float32
    )
    image = np.where(mask[..., None], foreground, image)
    image = image * scene(rng, size) * np.float32(pose.gain) + _noise(rng, image.shape, 0.06)
    return (np.clip(image, 0, 1) * 255).astype(np.uint8)


def render(proto: Prototype, rng: np.random.Generator, size: int) -> np.ndarray:
    """One jittered image of ``proto`` as uint8 HxWx3 (pose, then scene and noise, from
    ``rng``)."""
    return paint(proto, draw_pose(proto, rng), rng, size)


#: The transforms a planted copy goes through, one per copy (:func:`copy_transform`).
TRANSFORMS = ("jpeg", "resize", "crop", "colour")


def draw_transform(kind: str, rng: np.random.Generator, size: int, quality: int) -> dict:
    """The parameters of one ``kind`` of transform (:data:`TRANSFORMS`) of a ``size`` px image
    served at JPEG ``quality``.

    jpeg: re-encoded at another quality (25-60); resize: served at another side (0.6-0.8 or
    1.3-1.7 times); crop: a square of 80-90% of the side at a random offset, scaled back to
    ``size``; colour: each channel multiplied by a gain in 0.8-1.2 (one at least 0.12 from 1).
    """
    if kind == "jpeg":
        return {"quality": int(rng.integers(25, min(quality, 61)))}
    if kind == "resize":
        factor = rng.uniform(0.6, 0.8) if rng.random() < 0.5 else rng.uniform(1.3, 1.7)
        return {"side": round(size * factor)}
    if kind == "crop":
        side = round(size * rng.uniform(0.8, 0.9))
        top, left = (int(v) for v in rng.integers(0, size - side + 1, size=2))
        return {"side": side, "top": top, "left": left}
    if kind == "colour":
        gains = rng.uniform(0.8, 1.2, size=3)
        strongest = int(np.argmax(np.abs(gains - 1)))
        if abs(gains[strongest] - 1) < 0.12:
            gains[strongest] = 1 + np.copysign(rng.uniform(0.12, 0.2), gains[strongest] - 1)
        return {"gains": [round(float(g), 3) for g in gains]}
    raise ValueError(f"transform {kind!r} is not one of {', '.join(TRANSFORMS)}")


def copy_transform(jpeg: bytes, kind: str, params: dict, size: int, quality: int) -> bytes:
    """The file of a copy: the original's JPEG decoded, transformed (``kind`` with ``params``,
    from :func:`draw_transform`) and encoded again (at ``params['quality']`` for ``jpeg``, else
    at ``quality``)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as im:
        image = im.convert("RGB")
    if kind == "jpeg":
        quality = params["quality"]
    elif kind == "resize":
        image = image.resize((params["side"], params["side"]), Image.Resampling.BICUBIC)
    elif kind == "crop":
        top, left, side = params["top"], params["left"], params["side"]
        image = image.crop((left, top, left + side, top + side))
        image = image.resize((size, size), Image.Resampling.BICUBIC)
    elif kind == "colour":
        pixels = np.asarray(image, np.float32) * np.asarray(params["gains"], np.float32)
        image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    else:
        raise ValueError(f"transform {kind!r} is not one of {', '.join(TRANSFORMS)}")
    return jpeg_bytes(np.asarray(image), quality)


def truncated(data: bytes, rng: np.random.Generator) -> bytes:
    """A corrupt JPEG: the file cut off part way through its scan data."""
    return data[: int(len(data) * rng.uniform(0.2, 0.6))]


def html_page(url: str) -> bytes:
    """What a web server returns instead of an image: an HTML page, saved as .jpg."""
    return (
        "<!DOCTYPE html>\n<html><head><title>403 Forbidden</title></head>\n"
        f"<body><h1>Forbidden</h1><p>You don't have permission to access {url}.</p></body></html>\n"
    ).encode()
