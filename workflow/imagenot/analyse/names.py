"""Model and dataset names that print alike: the look-alike checks of the rankings toolbox.

Two names are the same to a reader when they print alike (Unicode forms, invisible characters,
Cyrillic or Greek letters drawn like Latin ones); the reader (:mod:`imagenot.analyse.table`)
and the checks (:mod:`imagenot.analyse.checks`) refuse such pairs, and the report warns of
names that differ only in case or spaces.
"""

from __future__ import annotations

import re

LOOK_ALIKES = str.maketrans(
    {
        **dict(zip("АВСЕНІЈКМОРЅТХУԜԚӀ", "ABCEHIJKMOPSTXYWQI", strict=True)),  # Cyrillic
        **dict(zip("асеһіјӏорԛѕԝхуԁ", "acehijlopqswxyd", strict=True)),  # Cyrillic
        **dict(zip("ΑΒΕΖΗΙΚΜΝΟΡΤΥΧ", "ABEZHIKMNOPTYX", strict=True)),  # Greek
        **dict(zip("αικνορυχ", "aikvopux", strict=True)),  # Greek
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2212", "-"),  # dashes, minus: hyphen-minus
    }
)
"""Letters drawn like Latin ones in common fonts (Cyrillic and Greek capitals and small letters,
dashes like the hyphen-minus): a subset of Unicode's confusables (UTS #39, confusables.txt),
the look-alikes a name copied from a PDF or typed on another keyboard carries."""


def name_skeleton(name: str) -> str:
    """What ``name`` looks like when printed: compatibility-normalised (NFKC: NFC and NFD alike,
    full-width letters as their ASCII), without invisible format characters (zero-width space
    and joiners, byte-order mark, direction marks: Unicode category Cf), look-alike letters as
    the Latin ones (:data:`LOOK_ALIKES`). Two names with one skeleton print alike."""
    import unicodedata

    visible = "".join(ch for ch in name if unicodedata.category(ch) != "Cf")
    return unicodedata.normalize("NFKC", visible).translate(LOOK_ALIKES)


def _difference(a: str, b: str) -> str:
    """How two names that print alike differ, in words."""
    import unicodedata

    def shown(ch: str) -> str:
        return f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed character')}"

    if unicodedata.normalize("NFC", a) == unicodedata.normalize("NFC", b):
        forms = [f for f in ("NFC", "NFD") if unicodedata.is_normalized(f, a)]
        other = [f for f in ("NFC", "NFD") if unicodedata.is_normalized(f, b)]
        return (
            f"the same letters in two Unicode forms ({'/'.join(forms) or 'mixed'} and "
            f"{'/'.join(other) or 'mixed'}: an accent as one character or as a letter and a "
            "combining mark)"
        )
    hidden = [ch for ch in a + b if unicodedata.category(ch) == "Cf"]
    if hidden:
        return f"one holds the invisible character {shown(hidden[0])}"
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    if i < len(a) and i < len(b):
        return f"character {i + 1} is {shown(a[i])} in one, {shown(b[i])} in the other"
    return "their characters differ where they print alike"


def names_alike(names: list[str]) -> list[tuple[str, str, str]]:
    """Pairs of distinct names in ``names`` that print alike (one :func:`name_skeleton`), each
    with how they differ: (first, second, difference), in the order the names come."""
    first: dict[str, str] = {}
    pairs = []
    for name in dict.fromkeys(names):
        key = name_skeleton(name)
        if key in first:
            pairs.append((first[key], name, _difference(first[key], name)))
        else:
            first[key] = name
    return pairs


def alike_problem(names, shown) -> str | None:
    """Where two distinct ``names`` print alike (:func:`names_alike`): the first pair, each as
    ``shown(name)`` says it, how they differ and what to do; else None."""
    alike = names_alike(list(names))
    if not alike:
        return None
    a, b, why = alike[0]
    more = f" ({len(alike)} such pairs)" if len(alike) > 1 else ""
    return (
        f"{shown(a)} and {shown(b)} print alike but are different text ({why}){more}: write "
        "both the same way, or rename one"
    )


def alike_hint(name: str, names: list[str]) -> str:
    """Where ``name`` (typed as an option) is not among ``names`` but prints like one of them,
    a clause saying so and how they differ; else ''."""
    pairs = [(b, why) for a, b, why in names_alike([name, *names]) if a == name]
    if not pairs:
        return ""
    return f" ({pairs[0][0]!r} of the table prints alike but is different text: {pairs[0][1]})"


def near_duplicate_models(models: list[str]) -> list[list[str]]:
    """Groups of distinct model names equal up to case, spaces, '-' and '_' (likely typos)."""
    groups: dict[str, list[str]] = {}
    for m in models:
        groups.setdefault(re.sub(r"[\s_\-]+", "", m.casefold()), []).append(m)
    return [g for g in groups.values() if len(g) > 1]
