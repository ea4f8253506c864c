"""Step 1 (lemma matching) and shard validation."""

from __future__ import annotations

import unicodedata

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imagenot.curate import match as match_module
from imagenot.curate.match import LemmaIndex, Matcher, match_shard
from imagenot.curate.settings import MatchSettings
from imagenot.curate.shards import ShardError, clean_captions, open_shard
from imagenot.curate.text import normalise, normalise_one, tokenise


def _settings(**laion) -> MatchSettings:
    """The rule's match settings for a config whose ``laion`` section sets ``laion``."""
    from imagenot.core.config import validate_config

    return MatchSettings.from_config(validate_config({"laion": laion}))


@pytest.fixture(scope="module")
def lemma_table(wn):
    from imagenot.core.wordnet import noun_lemma_table

    return noun_lemma_table(wn)


@pytest.fixture(scope="module")
def matcher(lemma_table):
    return Matcher(LemmaIndex.from_lemma_table(lemma_table))


def reference_clean(text: str) -> str:
    """Independent web-text cleaning: entities, compatibility forms, combining marks."""
    import html

    text = unicodedata.normalize("NFKD", html.unescape(text))
    return unicodedata.normalize("NFC", "".join(c for c in text if not unicodedata.combining(c)))


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
        tokens = tuple(reference_tokens(reference_clean(lemma)))
        if tokens:
            synsets.setdefault(tokens, set()).add(wnid)
    longest = max(len(k) for k in synsets)
    out = set()
    for row, caption in enumerate(captions):
        tokens = reference_tokens(reference_clean(caption))
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


def test_matches_reference_caption_by_caption(web_captions, matcher, lemma_table, tmp_path):
    path = web_captions
    table, stats = match_shard(path, matcher, _settings(batch_rows=300), progress=False)
    captions = pq.read_table(path, columns=["TEXT"]).column("TEXT").to_pylist()
    expected = reference_matches(captions, lemma_table)
    got = set(zip(table.column("row").to_pylist(), table.column("wnid").to_pylist(), strict=True))
    for row in range(len(captions)):
        mine = {w for r, w in got if r == row}
        ref = {w for r, w in expected if r == row}
        assert mine == ref, f"row {row}: {captions[row]!r}"
    assert stats["rows"] == 1000 and stats["matches"] == len(got) > 1000


def test_written_matches_read_back_as_matched(web_captions, matcher, tmp_path):
    from imagenot.curate.match import write_matches

    path = web_captions
    table, _ = match_shard(path, matcher, _settings(batch_rows=300), progress=False)
    assert table.column("wnid").num_chunks > 1  # one shared dictionary across batches
    out = tmp_path / "matches.parquet"
    write_matches(table, out)
    back = pq.read_table(out)
    assert back.column("row").equals(table.column("row"))
    assert back.column("wnid").to_pylist() == table.column("wnid").to_pylist()
    assert back.schema.field("wnid").type == pa.string()


def test_bad_and_skipped_captions_are_counted(matcher, tmp_path):
    text = pa.array(
        [b"a red fox", None, b"   ", b"\xff\xfe broken fox", b"fox " * 300_000, b"fox"],
        pa.binary(),
    )
    path = tmp_path / "shard.parquet"
    pq.write_table(pa.table({"URL": pa.array(["u"] * 6), "TEXT": text}), path)
    table, stats = match_shard(path, matcher, _settings(), progress=False)
    assert stats["skipped"] == {"null": 1, "empty": 1, "invalid_utf8": 1, "too_long": 1}
    assert stats["captions"] == 2
    assert sorted(set(table.column("row").to_pylist())) == [0, 5]


def test_clean_captions_keeps_row_indices():
    rows, texts, counts = clean_captions(pa.array(["x", None, "", "y"]), _settings())
    assert rows.tolist() == [0, 3] and texts.to_pylist() == ["x", "y"] and counts.rows == 4


