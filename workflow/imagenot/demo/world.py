"""The demo world: LAION-style metadata shards, the images their URLs point at, and ground truth.

:func:`build_world` is pure (WordNet and the ``demo_world`` config section in, tables and a summary
out, every random draw from numpy Generators seeded by ``demo_world.seed``); :func:`write_world`
renders the images and writes everything. Same seed, same bytes.

Planted duplicates, the near-duplicate audit's known answer, take rows that would otherwise hold
no-noun captions (:mod:`imagenot.demo.planted`: what they are and how they are checked); their
draws come from a second Generator (seeded by ``(seed, 1)``), so every other row is the same
whatever the plant counts.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from imagenot.core import job_usage, lifeline
from imagenot.core.clutter import jpeg_bytes, render_clutter
from imagenot.core.io import write_json, write_parquet
from imagenot.demo import images as img
from imagenot.demo.captions import (
    ROLES,
    CaptionWriter,
    NounLemmaIndex,
    hypernym_ancestors,
    plan_classes,
    shared_lemma_synsets,
)
from imagenot.demo.planted import (
    PLANT_KINDS,
    PLANTED_FILE,
    PLANTED_SCHEMA,
    Plant,
    check_planted,
    place_plants,
)
from imagenot.demo.settings import DemoSettings

LAION_SCHEMA = pa.schema(
    [
        ("URL", pa.string()),
        ("TEXT", pa.string()),
        ("WIDTH", pa.int64()),
        ("HEIGHT", pa.int64()),
        ("similarity", pa.float64()),
        ("hash", pa.int64()),
        ("punsafe", pa.float32()),
        ("pwatermark", pa.float32()),
    ]
)
TRUTH_SCHEMA = pa.schema(
    [
        ("shard", pa.string()),
        ("row", pa.int64()),
        ("kind", pa.string()),  # good, incidental, two_class, no_noun
        ("role", pa.string()),  # planted role of the caption's class ("" for none)
        ("wnid", pa.string()),  # the class the caption was written for ("" for none)
        ("other_wnid", pa.string()),  # second class of a two-class caption
        ("image_wnid", pa.string()),  # the class whose prototype the image shows ("" = clutter)
        ("url_status", pa.string()),  # ok, missing, truncated, non_image
    ]
)
URL_STATUSES = ("ok", "missing", "truncated", "non_image")

# Roles whose captions are many and written to be on topic (all but rare / low similarity).
_WELL_CAPTIONED = ("imagenet_classes", "shares_imagenet_lemma", "ancestors", "nsfw")


def shard_name(path: str | os.PathLike) -> str:
    """A shard's name in truth, image paths and URLs: its file name without ``.parquet``
    (``part-00000.parquet`` -> ``part-00000``)."""
    return Path(path).name.removesuffix(".parquet")


def image_path(shard: str, row: int) -> str:
    """Path of a row's image relative to the images directory (and to the URL base)."""
    return f"{shard}/{row:06d}.jpg"


@dataclass
class World:
    """Everything the demo world consists of, before images are rendered."""

    shards: dict[str, pa.Table]  # shard file name -> LAION metadata
    truth: pa.Table  # TRUTH_SCHEMA, one row per metadata row
    summary: dict  # world.json
    prototypes: dict[str, img.Prototype]  # wnid -> visual prototype
    planted: pa.Table  # PLANTED_SCHEMA, one row per planted image
    plants: dict[tuple[str, int], Plant]  # (shard, row) of each planted image -> how it is made


