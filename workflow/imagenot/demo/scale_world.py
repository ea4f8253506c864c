"""The scale world: paper-shaped LAION metadata shards, generated one shard per job.

Why: nobody here holds laion2B-en (2.32 billion captions in 128 parts), so the workflow's scale
is measured on a scale model of it: shards with the real laion2B-en names and schema, millions of
rows each, whose captions give every curation step web-like work. The demo world plants a few
dozen classes to test *what* curation decides; this world exists to measure *how much* each job
costs as the data grows (benchmarks/bench_scale.py), so it is vectorised (Arrow/NumPy, no Python
object per row) and bounded by one shard.

Captions, per row (shares from the ``scale_world`` config section):

- ``web``: one of the real web captions (``scale_world.captions``) as it is. A web caption names
  about 15 noun synsets (every sense of every noun word), as LAION's do;
- ``web_lemma``: a web caption followed by one vocabulary lemma;
- ``lemma``: filler words with one vocabulary lemma among them (the captions that survive step 6);
- ``two_class``: filler words with two vocabulary lemmas (dropped at step 6);
- ``no_noun``: filler words only.

Filler words are the words of the web captions that are no WordNet noun lemma. The vocabulary is
``n_synsets`` noun synsets drawn from the lemma table plus ``n_imagenet_classes`` ILSVRC-2012
classes, in a seeded order that is their Zipf rank (rank r drawn with probability ~ r^-s), each
written as one of its lemmas (its first lemma or another one, so that class queries and
captions agree more for some synsets than for others at step 7). A lemma may name several
synsets and contain other lemmas, exactly as in real captions.

Other columns follow laion2B-en's: URL (``<url_base>/<shard index>/<row:09d>.jpg``), WIDTH and
HEIGHT (log-normal web image sizes), similarity (CLIP score above LAION's 0.28 cut), hash (int64),
punsafe, pwatermark. Every draw comes from ``numpy.random.default_rng([seed, 1, index])``, so a
shard is the same whichever job writes it and in whichever order; the vocabulary comes from
``default_rng([seed, 0])`` and is the same for every shard.

Images are never stored: :func:`imagenot.acquire.generated.generated_jpeg` makes a small
deterministic JPEG for any URL path on request (the download job's loopback server,
``acquire.url_map`` value ``generate:<seed>``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from imagenot.demo.settings import ScaleSettings
from imagenot.demo.world import LAION_SCHEMA

KINDS = ("web", "web_lemma", "lemma", "two_class", "no_noun")
_ASCII_WORD = r"^[a-z]+$"
_LEMMA_TEXT = r"^[A-Za-z][A-Za-z' -]{1,28}[A-Za-z]$"


def read_web_captions(path: str | os.PathLike) -> pa.Array:
    """The non-empty ``TEXT`` values of a web caption parquet; the error names the file."""
    try:
        table = pq.read_table(path, columns=["TEXT"])
    except (OSError, pa.ArrowInvalid, KeyError) as exc:
        raise ValueError(f"{path}: not a parquet with a TEXT column ({exc})") from exc
    texts = table.column("TEXT").combine_chunks().cast(pa.string())
    texts = texts.filter(pc.greater(pc.utf8_length(pc.utf8_trim_whitespace(texts)), 0))
    if len(texts) == 0:
        raise ValueError(f"{path}: no non-empty caption in column TEXT")
    return texts


def filler_words(web_texts: pa.Array, lemma_table: pa.Table) -> pa.Array:
    """Sorted distinct lowercase ASCII words of ``web_texts`` that are no noun lemma."""
    from imagenot.curate.text import normalise

    words = pc.unique(pc.list_flatten(pc.split_pattern(normalise(web_texts), " ")))
    words = words.filter(pc.match_substring_regex(words, _ASCII_WORD))
    nouns = pc.unique(normalise(lemma_table.column("lemma")))
    words = words.filter(pc.invert(pc.is_in(words, value_set=nouns)))
    if len(words) == 0:
        raise ValueError("the web captions have no word that is not a WordNet noun")
    return words.sort()


@dataclass(frozen=True)
class Vocabulary:
    """The synsets mixed into captions, in Zipf rank order, each with the lemma written."""

    wnids: pa.Array  # string
    lemmas: pa.Array  # string: the text written into captions
    probabilities: np.ndarray  # float64, rank r ~ r^-s, sums to 1
    imagenet: np.ndarray  # bool: an ILSVRC-2012 class


def vocabulary(lemma_table: pa.Table, cfg: ScaleSettings) -> Vocabulary:
    """Draw the vocabulary from a (lemma, wnid) table (seeded by ``cfg.seed``)."""
    from imagenot.core.wordnet import imagenet_wnids

    rng = np.random.default_rng([cfg.seed, 0])
    table = lemma_table.select(["lemma", "wnid"]).filter(
        pc.match_substring_regex(lemma_table.column("lemma"), _LEMMA_TEXT)
    )
    # One lemma per synset: shuffle the rows, keep each synset's first.
    table = table.take(pa.array(rng.permutation(table.num_rows)))
    wnid_all = table.column("wnid").combine_chunks()
    _, first = np.unique(wnid_all.to_numpy(zero_copy_only=False), return_index=True)
    first.sort()
    table = table.take(pa.array(first))
    in_imagenet = pc.is_in(table.column("wnid"), value_set=pa.array(imagenet_wnids()))
    in_imagenet = in_imagenet.to_numpy(zero_copy_only=False)
    others = np.flatnonzero(~in_imagenet)
    classes = np.flatnonzero(in_imagenet)
    pick = np.concatenate([others[: cfg.n_synsets], classes[: cfg.n_imagenet_classes]])
    pick = pick[rng.permutation(len(pick))]  # the Zipf rank order
    chosen = table.take(pa.array(pick))
    ranks = np.arange(1, len(pick) + 1, dtype=np.float64)
    weights = ranks ** -float(cfg.zipf_exponent)
    return Vocabulary(
        wnids=chosen.column("wnid").combine_chunks(),
        lemmas=chosen.column("lemma").combine_chunks(),
        probabilities=weights / weights.sum(),
        imagenet=in_imagenet[pick],
    )


def _kind_probabilities(cfg: ScaleSettings) -> list[float]:
    web, web_lemma = cfg.web_fraction, cfg.web_lemma_fraction
    two, none = cfg.two_class_fraction, cfg.no_noun_fraction
    lemma = 1.0 - web - web_lemma - two - none
    if lemma < -1e-9:
        raise ValueError(
            "scale_world: web_fraction + web_lemma_fraction + two_class_fraction + "
            "no_noun_fraction exceeds 1"
        )
    return [web, web_lemma, max(lemma, 0.0), two, none]


def _batch(
    rng: np.random.Generator,
    index: int,
    start: int,
    n: int,
    cfg: ScaleSettings,
    web: pa.Array,
    filler: pa.Array,
    vocab: Vocabulary,
) -> tuple[pa.Table, np.ndarray]:
    """Rows ``start`` .. ``start + n`` of shard ``index`` (LAION_SCHEMA) and their caption kind
    indices; the captions built column-wise from token indices."""
    kind = rng.choice(len(KINDS), size=n, p=_kind_probabilities(cfg))
    is_web = kind <= 1
    n_lemmas = np.select([kind == 1, kind == 2, kind == 3], [1, 1, 2], 0)
    lo, hi = cfg.filler_words_min, cfg.filler_words_max
    n_fill = np.where(is_web, 0, rng.integers(lo, hi + 1, size=n))
    width = hi + 2  # filler slots, then two lemma slots
    # Token ids: [0, len(filler)) filler words, then vocabulary lemmas; -1 = no token.
    tokens = rng.integers(0, len(filler), size=(n, width), dtype=np.int64)
    tokens[:, :hi][np.arange(hi)[None, :] >= n_fill[:, None]] = -1
    lemma_ids = rng.choice(len(vocab.lemmas), size=(n, 2), p=vocab.probabilities) + len(filler)
    tokens[:, hi:] = np.where(np.arange(2)[None, :] < n_lemmas[:, None], lemma_ids, -1)
    # Each lemma goes to a random position among the filler words (after a web caption).
    order = np.empty((n, width), dtype=np.float64)
    order[:, :hi] = np.arange(hi)
    order[:, hi:] = rng.integers(0, n_fill[:, None] + 1, size=(n, 2)) - np.array([0.5, 0.25])
    order[tokens < 0] = np.inf
    tokens = np.take_along_axis(tokens, np.argsort(order, axis=1, kind="stable"), axis=1)
    words = pa.concat_arrays([filler, vocab.lemmas.cast(pa.string())])
    columns = [pc.if_else(pa.array(is_web), web.take(rng.integers(0, len(web), size=n)), None)]
    for j in range(width):
        ids = tokens[:, j]
        if (ids < 0).all():
            break
        columns.append(words.take(pa.array(ids, mask=ids < 0)))
    text = pc.binary_join_element_wise(*columns, " ", null_handling="skip")
    rows = pc.cast(pa.array(np.arange(start, start + n, dtype=np.int64)), pa.string())
    base = f"{cfg.url_base.rstrip('/')}/{index:05d}/"
    url = pc.binary_join_element_wise(base, pc.utf8_lpad(rows, width=9, padding="0"), ".jpg", "")
    size = np.clip(np.exp(rng.normal(6.0, 0.55, size=(2, n))), 32, 8192).astype(np.int64)
    unsafe = rng.random(n) < cfg.nsfw_image_fraction
    punsafe = np.where(unsafe, rng.uniform(0.55, 0.99, n), rng.beta(1.0, 40.0, n))
    info = np.iinfo(np.int64)
    table = pa.table(
        {
            "URL": url,
            "TEXT": text,
            "WIDTH": size[0],
            "HEIGHT": size[1],
            "similarity": np.clip(rng.normal(0.32, 0.03, n), 0.28, 0.5),
            "hash": rng.integers(info.min, info.max, size=n, dtype=np.int64, endpoint=True),
            "punsafe": punsafe.astype(np.float32),
            "pwatermark": rng.beta(1.0, 12.0, n).astype(np.float32),
        },
        schema=LAION_SCHEMA,
    )
    return table, kind


def write_shard(
    index: int,
    cfg: ScaleSettings,
    web: pa.Array,
    filler: pa.Array,
    vocab: Vocabulary,
    path: str | os.PathLike,
) -> dict:
    """Generate and write shard ``index`` atomically, one snappy row group (``row_group_rows``
    rows) at a time, as LAION's Spark-written parts: memory is bounded by a row group. Returns
    the shard's summary (caption kinds, vocabulary size)."""
    from imagenot.core.io import atomic_path

    rng = np.random.default_rng([cfg.seed, 1, index])
    total, step = cfg.rows_per_shard, cfg.row_group_rows
    counts = np.zeros(len(KINDS), dtype=np.int64)
    with (
        atomic_path(path, ".parquet") as tmp,
        pq.ParquetWriter(tmp, LAION_SCHEMA, compression="snappy") as writer,
    ):
        for start in range(0, total, step):
            table, kind = _batch(
                rng, index, start, min(step, total - start), cfg, web, filler, vocab
            )
            writer.write_table(table, row_group_size=len(table))
            counts += np.bincount(kind, minlength=len(KINDS))
    return {
        "shard_index": index,
        "rows": cfg.rows_per_shard,
        "caption_kinds": {k: int(c) for k, c in zip(KINDS, counts, strict=True)},
        "vocabulary_synsets": len(vocab.wnids),
        "vocabulary_imagenet_classes": int(vocab.imagenet.sum()),
        "filler_words": len(filler),
    }
