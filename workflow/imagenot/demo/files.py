"""The files of the demo stage's steps (:mod:`imagenot.core.files`).

The demo world is a folder of its own layout (``--out``: shards under ``laion/``, ``images/``,
``truth.parquet``, ``planted_duplicates.parquet``, ``world.json``); ``demo-world`` checks that the files its rule lists are
where that layout puts them.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.core.files import Files, given, made


@dataclass(frozen=True)
class WorldFiles(Files):
    """``demo-world``: the LAION-style shards, their images and the ground truth."""

    nltk_data: str = given("NLTK_DATA folder holding WordNet 3.0")
    shards: list[str] = made(
        "the LAION shard files to write (under OUT/laion; the rule gives those the laion "
        "section names)",
        many=True,
    )
    images: str | None = made("the images folder (OUT/images)", optional=True)
    truth: str | None = made("the ground truth (OUT/truth.parquet)", optional=True)
    planted_duplicates: str | None = made(
        "the planted duplicates and look-alikes (OUT/planted_duplicates.parquet: url, "
        "original_url, kind, transform, transform_params)",
        optional=True,
    )
    world: str | None = made("the world's summary, written last (OUT/world.json)", optional=True)


@dataclass(frozen=True)
class ScaleShardFiles(Files):
    """``scale-world-shard``: one paper-shaped LAION metadata shard."""

    captions: str = given("parquet of real web captions (TEXT)")
    lemmas: str = given("noun lemma table (imagenot lemmas)")
    shard: str = made("the shard (parquet)")