def test_blank_captions_are_whitespace_of_any_script():
    """Whitespace-only captions (ASCII, ideographic U+3000, no-break U+00A0, line separator
    U+2028) are skipped as empty; every row usable keeps the column as it is."""
    raw = ["\u3000\u00a0", "\t\n ", "a\u3000b", "\u2028", "dog"]
    rows, texts, counts = clean_captions(pa.array(raw), _settings())
    assert rows.tolist() == [2, 4] and texts.to_pylist() == ["a\u3000b", "dog"]
    assert counts.skipped["empty"] == 3
    rows, texts, counts = clean_captions(pa.array(["dog", "a cat"], pa.large_string()), _settings())
    assert rows.tolist() == [0, 1] and texts.type == pa.large_string()
    assert texts.to_pylist() == ["dog", "a cat"] and counts.skipped["empty"] == 0


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


# The column layouts of the LAION releases the workflow reads (and img2dataset's output).
RELEASE_LAYOUTS = {
    "laion400m": ["SAMPLE_ID", "URL", "TEXT", "HEIGHT", "WIDTH", "LICENSE", "NSFW", "similarity"],
    "laion2b_en": ["SAMPLE_ID", "URL", "TEXT", "HEIGHT", "WIDTH", "LICENSE", "NSFW", "similarity"],
    "laion2b_joined": [
        "URL",
        "TEXT",
        "WIDTH",
        "HEIGHT",
        "similarity",
        "hash",
        "punsafe",
        "pwatermark",
    ],
    "relaion": ["url", "caption", "width", "height", "similarity", "punsafe", "pwatermark"],
    "img2dataset": ["url", "caption", "key", "status", "error_message", "width", "height"],
}


@pytest.mark.parametrize("layout", sorted(RELEASE_LAYOUTS))
def test_every_laion_release_maps_by_one_rule_without_warnings(layout, caplog):
    from imagenot.curate.shards import LAION_COLUMNS, column_names, normal_column_name

    names = RELEASE_LAYOUTS[layout]
    with caplog.at_level("WARNING"):
        found = column_names("s.parquet", names)
    assert not caplog.records
    assert {"URL", "TEXT"} <= set(found)
    for canonical, stored in found.items():  # the same rule for every column: a spelling of it
        assert normal_column_name(stored) in map(normal_column_name, LAION_COLUMNS[canonical])


@pytest.mark.parametrize(
    ("column", "like"),
    [
        ("capton", "TEXT"),
        ("Url_", None),
        ("p-unsafe", None),
        ("punsafe_score", "punsafe"),
        ("NSFW_tag", "NSFW"),
        ("texts", "TEXT"),
        ("URLS", "URL"),
    ],
)
def test_a_column_like_a_known_one_is_read_or_warned_about(tmp_path, caplog, column, like):
    """Case, `_ - .` and spaces never matter; a near miss is a warning naming the column."""
    from imagenot.curate.shards import column_names

    with caplog.at_level("WARNING"):
        found = column_names("s.parquet", ["URL", "TEXT", column] if like else ["TEXT", column])
    if like is None:
        assert column in found.values() and not caplog.records
    else:
        assert column not in found.values()
        [record] = caplog.records
        assert repr(column) in record.getMessage()
        assert f"the {like} column" in record.getMessage()


def test_two_spellings_of_one_column_are_refused(tmp_path):
    path = tmp_path / "both.parquet"
    pq.write_table(pa.table({"URL": ["u"], "url": ["v"], "TEXT": ["t"]}), path)
    with pytest.raises(ShardError, match=r"both\.parquet: columns 'URL' and 'url' are both"):
        open_shard(path)


def test_caption_and_url_spellings_are_read_as_text_and_url(tmp_path):
    from imagenot.curate.shards import iter_captions

    path = tmp_path / "relaion.parquet"
    pq.write_table(pa.table({"url": ["a", "b"], "Caption": ["a dog", " "]}), path)
    [(rows, texts, counts)] = list(iter_captions(path, _settings()))
    assert rows.tolist() == [0] and texts.to_pylist() == ["a dog"]
    assert counts.skipped["empty"] == 1


