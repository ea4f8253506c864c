"""Step 1: match every WordNet noun lemma against every caption (one Aho-Corasick scan).

Normalisation rule, applied identically to lemmas and captions:

1. lowercase (Unicode-aware, Arrow's ``utf8_lower``): matching is case-insensitive, unlike
   LAIONet's case-sensitive test;
2. every run of characters that are neither letters (Unicode ``L*``) nor digits (``N*``)
   becomes one space, so punctuation, underscores, hyphens and apostrophes separate words
   (``Jack-O'-Lantern`` -> ``jack o lantern``);
3. leading and trailing spaces are stripped, and the text is padded with one space each side.

A lemma matches a caption when `` lemma `` (normalised, padded) occurs in `` caption ``
(normalised, padded): whole words only, multi-word lemmas included. A lemma names every synset
it is a lemma of, and all of them are emitted; output rows are unique (row, wnid) pairs.

The hot path keeps matches in NumPy arrays: captions of a batch are concatenated into one string
(separated by a newline, which normalised text never holds), scanned once by the automaton, and
the match end positions are mapped back to rows with ``searchsorted``.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NON_WORD = r"[^\p{L}\p{N}]+"
SEPARATOR = "\n"


def normalise(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Lowercase, non-letter/digit runs to one space, strip (see module docstring)."""
    lowered = pc.utf8_lower(texts)
    spaced = pc.replace_substring_regex(lowered, pattern=NON_WORD, replacement=" ")
    return pc.utf8_trim(spaced, characters=" ")


def normalise_one(text: str) -> str:
    """``normalise`` for a single string."""
    return normalise(pa.array([text])).to_pylist()[0]


@dataclass(frozen=True)
class LemmaIndex:
    """Normalised lemma keys and, for each key, the synsets it names (CSR layout)."""

    keys: list[str]  # normalised lemma text, unique, sorted
    key_ptr: (
        np.ndarray
    )  # int64 [n_keys + 1]: synsets of key i are wnid_idx[key_ptr[i]:key_ptr[i+1]]
    wnid_idx: np.ndarray  # int32 indices into ``wnids``
    wnids: pa.Array  # string, sorted unique wnids

    @classmethod
    def from_lemma_table(cls, table: pa.Table) -> LemmaIndex:
        """Build from a (lemma, wnid) table such as ``imagenot.wordnet.noun_lemma_table``."""
        keys = normalise(table.column("lemma")).combine_chunks()
        pairs = pa.table({"key": keys, "wnid": table.column("wnid")})
        pairs = pairs.filter(pc.greater(pc.utf8_length(pairs.column("key")), 0))
        pairs = (
            pairs.group_by(["key", "wnid"])
            .aggregate([])
            .sort_by([("key", "ascending"), ("wnid", "ascending")])
        )
        wnids = pc.unique(pairs.column("wnid")).sort()
        wnid_idx = pc.index_in(pairs.column("wnid"), value_set=wnids).to_numpy().astype(np.int32)
        key_col = pairs.column("key").to_pylist()
        starts = [0] + [i for i in range(1, len(key_col)) if key_col[i] != key_col[i - 1]]
        keys_unique = [key_col[i] for i in starts]
        key_ptr = np.array([*starts, len(key_col)], dtype=np.int64)
        return cls(keys_unique, key_ptr, wnid_idx, wnids)

    @classmethod
    def from_wordnet(cls, nltk_data: str | os.PathLike) -> LemmaIndex:
        from imagenot.wordnet import load_wordnet, noun_lemma_table

        return cls.from_lemma_table(noun_lemma_table(load_wordnet(str(nltk_data))))


class Matcher:
    """A compiled Aho-Corasick automaton over the padded lemma keys of a LemmaIndex."""

    def __init__(self, index: LemmaIndex):
        import ahocorasick

        self.index = index
        automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS)
        for i, key in enumerate(index.keys):
            automaton.add_word(f" {key} ", i)
        automaton.make_automaton()
        self.automaton = automaton

    def match_arrays(self, texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """Unique (position in ``texts``, wnid index) pairs, sorted, as two NumPy arrays."""
        if len(texts) == 0:
            return np.empty(0, np.int64), np.empty(0, np.int32)
        norm = normalise(texts)
        padded = pc.binary_join_element_wise(" ", norm, " " + SEPARATOR, "")
        # Code-point offsets of each padded caption inside the joined string.
        lengths = pc.utf8_length(padded).to_numpy(zero_copy_only=False).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        joined = _join(padded)
        flat = np.fromiter(
            itertools.chain.from_iterable(self.automaton.iter(joined)), dtype=np.int64
        )
        ends, key_ids = flat[0::2], flat[1::2]
        pos = np.searchsorted(starts, ends, side="right") - 1
        counts = np.diff(self.index.key_ptr)[key_ids]
        pos = np.repeat(pos, counts)
        first = self.index.key_ptr[key_ids]
        within = np.arange(len(pos)) - np.repeat(np.cumsum(counts) - counts, counts)
        wnid = self.index.wnid_idx[np.repeat(first, counts) + within]
        code = np.sort(pos * len(self.index.wnids) + wnid)  # sort + diff: faster than np.unique
        code = code[np.concatenate([[True], code[1:] != code[:-1]])] if len(code) else code
        return code // len(self.index.wnids), (code % len(self.index.wnids)).astype(np.int32)


def _join(padded: pa.Array) -> str:
    """All values of a string array concatenated, decoded once from Arrow's data buffer."""
    arr = padded.combine_chunks() if isinstance(padded, pa.ChunkedArray) else padded
    offsets_type = np.int64 if arr.type == pa.large_string() else np.int32
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offsets_type)[arr.offset : arr.offset + len(arr) + 1]
    data = buffers[2]
    return data.to_pybytes()[offsets[0] : offsets[-1]].decode("utf-8")


def match_table(
    rows: np.ndarray, positions: np.ndarray, wnid_idx: np.ndarray, index: LemmaIndex
) -> pa.Table:
    """The matches contract table: ``row`` int64 (shard row) and ``wnid`` string."""
    return pa.table(
        {
            "row": pa.array(rows[positions].astype(np.int64)),
            "wnid": index.wnids.take(pa.array(wnid_idx)),
        }
    )


def match_shard(
    path: str | os.PathLike,
    matcher: Matcher,
    batch_rows: int = 262144,
    max_caption_bytes: int = 16384,
    progress: bool = True,
    require_url: bool = True,
) -> tuple[pa.Table, dict]:
    """Match one shard: (matches table sorted by row then wnid, stats dict)."""
    from tqdm import tqdm

    from imagenot.curate.shards import SkipCounts, iter_captions, open_shard

    required = ("URL", "TEXT") if require_url else ("TEXT",)
    total = open_shard(path, required).metadata.num_rows
    counts = SkipCounts()
    parts: list[pa.Table] = []
    with tqdm(
        total=total, unit="caption", desc=f"match {os.path.basename(path)}", disable=not progress
    ) as bar:
        for rows, texts, batch_counts in iter_captions(
            path, batch_rows, max_caption_bytes, required
        ):
            positions, wnid_idx = matcher.match_arrays(texts)
            parts.append(match_table(rows, positions, wnid_idx, matcher.index))
            counts.add(batch_counts)
            bar.update(batch_counts.rows)
    schema = pa.schema([("row", pa.int64()), ("wnid", pa.string())])
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    stats = counts.as_dict()
    stats["captions"] = stats["rows"] - sum(stats["skipped"].values())
    stats["matches"] = table.num_rows
    stats["matched_captions"] = len(pc.unique(table.column("row"))) if table.num_rows else 0
    return table, stats
