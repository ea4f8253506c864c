"""The demo world's planted duplicates: their table's schema and the check that its rows are real.

``planted_duplicates.parquet`` (:data:`PLANTED_SCHEMA`) lists every planted image: ``url`` the
planted row, ``original_url`` the row it copies (or a look-alike's partner), ``kind`` one of
:data:`PLANT_KINDS`, ``transform`` one of :data:`imagenot.demo.images.TRANSFORMS` (empty for a
look-alike) and ``transform_params`` its parameters as JSON. :func:`check_planted` compares each
planted image with its original, undoing the recorded geometry (a resized copy scaled back, the
original cropped where a cropped copy was cut) and ignoring colour gains (channels standardised):
a copy must correlate at least :data:`COPY_MIN_CORRELATION` with its original and a look-alike at
most :data:`LOOKALIKE_MAX_CORRELATION` with its partner, and no planted file may be byte-identical
to its original.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from imagenot.demo.images import TRANSFORMS

PLANTED_FILE = "planted_duplicates.parquet"
PLANTED_SCHEMA = pa.schema(
    [
        ("url", pa.string()),  # the planted row
        ("original_url", pa.string()),  # the row it copies, or the look-alike's partner
        ("kind", pa.string()),  # PLANT_KINDS
        ("transform", pa.string()),  # images.TRANSFORMS, "" for a look-alike
        ("transform_params", pa.string()),  # JSON object ("{}" for a look-alike)
    ]
)
PLANT_KINDS = ("reference_copy", "within_copy", "lookalike")
COPIES = ("reference_copy", "within_copy")
#: Lowest correlation of a copy with its original, the recorded geometry undone (in the world of
#: config/config.yaml the copies measure 0.91-1.0, the look-alikes 0.26-0.75).
COPY_MIN_CORRELATION = 0.85
#: Highest correlation of a look-alike with its partner.
LOOKALIKE_MAX_CORRELATION = 0.85


class PlantedError(ValueError):
    """A row of the planted duplicates is not what its kind says."""


def _pixels(data: bytes) -> np.ndarray:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB"), np.float32)


def _resized(pixels: np.ndarray, side: int) -> np.ndarray:
    from PIL import Image

    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    return np.asarray(image.resize((side, side), Image.Resampling.BICUBIC), np.float32)


def correlation(planted: bytes, original: bytes, transform: str, params: dict) -> float:
    """Pixel correlation of a planted image with its original, ``transform`` (with ``params``)
    undone: a resized copy scaled back to the original's side, the original cut where a crop was
    cut and scaled to the copy's side; each channel standardised, so colour gains do not count."""
    a, b = _pixels(planted), _pixels(original)
    if transform == "crop":
        top, left, side = params["top"], params["left"], params["side"]
        b = _resized(b[top : top + side, left : left + side], a.shape[0])
    elif a.shape != b.shape:
        a = _resized(a, b.shape[0])
    a = (a - a.mean((0, 1))) / (a.std((0, 1)) + 1e-6)
    b = (b - b.mean((0, 1))) / (b.std((0, 1)) + 1e-6)
    return float(np.mean(a * b))


def check_planted(table: pa.Table, images: str | os.PathLike, url_base: str, name: str) -> dict:
    """Check every row of a planted-duplicates ``table`` (read from ``name``) against the files
    under ``images`` (a URL is ``url_base`` + its path there). Returns kind -> [correlation];
    raises :class:`PlantedError` naming the first row that is not what its kind says."""
    base = url_base.rstrip("/") + "/"
    root = Path(images)
    if table.schema.remove_metadata() != PLANTED_SCHEMA:
        raise PlantedError(f"{name}: columns {table.schema.names}, expected {PLANTED_SCHEMA.names}")
    found: dict[str, list[float]] = {k: [] for k in PLANT_KINDS}
    for i, row in enumerate(table.to_pylist()):
        where = f"{name}: row {i} ({row['url']})"
        if row["kind"] not in PLANT_KINDS:
            raise PlantedError(f"{where}: kind {row['kind']!r} is not one of {PLANT_KINDS}")
        expected = TRANSFORMS if row["kind"] in COPIES else ("",)
        if row["transform"] not in expected:
            raise PlantedError(f"{where}: transform {row['transform']!r} is not one of {expected}")
        files = []
        for url in (row["url"], row["original_url"]):
            path = root / url[len(base) :]
            if not url.startswith(base) or not path.is_file():
                raise PlantedError(f"{where}: {url} has no image under {root}")
            files.append(path.read_bytes())
        if hashlib.sha256(files[0]).digest() == hashlib.sha256(files[1]).digest():
            raise PlantedError(f"{where}: the same bytes as {row['original_url']}")
        r = correlation(files[0], files[1], row["transform"], json.loads(row["transform_params"]))
        if row["kind"] in COPIES and r < COPY_MIN_CORRELATION:
            raise PlantedError(
                f"{where}: correlation {r:.3f} with {row['original_url']} under transform "
                f"{row['transform']!r}, below {COPY_MIN_CORRELATION}: not a copy of it"
            )
        if row["kind"] == "lookalike" and r > LOOKALIKE_MAX_CORRELATION:
            raise PlantedError(
                f"{where}: correlation {r:.3f} with {row['original_url']}, above "
                f"{LOOKALIKE_MAX_CORRELATION}: a copy, not a look-alike"
            )
        found[row["kind"]].append(r)
    return found