def test_match_cli_writes_row_wnid(nltk_data, tmp_path):
    from imagenot.cli import main

    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"URL": ["a", "b"], "TEXT": ["zzzq qqxzw", "a tabby cat"]}), src)
    out = tmp_path / "out.parquet"
    assert main(["match", str(src), "--matches", str(out), "--nltk-data", str(nltk_data)]) == 0
    table = pq.read_table(out)
    assert table.schema == pa.schema([("row", pa.int64()), ("wnid", pa.string())])
    assert set(table.column("row").to_pylist()) == {1}
    assert "n02121620" in table.column("wnid").to_pylist()
    assert np.all(np.diff(table.column("row").to_numpy()) >= 0)


def test_match_cli_takes_any_parquet_with_text(nltk_data, tmp_path, caplog):
    """Only TEXT is needed (other columns ignored); the workflow's --require-url asks for URL."""
    from imagenot.cli import main
    from imagenot.curate.shards import ShardError

    src = tmp_path / "text-only.parquet"
    pq.write_table(pa.table({"id": [7, 8], "TEXT": ["a tabby cat", "zzqx"]}), src)
    out = tmp_path / "out.parquet"
    assert main(["match", str(src), "--matches", str(out), "--nltk-data", str(nltk_data)]) == 0
    assert set(pq.read_table(out).column("row").to_pylist()) == {0}
    refused = tmp_path / "refused.parquet"
    args = [
        "match",
        str(src),
        "--matches",
        str(refused),
        "--nltk-data",
        str(nltk_data),
        "--require-url",
    ]
    with pytest.raises(ShardError, match=r"text-only\.parquet.*URL"):  # the traceback with --debug
        main(["--debug", *args])
    assert main(args) == 2  # one line on stderr, no traceback
    assert not refused.exists()


def test_match_cli_reads_the_lemma_table_like_wordnet(nltk_data, tmp_path):
    from imagenot.cli import main

    src = tmp_path / "in.parquet"
    texts = ["a tabby cat on a mat", "New York skyline", "nothing here zzqx"]
    pq.write_table(pa.table({"URL": ["a", "b", "c"], "TEXT": texts}), src)
    lemmas = tmp_path / "lemmas.parquet"
    assert main(["lemmas", "--nltk-data", str(nltk_data), "--lemmas", str(lemmas)]) == 0
    outputs = {}
    for how in (["--lemmas", str(lemmas)], ["--nltk-data", str(nltk_data)]):
        out = tmp_path / f"{how[0][2:]}.parquet"
        assert main(["match", str(src), "--matches", str(out), *how]) == 0
        outputs[how[0]] = pq.read_table(out)
    assert outputs["--lemmas"].equals(outputs["--nltk-data"])
    assert outputs["--lemmas"].num_rows > 0


def test_a_table_without_lemmas_is_named(tmp_path):
    from imagenot.curate.match import read_lemma_table

    path = tmp_path / "not-lemmas.parquet"
    pq.write_table(pa.table({"word": ["cat"]}), path)
    with pytest.raises(ValueError, match=r"not-lemmas\.parquet: lacks column\(s\) lemma, wnid"):
        read_lemma_table(path)


def test_normalise_matches_reference_on_array():
    texts = ["Ångström-unit", "ROCK'n'roll", "x_y"]
    assert normalise(pa.array(texts)).to_pylist() == [" ".join(reference_tokens(t)) for t in texts]


UNICODE_SAMPLES = [
    "İstanbul Kelvin\u212a",  # dotted capital I, Kelvin sign: lowercasing changes byte length
    "ǅemal ǆ",  # title-case digraph
    "ⅫⅠ roman",  # letter-like numbers (Nl)
    "a\u0301b",  # combining accent (Mn) separates
    "x²y ٣٤ ৫",  # superscript, Arabic-Indic and Bengali digits
    "🐱cat🐶dog",
    "ÀB-CD_éF",
    "ΣΑΣ σας",
    "Straße ẞ",
    "ﬁne ﬀ",
    "\u00a0hot\u2003dog\u3000",  # Unicode spaces
]


