"""Step 1: match every WordNet noun lemma against every caption (a vectorised token trie walk).

Lemmas and captions are cleaned and normalised by the one rule of :mod:`imagenot.curate.text`
(HTML entities, compatibility forms and combining marks folded; lowercase; every run of
characters that are neither letters nor digits becomes one space).

A lemma matches a caption when `` lemma `` (normalised, padded) occurs in `` caption ``
(normalised, padded): whole words only, multi-word lemmas included. A lemma names every synset
it is a lemma of, and all of them are emitted; output rows are unique (row, wnid) pairs.

A normalised text is its words joined by single spaces, so that substring test is the same as
"the lemma's words occur as consecutive words of the caption", which is what the hot path
computes, keeping every match in NumPy arrays (no Python object per ASCII caption or per match):

- tokenise (:func:`imagenot.curate.text.tokenise`): the words of every caption form one Arrow
  string array, hashed once against the lemma word vocabulary (``index_in``);
- walk: the lemma keys form a trie over word ids; all word positions advance through it
  together, one level (one more word) at a time, each level a hash lookup of the
  (node, next word) edge codes (a bit-table prefilter, then ``index_in``);
- expand: the (caption, lemma key) hits of a chunk of captions select rows of the key x synset
  incidence matrix (SciPy CSR, a compiled gather); the pairs, coded caption * n_synsets + wnid
  in 32 bits (the chunk is sized for it), are sorted as plain values (NumPy's SIMD quicksort),
  repeats dropped, and split back into caption and wnid by one ``divmod``.

The output is the substring test's, caption by caption (``tests/test_curate_match.py`` compares
it with a plain word-tuple reference on web and random captions), and no Python object is created
per ASCII caption, word or match (non-ASCII captions are cleaned as Python strings).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imagenot.core.io import read_parquet
from imagenot.curate.text import (
    clean_web_text,
    combining_code_points,
    normalise,
    string_array,
    tokenise,
)

if TYPE_CHECKING:
    from imagenot.curate.settings import MatchSettings


@dataclass(frozen=True)
class LemmaIndex:
    """Normalised lemma keys and, for each key, the synsets it names (CSR layout)."""

    keys: list[str]  # normalised lemma text, unique, sorted
    # int64 [n_keys + 1]: the synsets of key i are wnid_idx[key_ptr[i]:key_ptr[i+1]]
    key_ptr: np.ndarray
    wnid_idx: np.ndarray  # int32 indices into ``wnids``
    wnids: pa.Array  # string, sorted unique wnids

    @classmethod
    def from_lemma_table(cls, table: pa.Table) -> LemmaIndex:
        """Build from a (lemma, wnid) table such as ``imagenot.core.wordnet.noun_lemma_table``."""
        keys = normalise(clean_web_text(table.column("lemma")))
        pairs = pa.table({"key": keys, "wnid": table.column("wnid")})
        pairs = pairs.filter(pc.greater(pc.utf8_length(pairs.column("key")), 0))
        pairs = (
            pairs.group_by(["key", "wnid"])
            .aggregate([])
            .sort_by([("key", "ascending"), ("wnid", "ascending")])
        )
        wnids = pc.unique(pairs.column("wnid")).sort()
        wnid_idx = pc.index_in(pairs.column("wnid"), value_set=wnids).to_numpy().astype(np.int32)
        key_col = pairs.column("key").to_numpy(zero_copy_only=False)
        keys_unique, starts = np.unique(key_col, return_index=True)  # UTF-8 order: Arrow's sort
        key_ptr = np.append(starts, len(key_col)).astype(np.int64)
        return cls(keys_unique.tolist(), key_ptr, wnid_idx, wnids)

    @classmethod
    def from_wordnet(cls, nltk_data: str | os.PathLike) -> LemmaIndex:
        """Build straight from WordNet (seconds; rules read ``imagenot lemmas``' table instead)."""
        from imagenot.core.wordnet import load_wordnet, noun_lemma_table

        return cls.from_lemma_table(noun_lemma_table(load_wordnet(str(nltk_data))))


def read_lemma_table(path: str | os.PathLike) -> pa.Table:
    """A (lemma, wnid) parquet as written by ``imagenot lemmas``; names the file if it is not one
    (the columns it lacks) or is empty."""
    table = read_parquet(path, columns=["lemma", "wnid"])
    if table.num_rows == 0:
        raise ValueError(f"{path}: the lemma table is empty")
    return table


TOKENISE_ROWS = 262144  # captions tokenised and looked up together
CHUNK_ROWS = 32768  # captions whose synsets are expanded and sorted together (at most)
_FILTER_BITS = 22  # 4 MiB prefilter of trie edges: ~2% false positives for ~80k edges
_HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


# A match file's columns, ``wnid`` written from its dictionary indices (:func:`match_table`).
MATCH_SCHEMA = pa.schema([("row", pa.int64()), ("wnid", pa.dictionary(pa.int32(), pa.string()))])


def _filter_slot(codes: np.ndarray) -> np.ndarray:
    return (codes.astype(np.uint64) * _HASH_MULTIPLIER) >> np.uint64(64 - _FILTER_BITS)


class Matcher:
    """The lemma keys of a LemmaIndex as a trie over word ids, and the key x synset matrix."""

    def __init__(self, index: LemmaIndex):
        import scipy.sparse as sp

        self.index = index
        # clean_web_text's cached code point table (about a second): now, not in the first batch
        combining_code_points()
        split = pc.split_pattern(pa.array(index.keys, pa.string()), " ")
        lengths = pc.list_value_length(split).to_numpy(zero_copy_only=False).astype(np.int64)
        flat = pc.list_flatten(split)
        self.vocab = pc.unique(flat).sort()
        n_words = len(self.vocab)
        word_ids = pc.index_in(flat, value_set=self.vocab).to_numpy().astype(np.int64)
        first_word = np.cumsum(lengths) - lengths  # index in ``flat`` of each key's first word
        # Level 1: one node per distinct first word; level k: one per distinct k-word prefix.
        # An edge (node, next word) -> child is looked up by its code node * n_words + word.
        firsts = np.unique(word_ids[first_word]) if len(lengths) else np.empty(0, np.int64)
        self.first_node = np.full(n_words + 1, -1, dtype=np.int32)  # [-1]: unknown word
        self.first_node[firsts] = np.arange(len(firsts))
        node = self.first_node[word_ids[first_word]].astype(np.int64)
        n_nodes = len(firsts)
        # Per level >= 2: edge codes (Arrow, for ``index_in``) and the child node of each.
        self.edges: list[tuple[pa.Array, np.ndarray]] = []
        self.max_words = int(lengths.max()) if len(lengths) else 0
        self.edge_filter = np.zeros(2**_FILTER_BITS, dtype=bool)
        parents = [np.empty(0, np.int64)]
        for level in range(2, self.max_words + 1):
            longer = np.flatnonzero(lengths >= level)
            codes = node[longer] * n_words + word_ids[first_word[longer] + level - 1]
            unique_codes, inverse = np.unique(codes, return_inverse=True)
            children = n_nodes + np.arange(len(unique_codes), dtype=np.int32)
            self.edges.append((pa.array(unique_codes), children))
            self.edge_filter[_filter_slot(unique_codes)] = True
            parents.append(unique_codes // n_words)
            node[longer] = children[inverse]
            n_nodes += len(unique_codes)
        self.has_child = np.zeros(n_nodes, dtype=bool)
        self.has_child[np.concatenate(parents)] = True
        self.key_of_node = np.full(n_nodes, -1, dtype=np.int32)
        self.key_of_node[node] = np.arange(len(index.keys))  # ``node``: each key's last node
        # Key x synset incidence (CSR; each key's wnid indices sorted).
        self.key_synsets = sp.csr_matrix(
            (np.ones(len(index.wnid_idx), dtype=bool), index.wnid_idx, index.key_ptr),
            shape=(len(index.keys), len(index.wnids)),
        )

    def _level_hits(self, texts: pa.Array | pa.ChunkedArray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every (position in ``texts``, lemma key id) occurrence, repeats kept, as one
        (positions, key ids) pair per trie level, each in position order."""
        words, parent = tokenise(texts)
        if len(words) == 0 or len(self.vocab) == 0:
            return []
        ids = pc.fill_null(pc.index_in(words, value_set=self.vocab), -1).to_numpy()
        # ``follow[i]``: id of word i if word i - 1 is in the same caption, else -1 (and -1 after
        # the last word). A prefix that ends at word i - 1 is extended with follow[i].
        follow = np.empty(len(ids) + 1, dtype=np.int32)
        follow[:-1] = ids
        follow[-1] = -1
        follow[1:-1][parent[1:] != parent[:-1]] = -1
        node = self.first_node[ids]  # first_node[-1] is -1: unknown words start nothing
        start = np.flatnonzero(node >= 0)  # word positions where a live prefix starts
        node = node[start]
        levels = []
        n_words = len(self.vocab)
        for level in range(1, self.max_words + 1):
            if level > 1:  # extend every live prefix by the next word of the same caption
                codes_k, children_k = self.edges[level - 2]
                alive = self.has_child[node]
                start, node = start[alive], node[alive]
                word = follow[start + (level - 1)]
                codes = node.astype(np.int64) * n_words + word
                alive = (word >= 0) & self.edge_filter[_filter_slot(codes)]
                start, codes = start[alive], codes[alive]
                at = pc.fill_null(pc.index_in(codes, value_set=codes_k), -1).to_numpy()
                alive = at >= 0
                start, node = start[alive], children_k[at[alive]]
            if len(start) == 0:
                break
            key = self.key_of_node[node]
            hit = key >= 0
            levels.append((parent[start[hit]], key[hit]))
        return levels

    def match_arrays(self, texts: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
        """Unique (position in ``texts``, wnid index) pairs, sorted, as two NumPy arrays."""
        parts = list(self.iter_matches(texts))
        return (
            np.concatenate([np.empty(0, np.int64), *(positions for positions, _ in parts)]),
            np.concatenate([np.empty(0, np.int32), *(wnid_idx for _, wnid_idx in parts)]),
        )

    def iter_matches(
        self, texts: pa.Array | pa.ChunkedArray
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``match_arrays`` in consecutive pieces, one per ``CHUNK_ROWS`` texts or fewer.

        Words are looked up ``TOKENISE_ROWS`` texts at a time (each lookup rebuilds a hash of the
        lemma vocabulary); synsets are expanded and sorted one chunk of texts at a time, which
        keeps those, the largest arrays, small enough for the allocator to reuse their memory,
        and their (text, wnid) codes within 32 bits (``_expand``).
        """
        n_wnids = max(len(self.index.wnids), 1)
        chunk = max(1, min(CHUNK_ROWS, (2**32 - 1) // n_wnids))
        texts = clean_web_text(string_array(texts))
        for outer in range(0, len(texts), TOKENISE_ROWS):
            part = texts.slice(outer, TOKENISE_ROWS)
            levels = self._level_hits(part)
            firsts = np.arange(0, len(part), chunk)
            # Each level's hits are in position order: its share of every chunk is one slice.
            bounds = [np.searchsorted(rows, [*firsts, len(part)]).tolist() for rows, _ in levels]
            for i, first in enumerate(firsts.tolist()):
                rows = [r[b[i] : b[i + 1]] for (r, _), b in zip(levels, bounds, strict=True)]
                keys = [k[b[i] : b[i + 1]] for (_, k), b in zip(levels, bounds, strict=True)]
                positions, wnid_idx = self._expand(
                    np.concatenate([np.empty(0, np.int64), *rows]) - first,
                    np.concatenate([np.empty(0, np.int32), *keys]),
                )
                positions += outer + first
                yield positions, wnid_idx

    def _expand(self, rows: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, key) hits, any order, rows below ``2**32 // n_synsets`` -> unique (row, wnid
        index) pairs, sorted.

        Each hit's synsets (a row gather of the CSR key x synset matrix) are coded
        row * n_synsets + wnid in 32 bits, so one sort of plain values orders them (by row, then
        wnid): ``np.unique``'s quicksort (NumPy's SIMD sort, several times faster on 32-bit values
        than a stable sort of 64-bit codes; the order of equal values is immaterial).
        """
        if len(rows) == 0:
            return np.empty(0, np.int64), np.empty(0, np.int32)
        n_wnids = np.uint32(len(self.index.wnids))
        synsets = self.key_synsets[keys]  # CSR rows of the hit keys, in hit order
        codes = np.repeat(rows.astype(np.uint32) * n_wnids, np.diff(synsets.indptr))
        codes += synsets.indices.astype(np.uint32, copy=False)
        row, wnid = np.divmod(np.unique(codes), n_wnids)  # a quicksort, then repeats dropped
        return row.astype(np.int64), wnid.view(np.int32)


def match_table(
    rows: np.ndarray,
    parts: list[tuple[np.ndarray, np.ndarray]],
    index: LemmaIndex,
    totals: np.ndarray,
) -> pa.Table:
    """The matches contract table from ``iter_matches`` pieces: ``row`` int64, ``wnid`` string.

    ``rows`` maps a position in the matched texts to its shard row (the pieces' positions are
    consumed: shifted in place when ``rows`` is contiguous). ``wnid`` is dictionary
    encoded, every chunk sharing one dictionary (the sorted wnids that occur), so the parquet
    writer stores the indices as they are instead of hashing millions of strings; it reads back
    as plain strings (``write_matches``). The pieces are consumed: their wnid indices are
    recoded in place and their position arrays become the ``row`` column.
    """
    counts = np.zeros(len(index.wnids), dtype=np.int64)
    for _, wnid_idx in parts:
        counts += np.bincount(wnid_idx, minlength=len(index.wnids))
    totals += counts  # the caller's running matches per wnid (the class-count scatter)
    used = np.flatnonzero(counts)
    dictionary = index.wnids.take(pa.array(used))
    recode = np.zeros(len(index.wnids), dtype=np.int32)
    recode[used] = np.arange(len(used), dtype=np.int32)
    # Without skipped captions the batch's rows are contiguous: a shift, no gather of millions.
    contiguous = len(rows) == 0 or int(rows[-1] - rows[0]) == len(rows) - 1
    if contiguous:
        first = int(rows[0]) if len(rows) else 0
        for positions, _ in parts:
            positions += first
    row = [pa.array(positions if contiguous else rows[positions]) for positions, _ in parts]
    for _, wnid_idx in parts:
        recode.take(wnid_idx, out=wnid_idx, mode="clip")
    wnid = [
        pa.DictionaryArray.from_arrays(wnid_idx, dictionary, safe=False) for _, wnid_idx in parts
    ]
    return pa.Table.from_batches(
        [pa.record_batch([r, w], schema=MATCH_SCHEMA) for r, w in zip(row, wnid, strict=True)],
        schema=MATCH_SCHEMA,
    )


# Matches are (row, wnid) rows sorted by row, millions per shard: ``row`` plain (zstd takes its
# runs of repeats down to 2.4 MB per 1M captions; delta encoding made 1.3 MB but took 0.06 s
# longer), ``wnid`` written from its dictionary indices, statistics only for ``row``; no Arrow
# schema stored, so the file reads back with a plain string ``wnid`` column.
MATCH_PARQUET_OPTIONS = {
    "use_dictionary": ["wnid"],
    "column_encoding": {"row": "PLAIN"},
    "write_statistics": ["row"],
    "store_schema": False,
}


def write_matches(table: pa.Table, path: str | os.PathLike) -> None:
    """Write a ``match_shard`` table to parquet (atomically, zstd)."""
    from imagenot.core.io import write_parquet

    write_parquet(table, path, **MATCH_PARQUET_OPTIONS)


def iter_shard_matches(
    path: str | os.PathLike,
    matcher: Matcher,
    settings: MatchSettings,
    progress: bool,
    stats: dict,
) -> Iterator[pa.Table]:
    """Match one shard batch by batch: one matches table (``match_table``) per batch of
    ``settings.batch_rows`` shard rows, sorted by row then wnid. Memory is bounded by the batch, never by
    the shard: a laion2B-en part holds ~18 M captions and ~450 M matches.

    ``stats`` is filled when the iterator is exhausted: row/skip counts, ``captions``,
    ``matches``, ``matched_captions`` and ``counts`` (matching captions per wnid, the input of
    the class-count gather).
    """
    from tqdm import tqdm

    from imagenot.curate.shards import SkipCounts, iter_captions, open_shard

    total = open_shard(path, settings.require_url).num_rows
    counts = SkipCounts()
    per_wnid = np.zeros(len(matcher.index.wnids), dtype=np.int64)
    n_matches = matched = 0
    with tqdm(
        total=total, unit="caption", desc=f"match {os.path.basename(path)}", disable=not progress
    ) as bar:
        for rows, texts, batch_counts in iter_captions(path, settings):
            parts = list(matcher.iter_matches(texts))
            for positions, _ in parts:
                if len(positions):
                    matched += 1 + int(np.count_nonzero(positions[1:] != positions[:-1]))
            table = match_table(rows, parts, matcher.index, per_wnid)
            n_matches += table.num_rows
            counts.add(batch_counts)
            bar.update(batch_counts.rows)
            yield table
    stats.update(counts.as_dict())
    stats["captions"] = stats["rows"] - sum(stats["skipped"].values())
    stats["matches"] = n_matches
    stats["matched_captions"] = matched
    used = np.flatnonzero(per_wnid)
    wnids = matcher.index.wnids.take(pa.array(used)).to_pylist()
    stats["counts"] = dict(zip(wnids, per_wnid[used].tolist(), strict=True))


def match_shard(
    path: str | os.PathLike, matcher: Matcher, settings: MatchSettings, progress: bool = True
) -> tuple[pa.Table, dict]:
    """Match one shard in memory: (matches table sorted by row then wnid, stats dict).

    For tests and small files; the workflow streams with ``write_shard_matches``.
    """
    stats: dict = {}
    pieces = list(iter_shard_matches(path, matcher, settings, progress, stats))
    stats.pop("counts")
    table = pa.concat_tables([MATCH_SCHEMA.empty_table(), *pieces])
    return table.cast(pa.schema([("row", pa.int64()), ("wnid", pa.string())])), stats


def write_stream(
    tables: Iterable[pa.Table], out: str | os.PathLike, schema: pa.Schema, **options
) -> None:
    """Stream ``tables`` to the parquet file ``out``, one row group each (atomically, zstd;
    ``options``: the parquet writer's)."""
    import pyarrow.parquet as pq

    from imagenot.core.io import atomic_path

    with (
        atomic_path(out, ".parquet") as tmp,
        pq.ParquetWriter(tmp, schema, compression="zstd", **options) as writer,
    ):
        for table in tables:
            writer.write_table(table, row_group_size=max(table.num_rows, 1))


def write_shard_matches(
    path: str | os.PathLike,
    matcher: Matcher,
    out: str | os.PathLike,
    settings: MatchSettings,
    progress: bool = True,
) -> dict:
    """Match one shard and stream the matches to ``out`` (one row group per batch, written
    atomically); return the stats of ``iter_shard_matches`` (with per-wnid ``counts``)."""
    stats: dict = {}
    tables = iter_shard_matches(path, matcher, settings, progress, stats)
    write_stream(tables, out, MATCH_SCHEMA, **MATCH_PARQUET_OPTIONS)
    return stats
