"""Caption and lemma text for step 1 (matching): cleaning, normalisation and the tokeniser.

Normalisation rule, applied identically to lemmas and captions:

0. web text is cleaned first (``clean_web_text``): HTML entities are decoded (``&amp;`` ->
   ``&``, ``&#233;`` -> ``é``: web captions are often scraped HTML), Unicode compatibility forms
   are folded (NFKD: ``ﬁ`` -> ``fi``, full-width ``ＤＯＧ`` -> ``DOG``) and combining marks are
   dropped (``café``, written either way, -> ``cafe``, as WordNet spells it), then NFC. Only
   captions holding a non-ASCII character or a character reference (``&#``, ``&`` + letter)
   can change, so the rest skip it, and the others are folded together as one string;
1. lowercase (Unicode-aware, Arrow's ``utf8_lower``): matching is case-insensitive, unlike
   LAIONet's case-sensitive test;
2. every run of characters that are neither letters (Unicode ``L*``) nor digits (``N*``)
   becomes one space, so punctuation, underscores, hyphens and apostrophes separate words
   (``Jack-O'-Lantern`` -> ``jack o lantern``);
3. leading and trailing spaces are stripped, and the text is padded with one space each side.

``normalise`` applies steps 1-3 to a string array (``normalise_one`` to one string); candidates
and the NSFW filter use it too. ``tokenise`` gives the words of ``normalise(texts)`` without
building the normalised strings for pure-ASCII captions (most of them), for the trie walk of
:mod:`imagenot.curate.match`: those are lowercased and split in NumPy with 256-entry byte tables
(``[A-Za-z0-9]`` are exactly the ASCII letters and digits). The others are normalised by
``normalise`` itself, then split the same way.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NON_WORD = r"[^\p{L}\p{N}]+"


def clean_one(text: str) -> str:
    """Step 0 for one text: HTML entities, compatibility forms, combining marks (see above)."""
    import html
    import unicodedata

    decomposed = unicodedata.normalize("NFKD", html.unescape(text))
    kept = "".join(c for c in decomposed if not unicodedata.combining(c))
    return unicodedata.normalize("NFC", kept)


# ``html.unescape`` changes a text only where ``&`` starts a character reference: ``&#`` or a
# named reference, and every HTML5 entity name starts with an ASCII letter.
_ENTITY = "&[#A-Za-z]"


@functools.cache
def combining_code_points() -> np.ndarray:
    """bool per Unicode code point: ``unicodedata.combining`` (the marks step 0 drops)."""
    import unicodedata

    table = np.zeros(0x110000, dtype=bool)
    table[[c for c in range(0x110000) if unicodedata.combining(chr(c))]] = True
    return table


def _fold_unicode(texts: pa.Array) -> pa.Array:
    """``clean_one`` without the entity step on a null-free string array, as one Python string.

    The texts are joined with U+0000 between them and normalised together: U+0000 is a starter
    that nothing composes with and no decomposition produces, so NFKD and NFC of the whole are
    the NFKD and NFC of each text, joined. Combining marks are dropped in NumPy with a per-code
    point table taken from ``unicodedata.combining``, then the result is split at U+0000 again.
    Texts of which one holds U+0000 itself go through ``clean_one`` one text at a time.
    """
    import unicodedata

    if pc.any(pc.match_substring(texts, "\0")).as_py():
        return pa.array([clean_one(t) for t in texts.to_pylist()], texts.type)
    folded = unicodedata.normalize("NFKD", "\0".join(texts.to_pylist()))
    points = np.frombuffer(folded.encode("utf-32-le"), dtype=np.uint32)
    points = points[~combining_code_points()[points]]
    folded = unicodedata.normalize("NFC", points.tobytes().decode("utf-32-le"))
    return pa.array(folded.split("\0"), texts.type)


def clean_web_text(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Step 0 of the rule on a string array, equal to ``clean_one`` on every text.

    Pure-ASCII texts without a character reference are left as they are; the others are
    unescaped one by one (few: ``html.unescape``), then folded together (``_fold_unicode``), so
    no Python object is made per caption for the rest.
    """
    import html

    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if len(texts) == 0:
        return texts
    entity = pc.fill_null(pc.match_substring_regex(texts, _ENTITY), False)
    needs = pc.or_(entity, pc.fill_null(pc.invert(pc.string_is_ascii(texts)), False))
    if not pc.any(needs).as_py():
        return texts
    chosen = texts.filter(needs)
    unescape = entity.filter(needs)
    if pc.any(unescape).as_py():
        unescaped = [html.unescape(t) for t in chosen.filter(unescape).to_pylist()]
        chosen = pc.replace_with_mask(chosen, unescape, pa.array(unescaped, chosen.type))
    return pc.replace_with_mask(texts, needs, _fold_unicode(chosen))