def _words_by_text(texts) -> list[str]:
    words, parent = tokenise(texts)
    out: list[list[str]] = [[] for _ in range(len(texts))]
    for word, i in zip(words.to_pylist(), parent.tolist(), strict=True):
        out[i].append(word)
    return [" ".join(w) for w in out]


@pytest.mark.parametrize("string_type", [pa.string(), pa.large_string()])
def test_tokenise_equals_normalise_split(string_type):
    texts = [
        *UNICODE_SAMPLES,
        "  A Hot-Dog, NEW_York!! ",
        "Jack-O'-Lantern",
        "",
        "   ",
        "!!!",
        "end",
        "start",
        "tab\tand\nnewline",
        "MiXeD 123abc ABC123",
    ]
    array = pa.array(texts, string_type)
    for part in (array, array.slice(3, 9), pa.chunked_array([array.slice(0, 5), array.slice(5)])):
        expected = normalise(part).to_pylist()
        assert _words_by_text(part) == expected
    # each text's words stay within it: 'end' + 'start' are two texts, not one word
    assert _words_by_text(pa.array(["ho", "t dog"])) == ["ho", "t dog"]


def test_random_captions_match_reference(matcher, lemma_table, monkeypatch):
    """Lemma keys (multi-word ones up to the longest) glued with random separators, case and
    Unicode noise, matched in small chunks; compared caption by caption with the reference."""
    rng = np.random.default_rng(3)
    lemmas = lemma_table.column("lemma").to_pylist()
    lemmas = [lemma.replace("_", " ") for lemma in lemmas]
    longest = max(lemmas, key=lambda x: len(reference_tokens(x)))
    multi = [x for x in lemmas if len(reference_tokens(x)) >= 2]
    seps = [" ", "  ", ", ", "-", "_", "'", "/", ". ", "\u00a0", "—", "🐶", "\u0301", "²"]
    # (no 'İ' here: Python's lower() gives 'i' + a combining dot, Arrow's gives 'i'; the
    # normalisation tests above pin Arrow's rule)
    noise = ["Ünïcode", "ÉCOLE", "σας", "naïve", "x", "ZZQX", "ǅ", "١٢"]
    captions = []
    for _ in range(600):
        parts = []
        for _word in range(int(rng.integers(0, 8))):
            kind = rng.random()
            if kind < 0.4:
                word = lemmas[int(rng.integers(len(lemmas)))]
            elif kind < 0.7:
                word = multi[int(rng.integers(len(multi)))]
            elif kind < 0.75:
                word = longest
            else:
                word = noise[int(rng.integers(len(noise)))]
            word = word.upper() if rng.random() < 0.2 else word
            parts.append(word)
            parts.append(seps[int(rng.integers(len(seps)))])
        captions.append("".join(parts[:-1]) if parts and rng.random() < 0.5 else "".join(parts))
    # a two-word lemma split across consecutive captions must not match
    captions += ["a hot", "dog", "hot", "dog stand"]
    monkeypatch.setattr(match_module, "CHUNK_ROWS", 37)
    monkeypatch.setattr(match_module, "TOKENISE_ROWS", 150)
    pos, w = matcher.match_arrays(pa.array(captions))
    got = set(zip(pos.tolist(), matcher.index.wnids.take(pa.array(w)).to_pylist(), strict=True))
    expected = reference_matches(captions, lemma_table)
    for row in range(len(captions)):
        assert {x for r, x in got if r == row} == {x for r, x in expected if r == row}, (
            f"row {row}: {captions[row]!r}"
        )
    code = pos * len(matcher.index.wnids) + w
    assert np.all(np.diff(code) > 0)  # unique pairs, sorted by row then wnid
    hot_dog = {r for r, x in got if x == "n07697537"}
    assert hot_dog.isdisjoint(range(len(captions) - 4, len(captions)))


