"""Step 1 (lemma matching) and shard validation."""

from __future__ import annotations

import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imagenot.curate.match import LemmaIndex, Matcher, match_shard, normalise, normalise_one
from imagenot.curate.shards import ShardError, clean_captions, open_shard


@pytest.fixture(scope="module")
def lemma_table(wn):
    from imagenot.wordnet import noun_lemma_table

    return noun_lemma_table(wn)


@pytest.fixture(scope="module")
def matcher(lemma_table):
    return Matcher(LemmaIndex.from_lemma_table(lemma_table))


def reference_tokens(text: str) -> list[str]:
    """Independent normalisation: lowercase, split on every char that is not a letter/digit."""
    chars = [c if unicodedata.category(c)[0] in "LN" else " " for c in text.lower()]
    return "".join(chars).split()


def reference_matches(captions: list[str], lemma_table: pa.Table) -> set[tuple[int, str]]:
    """Word-boundary, case-insensitive matching by token n-gram lookup (no automaton)."""
    synsets: dict[tuple[str, ...], set[str]] = {}
    for lemma, wnid in zip(
        lemma_table.column("lemma").to_pylist(), lemma_table.column("wnid").to_pylist(), strict=True
    ):
        tokens = tuple(reference_tokens(lemma))
        if tokens:
            synsets.setdefault(tokens, set()).add(wnid)
    longest = max(len(k) for k in synsets)
    out = set()
    for row, caption in enumerate(captions):
        tokens = reference_tokens(caption)
        for i in range(len(tokens)):
            for n in range(1, min(longest, len(tokens) - i) + 1):
                for wnid in synsets.get(tuple(tokens[i : i + n]), ()):
                    out.add((row, wnid))
    return out


def test_normalisation_rule():
    assert normalise_one("  A Hot-Dog, NEW_York!! ") == "a hot dog new york"
    assert normalise_one("Jack-O'-Lantern") == "jack o lantern"
    assert normalise_one("Café Über") == "café über"


def test_whole_words_case_insensitive_multiword(matcher):
    idx = matcher.index
    texts = pa.array(["A HOT DOG stand", "hotdogs and catalogs", "the Cat."])
    pos, w = matcher.match_arrays(texts)
    found = set(zip(pos.tolist(), idx.wnids.take(pa.array(w)).to_pylist(), strict=True))
    assert (0, "n07697537") in found  # hot dog (the sandwich), multi-word, upper case
    assert (1, "n02121620") not in found  # 'cat' inside 'catalogs' is no match
    assert (2, "n02121620") in found  # 'Cat.' with punctuation
    # A lemma names every synset it is a lemma of: 'cat' has several noun senses.
    assert sum(1 for r, _ in found if r == 2) >= 5
    assert len(found) == len(pos)  # unique (row, wnid) pairs


def test_matches_reference_caption_by_caption(shared_data, matcher, lemma_table, tmp_path):
    path = shared_data / "web_captions_1000.parquet"
    table, stats = match_shard(path, matcher, batch_rows=300, progress=False)
    captions = pq.read_table(path, columns=["TEXT"]).column("TEXT").to_pylist()
    expected = reference_matches(captions, lemma_table)
    got = set(zip(table.column("row").to_pylist(), table.column("wnid").to_pylist(), strict=True))
    for row in range(len(captions)):
        mine = {w for r, w in got if r == row}
        ref = {w for r, w in expected if r == row}
        assert mine == ref, f"row {row}: {captions[row]!r}"
    assert stats["rows"] == 1000 and stats["matches"] == len(got) > 1000


def test_bad_and_skipped_captions_are_counted(matcher, tmp_path):
    text = pa.array(
        [b"a red fox", None, b"   ", b"\xff\xfe broken fox", b"fox " * 300_000, b"fox"],
        pa.binary(),
    )
    path = tmp_path / "shard.parquet"
    pq.write_table(pa.table({"URL": pa.array(["u"] * 6), "TEXT": text}), path)
    table, stats = match_shard(path, matcher, progress=False)
    assert stats["skipped"] == {"null": 1, "empty": 1, "invalid_utf8": 1, "too_long": 1}
    assert stats["captions"] == 2
    assert sorted(set(table.column("row").to_pylist())) == [0, 5]


def test_clean_captions_keeps_row_indices():
    rows, texts, counts = clean_captions(pa.array(["x", None, "", "y"]))
    assert rows.tolist() == [0, 3] and texts.to_pylist() == ["x", "y"] and counts.rows == 4


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"URL": ["u"]}, "required column 'TEXT' is missing"),
        ({"TEXT": ["t"]}, "required column 'URL' is missing"),
        ({"URL": ["u"], "TEXT": [3]}, "column 'TEXT' has type int64"),
    ],
)
def test_bad_shard_names_file_and_column(tmp_path, columns, message):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table(columns), path)
    with pytest.raises(ShardError, match=message) as info:
        open_shard(path)
    assert str(path) in str(info.value)


def test_match_cli_writes_row_wnid(nltk_data, tmp_path):
    from imagenot.cli import main

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"URL": ["a", "b"], "TEXT": ["zzzq qqxzw", "a tabby cat"]}), src)
    out = tmp_path / "out.parquet"
    assert main(["match", str(src), "-o", str(out), "--nltk-data", str(nltk_data)]) == 0
    table = pq.read_table(out)
    assert table.column_names == ["row", "wnid"]
    assert set(table.column("row").to_pylist()) == {1}
    assert "n02121620" in table.column("wnid").to_pylist()
    assert np.all(np.diff(table.column("row").to_numpy()) >= 0)


def test_normalise_matches_reference_on_array():
    texts = ["Ångström-unit", "ROCK'n'roll", "x_y"]
    assert normalise(pa.array(texts)).to_pylist() == [" ".join(reference_tokens(t)) for t in texts]