def _row_hash(url: str, text: str) -> int:
    digest = hashlib.blake2b(f"{url}\t{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def _captions(
    plan: dict, writer: CaptionWriter, rng: np.random.Generator, cfg: DemoSettings
) -> list:
    """(kind, role, wnid, other_wnid, text) for every planted caption, in a fixed order."""
    rows = []
    lo, hi = cfg.captions_per_class_min, cfg.captions_per_class_max
    for cls in plan["intended_survivors"]:
        for _ in range(int(rng.integers(lo, hi + 1))):
            kind = "incidental" if rng.random() < cfg.incidental_fraction else "good"
            rows.append((kind, cls.role, cls.wnid, "", getattr(writer, kind)(cls)))
    hazard = cfg.captions_per_hazard_class
    for role in _WELL_CAPTIONED:
        n = cfg.captions_per_class_min if role == "imagenet_classes" else hazard
        rows += [("good", role, c.wnid, "", writer.good(c)) for c in plan[role] for _ in range(n)]
    for c in plan["low_similarity"]:
        rows += [("incidental", c.role, c.wnid, "", writer.incidental(c)) for _ in range(hazard)]
    for c in plan["rare"]:
        n = int(rng.integers(1, cfg.rare_captions_max + 1))
        rows += [("good", c.role, c.wnid, "", writer.good(c)) for _ in range(n)]
    survivors = plan["intended_survivors"]
    for _ in range(cfg.two_class_captions if len(survivors) >= 2 else 0):
        a, b = (survivors[i] for i in rng.choice(len(survivors), size=2, replace=False))
        rows.append(("two_class", a.role, a.wnid, b.wnid, writer.two_class(a, b)))
    return rows