def test_tokenise_random_unicode_equals_normalise():
    """Random code points from every plane: the byte-table path agrees with the regex."""
    rng = np.random.default_rng(7)
    pool = np.concatenate([np.arange(32, 127), rng.integers(0x80, 0x110000, 3000)])
    pool = pool[(pool < 0xD800) | (pool > 0xDFFF)]
    texts = [
        "".join(chr(int(c)) for c in rng.choice(pool, int(rng.integers(0, 25))))
        for _ in range(3000)
    ]
    assert _words_by_text(pa.array(texts)) == normalise(pa.array(texts)).to_pylist()


def test_match_arrays_edge_cases(matcher):
    empty_pos, empty_w = matcher.match_arrays(pa.array([], pa.string()))
    assert empty_pos.dtype == np.int64 and empty_w.dtype == np.int32 and len(empty_pos) == 0
    pos, w = matcher.match_arrays(pa.array([None, "", "zzqx qqxzw", None, "a cat"]))
    assert set(pos.tolist()) == {4}
    idx = matcher.index
    assert "n02121620" in idx.wnids.take(pa.array(w)).to_pylist()


def test_small_lemma_index():
    table = pa.table(
        {
            "lemma": ["hot_dog", "dog", "Dog", "hot", "New_York_City", "frank"],
            "wnid": ["n1", "n2", "n2", "n3", "n4", "n1"],
        }
    )
    m = Matcher(LemmaIndex.from_lemma_table(table))
    texts = pa.array(["Hot dog, frank!", "new york", "NEW-YORK city dog", "hotdog"])
    pos, w = m.match_arrays(texts)
    pairs = list(zip(pos.tolist(), m.index.wnids.take(pa.array(w)).to_pylist(), strict=True))
    assert pairs == [(0, "n1"), (0, "n2"), (0, "n3"), (2, "n2"), (2, "n4")]


def test_streamed_matches_equal_in_memory_and_count_per_wnid(web_captions, matcher, tmp_path):
    """The workflow's streamed writer (one row group per batch, memory bounded by the batch) gives
    the in-memory table whatever the batch size, also with skipped captions inside a batch; the
    per-wnid counts (the class-count scatter) are the matched captions per synset."""
    from imagenot.curate.match import write_shard_matches

    texts = pq.read_table(web_captions, columns=["TEXT"])
    text = texts.column("TEXT").to_pylist()
    text[5], text[400] = None, "   "  # skipped rows: batches are no longer contiguous
    path = tmp_path / "shard.parquet"
    pq.write_table(pa.table({"URL": ["u"] * len(text), "TEXT": text}), path)
    table, stats = match_shard(path, matcher, _settings(batch_rows=1000), progress=False)
    for batch_rows in (1000, 128, 7):
        out = tmp_path / f"m{batch_rows}.parquet"
        streamed = write_shard_matches(path, matcher, out, _settings(batch_rows=batch_rows), False)
        back = pq.read_table(out)
        assert back.column("row").to_pylist() == table.column("row").to_pylist()
        assert back.column("wnid").to_pylist() == table.column("wnid").to_pylist()
        counts = streamed.pop("counts")
        assert streamed == stats
        expected = {}
        for wnid in table.column("wnid").to_pylist():
            expected[wnid] = expected.get(wnid, 0) + 1
        assert counts == expected
    assert pq.ParquetFile(tmp_path / "m7.parquet").metadata.num_row_groups > 100


