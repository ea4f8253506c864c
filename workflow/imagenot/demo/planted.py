"""The demo world's planted duplicates: what they are, where they go, and the check of their list.

They give a near-duplicate audit a known answer. Three kinds (:data:`PLANT_KINDS`):

- ``reference_copy``: a row captioned for an ImageNot-side class (an intended survivor) whose image
  is a transformed copy of the image of a row captioned for an ImageNet class (which lands in the
  ImageNet stand-in, in any of its splits);
- ``within_copy``: a survivor row's image, transformed, under another URL and caption of the same
  class (the two may land in two splits of ImageNot);
- ``lookalike``: a distinct render of the partner's prototype in a nearby pose (shape moved a
  little, stripes shifted: :func:`imagenot.demo.images.lookalike_pose`), captioned for a survivor;
  the partner is a survivor row or an ImageNet-class row, alternately. Not a copy: an audit must
  not flag it.

Each copy goes through one transform (:data:`imagenot.demo.images.TRANSFORMS`, in turn). Both rows
of a pair take rows that would otherwise hold no-noun captions (:func:`place_plants`), with
captions written to rank first in their class (:meth:`imagenot.demo.captions.CaptionWriter.best`),
valid images and a safe ``punsafe``, so curation selects them; with
``acquire.near_duplicates: phash`` the download keeps one image of most re-encoded, resized and
colour-shifted within copies, so mainly the cropped ones reach two places in ImageNot.

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

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from imagenot.demo import images as img
from imagenot.demo.captions import CaptionWriter, NounLemmaIndex, PlantedClass
from imagenot.demo.images import TRANSFORMS
from imagenot.demo.settings import DemoSettings

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
#: config/config.yaml the copies measure 0.93-1.0, the look-alikes 0.17-0.50).
COPY_MIN_CORRELATION = 0.85
#: Highest correlation of a look-alike with its partner.
LOOKALIKE_MAX_CORRELATION = 0.85


@dataclass(frozen=True)
class Plant:
    """How a planted row's image is made from its original's (the row its truth names)."""

    kind: str  # PLANT_KINDS
    original_shard: str
    original_row: int
    original_image_wnid: str  # the prototype the original shows
    transform: str  # images.TRANSFORMS, "" for a look-alike
    params: str  # the transform's parameters, JSON


#: Stream of the plants' Generator (beside ``demo_world.seed``).
PLANT_STREAM = 1


@dataclass(frozen=True)
class Pair:
    """One planted pair before it has rows: (class, caption) of the original and the plant."""

    kind: str
    original: PlantedClass
    original_text: str
    copy: PlantedClass
    copy_text: str
    transform: str
    params: str


def plan_pairs(
    plan: dict, writer: CaptionWriter, rng: np.random.Generator, cfg: DemoSettings
) -> list[Pair]:
    """The planted pairs (:class:`Pair`), in a fixed order: classes dealt round-robin from a
    seeded order, transforms in turn (:data:`imagenot.demo.images.TRANSFORMS`)."""
    survivors, imagenet = plan["intended_survivors"], plan["imagenet_classes"]
    survivors = [survivors[i] for i in rng.permutation(len(survivors))]
    imagenet = [imagenet[i] for i in rng.permutation(len(imagenet))]
    wanted = {
        "reference_copy": (cfg.n_reference_copies, "n_reference_copies", (survivors, imagenet)),
        "within_copy": (cfg.n_within_copies, "n_within_copies", (survivors,)),
        "lookalike": (cfg.n_lookalikes, "n_lookalikes", (survivors, imagenet)),
    }
    pairs = []
    for kind in PLANT_KINDS:
        n, key, needs = wanted[kind]
        if n and not all(needs):
            raise ValueError(
                f"config key demo_world.{key}: {n} planted, but n_survivors or "
                "n_imagenet_classes is 0"
            )
        for i in range(n):
            copy = survivors[i % len(survivors)]
            if kind == "reference_copy":
                original = imagenet[i % len(imagenet)]
            elif kind == "within_copy":
                original = copy
            else:  # look-alikes of ImageNot and of ImageNet-stand-in images, alternately
                original = copy if i % 2 == 0 else imagenet[(i // 2) % len(imagenet)]
            transform, params = "", "{}"
            if kind != "lookalike":
                transform = img.TRANSFORMS[i % len(img.TRANSFORMS)]
                drawn = img.draw_transform(transform, rng, cfg.image_size, cfg.jpeg_quality)
                params = json.dumps(drawn, sort_keys=True)
            texts = writer.best(original), writer.best(copy)
            pairs.append(Pair(kind, original, texts[0], copy, texts[1], transform, params))
    return pairs


def place_plants(
    plan: dict, index: NounLemmaIndex, free: list[int], names: list[str], cfg: DemoSettings
) -> dict[int, tuple]:
    """Where each row of each planted pair goes: ``free`` (the world positions holding no-noun
    captions, position = shard index x rows_per_shard + row) -> position -> (caption row as
    (kind, role, wnid, other_wnid, text), image wnid, side in pixels, :class:`Plant` or None
    for an original). ``plan``: role -> planted classes; ``names``: the shards' names."""
    rng = np.random.default_rng([cfg.seed, PLANT_STREAM])
    pairs = plan_pairs(plan, CaptionWriter(index, rng), rng, cfg)
    if 2 * len(pairs) > len(free):
        raise ValueError(
            f"config key demo_world.rows_per_shard: {len(pairs)} planted duplicate pairs need "
            f"{2 * len(pairs)} rows without a planted caption, {len(free)} are left"
        )
    spots = [free[i] for i in rng.choice(len(free), size=2 * len(pairs), replace=False)]
    placed: dict[int, tuple] = {}
    for pair, at_original, at_copy in zip(pairs, spots[0::2], spots[1::2], strict=True):
        side = cfg.image_size
        if pair.transform == "resize":
            side = int(json.loads(pair.params)["side"])
        original, copy = pair.original, pair.copy
        caption = ("good", original.role, original.wnid, "", pair.original_text)
        placed[at_original] = (caption, original.wnid, cfg.image_size, None)
        shard, row = divmod(at_original, cfg.rows_per_shard)
        plant = Plant(pair.kind, names[shard], row, original.wnid, pair.transform, pair.params)
        caption = ("good", copy.role, copy.wnid, "", pair.copy_text)
        placed[at_copy] = (caption, original.wnid, side, plant)
    return placed


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
        if files[0] == files[1]:
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