def build_world(wn, cfg: DemoSettings, shard_files: list[str]) -> World:
    """Plan the demo world from WordNet and the validated ``demo_world`` config section, in the
    LAION shards ``shard_files`` (their file names, as the laion section names them)."""
    rng = np.random.default_rng(cfg.seed)
    index = NounLemmaIndex.from_wordnet(wn)
    plan = plan_classes(wn, index, rng, cfg)
    writer = CaptionWriter(index, rng)
    planted = _captions(plan, writer, rng, cfg)

    names = [shard_name(f) for f in shard_files]
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"demo world shards {shard_files}: distinct names needed, at least one")
    total = len(names) * cfg.rows_per_shard
    if len(planted) > total:
        raise ValueError(
            f"config key demo_world.rows_per_shard: {len(planted)} planted captions do not fit "
            f"in {len(names)} shards (laion.n_shards) of {cfg.rows_per_shard} rows"
        )
    planted += [("no_noun", "", "", "", writer.no_noun()) for _ in range(total - len(planted))]
    order = rng.permutation(total)

    classes = sorted((c for role in ROLES for c in plan[role]), key=lambda c: c.wnid)
    class_ids = [c.wnid for c in classes]
    prototypes = dict(zip(class_ids, img.make_prototypes(len(classes), rng), strict=True))
    nsfw_ids = {c.wnid for c in plan["nsfw"]}

    p_bad = [cfg.broken_url_fraction, cfg.corrupt_fraction, cfg.non_image_fraction]
    statuses = rng.choice(len(URL_STATUSES), size=total, p=[1 - sum(p_bad), *p_bad])
    noisy = rng.random(total) < cfg.label_noise
    noise_pick = rng.integers(0, max(len(classes) - 1, 1), size=total)
    similarity = rng.uniform(0.28, 0.42, size=total)
    punsafe = rng.beta(1.0, 40.0, size=total)
    unsafe_random = rng.random(total) < cfg.nsfw_image_fraction
    unsafe_level = rng.uniform(0.55, 0.99, size=total)
    pwatermark = rng.beta(1.0, 12.0, size=total).astype(np.float32)

    free = [p for p in range(total) if planted[order[p]][0] == "no_noun"]
    placed = place_plants(plan, index, free, names, cfg)

    base = cfg.url_base.rstrip("/")
    laion_rows: dict[str, list[tuple]] = {n: [] for n in names}
    truth_rows, planted_rows = [], []
    plants: dict[tuple[str, int], Plant] = {}
    n_noisy = 0
    for position, source in enumerate(order):
        kind, role, sid, other, text = planted[source]
        shard = names[position // cfg.rows_per_shard]
        row = position % cfg.rows_per_shard
        url = f"{base}/{image_path(shard, row)}"
        image_wnid = sid
        status = URL_STATUSES[int(statuses[position])]
        side = cfg.image_size
        unsafe = unsafe_random[position] or (sid in nsfw_ids and position % 2 == 0)
        if position in placed:
            (kind, role, sid, other, text), image_wnid, side, plant = placed[position]
            status, unsafe = "ok", False
            if plant is not None:
                plants[(shard, row)] = plant
                original = f"{base}/{image_path(plant.original_shard, plant.original_row)}"
                planted_rows.append((url, original, plant.kind, plant.transform, plant.params))
        elif sid and noisy[position] and len(classes) > 1:
            others = [c for c in class_ids if c != sid]
            image_wnid = others[int(noise_pick[position]) % len(others)]
            n_noisy += 1
        scores = (unsafe_level if unsafe else punsafe)[position], pwatermark[position]
        laion_rows[shard].append(
            (url, text, side, side, similarity[position], _row_hash(url, text), *scores)
        )
        truth_rows.append((shard, row, kind, role, sid, other, image_wnid, status))

    shards = {
        Path(f).name: _table(laion_rows[n], LAION_SCHEMA)
        for f, n in zip(shard_files, names, strict=True)
    }
    truth_table = _table(truth_rows, TRUTH_SCHEMA)
    planted_table = _table(planted_rows, PLANTED_SCHEMA).sort_by(
        [("kind", "ascending"), ("url", "ascending")]
    )
    summary = _summary(wn, cfg, plan, index, truth_table, shards, n_noisy)
    summary["planted_duplicates"] = {
        "file": PLANTED_FILE,
        "kinds": {k: sum(r[2] == k for r in planted_rows) for k in PLANT_KINDS},
    }
    return World(shards, truth_table, summary, prototypes, planted_table, plants)


def _table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` from its rows (tuples in the schema's column order)."""
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema)


def _count(values: list[str]) -> dict[str, int]:
    return dict(sorted(Counter(values).items()))


def _summary(wn, cfg, plan, index, truth: pa.Table, shards: dict, n_noisy: int) -> dict:
    kinds = _count(truth["kind"].to_pylist())
    n_captions = _count([w for w in truth["wnid"].to_pylist() if w])
    leaves = plan["intended_survivors"] + plan["low_similarity"] + plan["nsfw"]
    below = {c.wnid: hypernym_ancestors(wn, c.wnid) for c in leaves}
    ancestor_of = {
        a.wnid: sorted(w for w, ups in below.items() if a.wnid in ups) for a in plan["ancestors"]
    }
    hazards = {role: sorted(c.wnid for c in plan[role]) for role in ROLES}
    hazards["shares_imagenet_lemma"] = sorted(
        s for c in plan["shares_imagenet_lemma"] for s in shared_lemma_synsets(index, c.lemma)
    )
    keys = ("lemma", "name", "gloss", "role")
    classes = {c.wnid: {k: getattr(c, k) for k in keys} for role in ROLES for c in plan[role]}
    for wnid, entry in classes.items():
        entry["n_captions"] = n_captions.get(wnid, 0)
    return {
        "seed": cfg.seed,
        "shards": sorted(shard_name(n) for n in shards),
        "rows_per_shard": cfg.rows_per_shard,
        "rows": sum(t.num_rows for t in shards.values()),
        "image_size": cfg.image_size,
        "url_base": cfg.url_base.rstrip("/"),
        "hazards": hazards,
        "ancestor_of": ancestor_of,
        "classes": classes,
        "caption_kinds": kinds,
        "two_class_captions": kinds.get("two_class", 0),
        "no_noun_captions": kinds.get("no_noun", 0),
        "url_status": _count(truth["url_status"].to_pylist()),
        "label_noise_rows": n_noisy,
        "punsafe_over_0_5": int(
            sum(int(np.sum(t["punsafe"].to_numpy() > 0.5)) for t in shards.values())
        ),
        "truth": "truth.parquet",
    }


def _row_rng(seed: int, shard: str, row: int) -> np.random.Generator:
    """The Generator of one row's file: seeded by (seed, shard number, row)."""
    return np.random.default_rng([seed, int(shard.rsplit("-", 1)[1]), row])


def render_file(
    status: str, shard: str, row: int, prototype: img.Prototype | None, cfg: DemoSettings
) -> bytes | None:
    """The file served for one row: JPEG, truncated JPEG, HTML page, or None (a 404).

    Seeded by (seed, shard number, row), so each image is the same whatever order they are made.
    """
    if status == "missing":
        return None
    if status == "non_image":
        return img.html_page(f"/{image_path(shard, row)}")
    rng, size = _row_rng(cfg.seed, shard, row), cfg.image_size
    pixels = render_clutter(rng, size) if prototype is None else img.render(prototype, rng, size)
    data = jpeg_bytes(pixels, cfg.jpeg_quality)
    return img.truncated(data, rng) if status == "truncated" else data


def render_plant(plant: Plant, shard: str, row: int, prototypes: dict, cfg: DemoSettings) -> bytes:
    """The file of a planted row (``shard``, ``row``): its original's file transformed, or for a
    look-alike the original's prototype drawn again in a nearby pose with the row's own noise."""
    proto = prototypes[plant.original_image_wnid]
    size, quality = cfg.image_size, cfg.jpeg_quality
    if plant.kind == "lookalike":
        pose = img.draw_pose(proto, _row_rng(cfg.seed, plant.original_shard, plant.original_row))
        rng = _row_rng(cfg.seed, shard, row)
        return jpeg_bytes(img.paint(proto, img.lookalike_pose(pose, rng), rng, size), quality)
    original = render_file("ok", plant.original_shard, plant.original_row, proto, cfg)
    assert original is not None  # an "ok" row always has a file
    return img.copy_transform(original, plant.transform, json.loads(plant.params), size, quality)


#: Rows one worker renders and writes per task: a task costs about a second on one core.
CHUNK_ROWS = 1000


def _write_images(
    rows: list[dict],
    prototypes: dict[str, img.Prototype],
    plants: dict[tuple[str, int], Plant],
    folder: Path,
    cfg: DemoSettings,
) -> int:
    """Render and write the files of ``rows`` (truth rows) under ``folder``; the number of rows."""
    for t in rows:
        shard, row = t["shard"], t["row"]
        plant = plants.get((shard, row))
        if plant is not None:
            data = render_plant(plant, shard, row, prototypes, cfg)
        else:
            data = render_file(t["url_status"], shard, row, prototypes.get(t["image_wnid"]), cfg)
        if data is not None:
            (folder / image_path(shard, row)).write_bytes(data)
    return len(rows)


def write_world(
    world: World, out_dir: str | os.PathLike, cfg: DemoSettings, workers: int = 1
) -> Path:
    """Render the images and write shards, truth, the planted duplicates and world.json under
    ``out_dir``.

    Images go to a temporary directory renamed to ``images`` when complete; world.json is
    written last, so its presence means the world is whole. ``workers`` processes (the job's
    threads) render them, chunk by chunk: each file is seeded by its own row
    (:func:`render_file`), so the bytes are the same for any number of workers.
    """
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from multiprocessing import get_context

    from tqdm import tqdm

    out = Path(out_dir)
    images_tmp = out / ".images.tmp"
    shutil.rmtree(images_tmp, ignore_errors=True)
    for name in world.shards:
        (images_tmp / shard_name(name)).mkdir(parents=True)
    truth = world.truth.select(["url_status", "shard", "row", "image_wnid"]).to_pylist()
    tasks = [
        (truth[i : i + CHUNK_ROWS], world.prototypes, world.plants, images_tmp, cfg)
        for i in range(0, len(truth), CHUNK_ROWS)
    ]
    with tqdm(total=len(truth), desc="demo images", unit="img", mininterval=5) as progress:
        if workers <= 1:
            for task in tasks:
                progress.update(_write_images(*task))
        else:
            job_usage.declare_workers(workers)  # the job's recorded peak counts them
            # spawned, not forked: the parent holds pyarrow's and numpy's thread pools; each
            # worker ends with the job (lifeline.bind_to_parent), as a killed job's must
            pool = ProcessPoolExecutor(
                workers,
                mp_context=get_context("spawn"),
                initializer=lifeline.bind_to_parent,
                initargs=(signal.SIGTERM, os.getpid()),
            )
            with pool:
                done = [pool.submit(_write_images, *task) for task in tasks]
                try:
                    for future in as_completed(done):
                        progress.update(future.result())
                except BaseException:
                    pool.shutdown(cancel_futures=True)  # the first error ends the job now
                    raise
    shutil.rmtree(out / "images", ignore_errors=True)
    os.replace(images_tmp, out / "images")
    for name, table in world.shards.items():
        write_parquet(table, out / "laion" / name)
    write_parquet(world.truth, out / "truth.parquet")
    write_parquet(world.planted, out / PLANTED_FILE)
    check_planted(world.planted, out / "images", cfg.url_base, str(out / PLANTED_FILE))
    write_json(world.summary, out / "world.json")
    return out