def normalise(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Lowercase, non-letter/digit runs to one space, strip (see module docstring)."""
    lowered = pc.utf8_lower(texts)
    spaced = pc.replace_substring_regex(lowered, pattern=NON_WORD, replacement=" ")
    return pc.utf8_trim(spaced, characters=" ")


def normalise_one(text: str) -> str:
    """``normalise`` for a single string."""
    return normalise(pa.array([text])).to_pylist()[0]


# Byte -> lowercased byte, or 0 for a separator. ASCII letters and digits are word bytes; bytes
# of multi-byte UTF-8 characters (>= 0x80) only reach this table in text ``normalise`` has
# already reduced to letters, digits and spaces, so all of them belong to words.
_BYTE_TABLE = np.zeros(256, dtype=np.uint8)
_WORD_BYTES = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)
_BYTE_TABLE[_WORD_BYTES] = _WORD_BYTES
_BYTE_TABLE[_WORD_BYTES[:26] - 32] = _WORD_BYTES[:26]  # A-Z lowercased
_BYTE_TABLE[0x80:] = np.arange(0x80, 0x100, dtype=np.uint8)
_LOWER = _BYTE_TABLE.tobytes()  # for ``bytes.translate``, which runs at memcpy-like speed
_SEPARATORS = bytes(np.flatnonzero(_BYTE_TABLE == 0).astype(np.uint8))
_IS_WORD = (_BYTE_TABLE != 0).astype(np.uint8).tobytes()  # 0 / 1, viewed as NumPy bool


def string_array(texts: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One string (or large_string) array without nulls (a null caption matches nothing)."""
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if texts.type not in (pa.string(), pa.large_string()):
        texts = texts.cast(pa.large_string() if texts.type == pa.large_binary() else pa.string())
    if texts.null_count:
        texts = pc.fill_null(texts, "")
    return texts


def _split_words(texts: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """Words of ASCII or already normalised texts: (words, index of the text of each word).

    A word is a maximal run of bytes that ``_BYTE_TABLE`` keeps, lowercased by it. Each text
    gets one separator appended first, so words never span two texts; they come in text order.
    """
    n = len(texts)
    space, nothing = pa.scalar(" ", texts.type), pa.scalar("", texts.type)
    texts = pc.binary_join_element_wise(texts, space, nothing)
    _, offsets_buffer, buffer = texts.buffers()
    offsets_type = np.int64 if texts.type == pa.large_string() else np.int32
    offsets = np.frombuffer(offsets_buffer, offsets_type)[texts.offset : texts.offset + n + 1]
    first, size = int(offsets[0]), int(offsets[-1] - offsets[0])
    raw = buffer.slice(first, size).to_pybytes()
    word = np.frombuffer(raw.translate(_IS_WORD), dtype=np.bool_)
    change = np.empty(size, dtype=bool)
    change[0] = word[0]
    np.not_equal(word[1:], word[:-1], out=change[1:])
    bounds = np.flatnonzero(change)  # start, end, start, end, ... (a separator ends each text)
    starts, ends = bounds[0::2], bounds[1::2]
    chars = raw.translate(_LOWER, _SEPARATORS)  # the words' bytes, lowercased, back to back
    word_offsets = np.empty(len(starts) + 1, dtype=np.int64)
    word_offsets[0] = 0
    np.cumsum(ends - starts, out=word_offsets[1:])
    words_type = pa.large_string()
    if len(chars) < 2**31:
        words_type, word_offsets = pa.string(), word_offsets.astype(np.int32)
    words = pa.Array.from_buffers(
        words_type, len(starts), [None, pa.py_buffer(word_offsets), pa.py_buffer(chars)]
    )
    per_text = np.diff(np.searchsorted(starts, offsets - first))
    return words, np.repeat(np.arange(n, dtype=np.int64), per_text)


def tokenise(texts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, np.ndarray]:
    """Words of ``normalise(texts)`` (split at its spaces) and the position of each word's text.

    Words come in text order, and in order within a text. Pure-ASCII texts are split directly
    (lowercase, ``[^a-z0-9]`` separates: the same result as ``normalise`` for ASCII); the others
    are normalised by ``normalise`` itself, then split the same way.
    """
    texts = string_array(texts)
    if len(texts) == 0:
        return pa.array([], pa.string()), np.empty(0, np.int64)
    ascii_mask = pc.string_is_ascii(texts)
    if not pc.all(ascii_mask).as_py():
        unicode_mask = pc.invert(ascii_mask)
        normalised = normalise(texts.filter(unicode_mask))
        texts = pc.replace_with_mask(texts, unicode_mask, normalised)
    return _split_words(texts)
