"""Image validation and normalisation: bytes in, one RGB JPEG at the dataset resolution out.

Every image is decoded exactly once, here. Each outcome has a reason code; the explicit rules:

- ``not_an_image``: Pillow cannot identify the bytes and they carry no image signature (HTML
  error pages, empty bodies); with an image signature the outcome is ``corrupt``.
- ``decompression_bomb``: width x height from the header exceeds the pixel limit; rejected
  before any pixel is decoded.
- ``too_small``: the shorter side is below ``min_size``.
- ``corrupt``: the header parses but decoding fails (truncated or damaged data).
- fetch reasons (from the downloader's message): ``unsupported_scheme`` (not http/https, e.g.
  ``file://``), ``too_large`` (body over ``acquire.max_response_bytes``), ``timeout`` (a read
  timeout or the per-image ``acquire.image_deadline_s``), ``http_error``, ``network_error``,
  ``disallowed`` (X-Robots-Tag), ``other_fetch_error``.
- orientation: the EXIF Orientation tag is applied (phone photos are stored upright); the
  recorded width and height are the stored file's, before rotation.
- resizing is bounded: center_crop cuts the centre square from the source and resizes only
  that (never an intermediate of size x size*aspect pixels, which an extreme aspect ratio
  such as 100000 x 10 made huge); border scales the longer side to ``size``.
- modes: RGB kept; transparent images (RGBA, LA, PA, P with transparency) composited on white;
  16-bit and float greyscale scaled to 8 bits; every other mode (L, 1, P, CMYK, YCbCr, LAB, HSV)
  converted by Pillow. The original mode is recorded. Multi-frame images use their first frame.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

OK = "success"
FETCH_REASONS = (
    "http_error",
    "timeout",
    "network_error",
    "disallowed",
    "unsupported_scheme",
    "too_large",
    "other_fetch_error",
)
DECODE_REASONS = ("not_an_image", "decompression_bomb", "too_small", "corrupt")
REASONS = (OK, *FETCH_REASONS, *DECODE_REASONS)
RESIZE_MODES = ("center_crop", "border")


@dataclass(frozen=True)
class ImageResult:
    """Outcome of validating one image; ``jpeg`` is None unless ``reason == 'success'``."""

    reason: str
    jpeg: bytes | None = None
    width: int | None = None
    height: int | None = None
    mode: str | None = None
    detail: str | None = None


_MAGIC = (
    b"\xff\xd8\xff",
    b"\x89PNG\r\n\x1a\n",
    b"GIF87a",
    b"GIF89a",
    b"BM",
    b"II*\x00",
    b"MM\x00*",
)


def looks_like_image(data: bytes) -> bool:
    """True when ``data`` starts with the signature of a common image format."""
    return data.startswith(_MAGIC) or (data[:4] == b"RIFF" and data[8:12] == b"WEBP")


# Fetch reasons by what their download error message holds (lower-cased), the first that
# matches; a message none matches is ``other_fetch_error``.
FETCH_MESSAGES = (
    ("unsupported_scheme", ("unsupported url scheme", "unknown url type")),
    ("too_large", ("response too large",)),
    ("timeout", ("timed out", "timeout")),
    ("http_error", ("http error",)),
    ("disallowed", ("x-robots-tag",)),
    ("network_error", ("urlopen error", "connection", "name or service", "refused", "reset")),
)


def classify_fetch_error(message: str | None) -> str:
    """Reason code for an img2dataset/urllib download error message (:data:`FETCH_MESSAGES`)."""
    if not message:
        return OK
    m = message.lower()
    found = (reason for reason, parts in FETCH_MESSAGES if any(p in m for p in parts))
    return next(found, "other_fetch_error")


def to_rgb(img: Image.Image) -> Image.Image:
    """Convert any Pillow mode to RGB by the rules of this module's docstring."""
    if img.mode == "RGB":
        return img
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if img.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
        a = np.asarray(img, dtype=np.float64)
        hi = 65535.0 if img.mode.startswith("I;16") or a.max(initial=0) > 255 else 255.0
        a = np.clip(np.rint(a * (255.0 / hi)), 0, 255).astype(np.uint8)
        return Image.fromarray(a, "L").convert("RGB")
    return img.convert("RGB")