def test_web_text_rule_on_entities_compatibility_forms_and_accents(matcher, tmp_path):
    from imagenot.curate.text import clean_web_text

    raw = [
        "Fish &amp; Chips at the caf&eacute;",
        "ＤＯＧ on a beach",  # full-width letters
        "cafe\u0301 terrace",  # e + combining acute accent
        "plain ascii dog",
        None,
    ]
    cleaned = clean_web_text(pa.array(raw)).to_pylist()
    assert cleaned == ["Fish & Chips at the cafe", "DOG on a beach", "cafe terrace", raw[3], None]
    path = tmp_path / "web.parquet"
    pq.write_table(pa.table({"URL": ["u"] * 4, "TEXT": raw[:4]}), path)
    table, _ = match_shard(path, matcher, _settings(), progress=False)
    found = set(zip(table.column("row").to_pylist(), table.column("wnid").to_pylist(), strict=True))
    dog = "n02084071"
    assert (1, dog) in found and (3, dog) in found  # full-width DOG matches like dog
    cafe = {w for r, w in found if r == 0} & {w for r, w in found if r == 2}
    assert cafe  # café (entity) and café (combining accent) match the same lemma, 'cafe'


@pytest.mark.parametrize("string_type", [pa.string(), pa.large_string()])
def test_web_text_cleaned_together_equals_text_by_text(web_captions, string_type):
    """``clean_web_text`` folds all non-ASCII texts as one string; it must equal the rule applied
    to each text alone: real web captions, random code points from every plane (marks, Hangul
    jamo that compose, compatibility forms), references that turn ASCII into non-ASCII, '&'
    that starts no reference, and U+0000 inside a text (the separator of the fast path)."""
    from imagenot.curate.text import clean_web_text

    web = pq.read_table(web_captions).column("TEXT").to_pylist()
    rng = np.random.default_rng(11)
    pool = np.concatenate(
        [np.arange(32, 127), np.arange(0x300, 0x370), np.arange(0x1100, 0x1176), [0x26] * 20]
    )
    pool = np.concatenate([pool, rng.integers(0x80, 0x110000, 2000)])
    pool = pool[(pool < 0xD800) | (pool > 0xDFFF)]
    random = [
        "".join(chr(int(c)) for c in rng.choice(pool, int(rng.integers(0, 30))))
        for _ in range(2000)
    ]
    crafted = ["AT&T & co", "caf&eacute; &#x301;x &amp", "\u1100\u1161 jamo", "ﬁsh", None, ""]
    texts = web + random + crafted
    expected = [None if t is None else reference_clean(t) for t in texts]
    assert clean_web_text(pa.array(texts, string_type)).to_pylist() == expected
    with_nul = ["a\u0000b cafe\u0301", "e\u0301", "plain"]
    assert clean_web_text(pa.array(with_nul, string_type)).to_pylist() == [
        reference_clean(t) for t in with_nul
    ]
    sliced = pa.array(texts, string_type).slice(500, 1200)
    assert clean_web_text(sliced).to_pylist() == expected[500:1700]


def test_many_synsets_keep_codes_within_32_bits(monkeypatch):
    """With 300,000 synsets a chunk holds at most 2**32 // 300,000 = 14,316 captions, so that
    row * n_synsets + wnid stays within the 32-bit codes ``_expand`` sorts; matches across
    several chunks (and the highest wnid indices) equal a direct lookup."""
    n = 300_000
    table = pa.table(
        {"lemma": [f"w{i}" for i in range(n)], "wnid": [f"n{i:08d}" for i in range(n)]}
    )
    m = Matcher(LemmaIndex.from_lemma_table(table))
    monkeypatch.setattr(match_module, "CHUNK_ROWS", 10**9)
    monkeypatch.setattr(match_module, "TOKENISE_ROWS", 40_000)
    rng = np.random.default_rng(3)
    picks = rng.integers(n - 1000, n, size=(35_000, 3))  # the highest wnid indices
    captions = [f"w{a} and w{b}, w{a} w{c}" for a, b, c in picks.tolist()]
    pos, w = m.match_arrays(pa.array(captions))
    got = list(zip(pos.tolist(), m.index.wnids.take(pa.array(w)).to_pylist(), strict=True))
    expected = [
        (row, wnid)
        for row, ids in enumerate(picks.tolist())
        for wnid in sorted({f"n{i:08d}" for i in ids})
    ]
    assert got == expected
