"""Real-like photos for tests of image geometry: odd sizes, a natural-looking spectrum (many
oriented waves of falling amplitude), hard-edged shapes and, where Debian's
dataset-fashion-mnist is installed, a Fashion-MNIST garment enlarged into the scene; encoded as
JPEG as cameras and ImageNet's files are. Nothing is downloaded."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """An RGB scene of ``width`` x ``height`` px, the same for the same arguments."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    scene = np.zeros((height, width, 3))
    for _ in range(40):  # waves from a few pixels to the whole image, amplitude ~ 1 / frequency
        f, angle, phase = rng.uniform(0.002, 0.6), rng.uniform(0, np.pi), rng.uniform(0, 6.3)
        wave = np.sin(f * (xx * np.cos(angle) + yy * np.sin(angle)) + phase)
        scene += rng.uniform(0, 1, 3) * wave[..., None] / (1 + 10 * f)
    scene = (scene - scene.min()) / (scene.max() - scene.min()) * 255
    image = Image.fromarray(scene.astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(60):
        x0, y0, r = rng.integers(0, width), rng.integers(0, height), rng.integers(3, 60)
        box = (x0, y0, x0 + r, y0 + r * rng.uniform(0.3, 2))
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)(box, fill=fill)
    if FASHION_MNIST.is_file():
        with gzip.open(FASHION_MNIST) as f:
            pixels = np.frombuffer(f.read(16 + 28 * 28 * 64), np.uint8, offset=16)
        garment = Image.fromarray(pixels.reshape(-1, 28, 28)[seed % 64])
        side = max(28, min(width, height) // 2)
        garment = garment.resize((side, side), Image.Resampling.BICUBIC)
        image.paste(Image.merge("RGB", (garment,) * 3), (width // 4, height // 4), garment)
    return image


def jpeg(image: Image.Image, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