def resize_square(img: Image.Image, size: int, mode: str) -> Image.Image:
    """Scale and crop (center_crop) or scale and pad with white (border) to ``size`` x ``size``."""
    if mode not in RESIZE_MODES:
        raise ValueError(f"resize mode {mode!r} is not one of {RESIZE_MODES}")
    w, h = img.size
    if (w, h) == (size, size):
        return img
    if mode == "center_crop":  # the centre square of the source, resized: size^2 pixels out
        side = min(w, h)
        left, top = (w - side) / 2, (h - side) / 2
        box = (left, top, left + side, top + side)
        return img.resize((size, size), Image.Resampling.BICUBIC, box=box, reducing_gap=3.0)
    scale = size / max(w, h)
    nw, nh = max(1, round(w * scale)), max(1, round(h * scale))
    img = img.resize((nw, nh), Image.Resampling.BICUBIC, reducing_gap=3.0)
    canvas = Image.new("RGB", (size, size), (255, 255, 255))
    canvas.paste(img, ((size - nw) // 2, (size - nh) // 2))
    return canvas


def encode_jpeg(img: Image.Image, quality: int) -> bytes:
    """Deterministic baseline JPEG bytes of an RGB image."""
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality, optimize=False, progressive=False)
    return buf.getvalue()


def normalise_array(pixels: np.ndarray, size: int, mode: str, quality: int):
    """JPEG bytes of an HxW (grey) or HxWx3 (RGB) uint8 array at ``size`` (adapters' path)."""
    img = Image.fromarray(pixels, "L" if pixels.ndim == 2 else "RGB")
    return encode_jpeg(resize_square(to_rgb(img), size, mode), quality)


ON_DISK_MAX_PIXELS = 89_478_485
"""Pixel limit for files of a dataset on disk: Pillow's own decompression-bomb limit. Such files
are the user's data, not the web's: only a bomb is refused (no ``acquire.min_image_size`` either:
CIFAR's images are 32 px), and ``acquire.max_image_pixels`` guards downloads only."""


def validate_image(
    data: bytes,
    *,
    size: int,
    resize_mode: str,
    max_pixels: int,
    min_size: int,
    quality: int,
) -> ImageResult:
    """Decode ``data`` once and return the normalised JPEG or the reason it was rejected.

    Every argument is the caller's setting (``acquire.image_size``, ``resize_mode``,
    ``max_image_pixels``, ``min_image_size``, ``jpeg_quality`` for downloads; the dataset's for
    files on disk, :data:`ON_DISK_MAX_PIXELS`): no default here, they live in the schema."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        return ImageResult("decompression_bomb", detail=str(exc))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        reason = "corrupt" if looks_like_image(data) else "not_an_image"
        return ImageResult(reason, detail=str(exc)[:200])
    (w, h), mode = img.size, img.mode
    if w * h > max_pixels:
        return ImageResult("decompression_bomb", width=w, height=h, mode=mode)
    if min(w, h) < max(min_size, 1):
        return ImageResult("too_small", width=w, height=h, mode=mode)
    try:
        img.seek(0)
        img.load()
        img = ImageOps.exif_transpose(img) or img
        rgb = to_rgb(img)
        out = encode_jpeg(resize_square(rgb, size, resize_mode), quality)
    except Exception as exc:  # Pillow raises many types on damaged data
        return ImageResult("corrupt", width=w, height=h, mode=mode, detail=str(exc)[:200])
    return ImageResult(OK, out, w, h, mode)


def phash64(jpeg: bytes) -> int:
    """64-bit perceptual hash (imagehash.phash) as a signed int64."""
    import imagehash

    bits = imagehash.phash(Image.open(io.BytesIO(jpeg))).hash.flatten()
    return int.from_bytes(np.packbits(bits).tobytes(), "big", signed=True)
