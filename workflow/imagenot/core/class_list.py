"""Class lists: the wnids a config names by file (a dataset's ``classes: {from_file: PATH}``,
``diagnostics.class_lists``, ``diagnostics.reference_classes``), read and checked by one reader.

The curation (curate-candidates), the WordNet statistics (wordnet-stats) and the config checks
at planning (hence ``imagenot validate-config``) all read a list here, so a list a job would
refuse is refused before any job, with the same message. Kept free of heavy imports: every
Snakemake process runs the config checks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imagenot.core.io import read_parquet
from imagenot.core.paths import shipped

WNID_RE = re.compile(r"^n\d{8}$")


class ClassListError(ValueError):
    """A class list with malformed, unknown or repeated ids; the message names each line."""


@dataclass(frozen=True)
class ClassEntry:
    """One class of a list: its wnid and the line it came from (1-based)."""

    wnid: str
    line: int


def read_class_entries(path: str | os.PathLike) -> list[ClassEntry]:
    """Class entries of a ``.txt`` list (the first word of each line; blank lines and ``#``
    comments skipped) or of a parquet with a ``wnid`` column (``line``: the 1-based row)."""
    path = Path(path)
    if path.suffix == ".parquet":
        column = read_parquet(path, columns=["wnid"])["wnid"].to_pylist()
        return [ClassEntry(str(w).strip(), i) for i, w in enumerate(column, start=1)]
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ClassListError(f"{path}: cannot read the class list ({exc})") from None
    entries = []
    for number, line in enumerate(lines, start=1):
        words = line.split("#", 1)[0].split()
        if words:
            entries.append(ClassEntry(words[0], number))
    return entries


def check_class_entries(
    entries: Sequence[ClassEntry], source: str, wordnet_dir: str | os.PathLike | None
) -> None:
    """ClassListError naming every malformed, duplicated or unknown line of ``entries`` at once
    (unknown: no noun synset of the WordNet in ``wordnet_dir``; None: not looked up), or an
    empty list.

    The jobs that read a class list (curate-candidates, wordnet-stats) and the config checks at
    planning (hence ``imagenot validate-config``) all call this, so a list a job would refuse
    is refused before any job, with the same message.
    """
    from imagenot.core.wordnet import unknown_noun_synsets

    problems: list[tuple[int, str]] = []
    first_line: dict[str, int] = {}
    for entry in entries:
        if not WNID_RE.match(entry.wnid):
            why = f"malformed WordNet noun id {entry.wnid!r} (like 'n02084071')"
        elif entry.wnid in first_line:
            why = f"duplicate id {entry.wnid} (first on line {first_line[entry.wnid]})"
        else:
            first_line[entry.wnid] = entry.line
            continue
        problems.append((entry.line, f"{source}:{entry.line}: {why}"))
    unknown = set(unknown_noun_synsets(wordnet_dir, list(first_line)) if wordnet_dir else ())
    problems += [
        (line, f"{source}:{line}: unknown id {w} (no such WordNet 3.0 noun synset)")
        for w, line in first_line.items()
        if w in unknown
    ]
    if len(problems) == 1:
        raise ClassListError(problems[0][1])  # one bad line: one line
    if problems:
        lines = [text for _, text in sorted(problems)]
        shown = "\n".join(f"  {p}" for p in lines[:50])
        more = f"\n  ... and {len(lines) - 50} more" if len(lines) > 50 else ""
        raise ClassListError(f"{len(lines)} bad line(s) in {source}:\n{shown}{more}")
    if not entries:
        raise ClassListError(f"{source} holds no class")


def read_class_list(
    path: str | os.PathLike, wordnet_dir: str | os.PathLike | None = None
) -> list[str]:
    """wnids of a class list file, in file order, checked (:func:`check_class_entries`: each a
    noun synset of the WordNet in ``wordnet_dir`` where given)."""
    entries = read_class_entries(path)
    check_class_entries(entries, str(path), wordnet_dir)
    return [entry.wnid for entry in entries]


def config_class_list(config: dict, key: str, given: str) -> list[str]:
    """The wnids of the class-list file that config key ``key`` names (``given``: a relative
    path missing from the working directory is the clone's file), checked as the jobs that read
    it check it (:func:`read_class_list`: the same message); a missing or unreadable file is a
    ValueError naming the key."""
    from imagenot.core.wordnet import config_wordnet_dir

    path = shipped(given)
    if not Path(path).is_file():
        raise ValueError(f"config key {key}: no file {path}")
    try:
        entries = read_class_entries(path)  # refuses only a file it cannot read
    except ValueError as exc:
        raise ValueError(f"config key {key}: {exc}") from None
    try:
        check_class_entries(entries, str(path), config_wordnet_dir(config))
    except KeyError as exc:
        raise ValueError(f"config key {key}: {path}: {exc}") from None
    return [entry.wnid for entry in entries]
