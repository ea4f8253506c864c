"""Steps 1-5 of class selection: from match counts to the candidate classes, with an audit trail.

Modes (the dataset's ``classes`` key):

- ``discover``: every matched noun synset; remove ImageNet classes and synsets sharing a
  (normalised) lemma with one (step 2), those under ``min_count`` matching captions (3), those
  that are WordNet ancestors of another candidate (4: the leaves of the minimal spanning
  subtree), and NSFW class names (5).
- ``imagenet``: ImageNet's 1000 classes that occur in the captions, then steps 3-5 (LAIONet-style).
- a path: a published class list (:mod:`imagenot.core.class_list`); discovery is skipped, classes no caption
  mentions are dropped, and ancestors of other listed classes are kept but counted.

Audit rows: ``wnid``, ``name``, ``step`` (method step number), ``step_name``, ``status``
(``removed`` or ``kept``), ``reason``, ``n_captions`` (matching captions over all shards).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

import pyarrow as pa

from imagenot.core.class_list import read_class_list
from imagenot.core.io import read_parquet
from imagenot.core.paths import shipped

if TYPE_CHECKING:
    from imagenot.curate.settings import CandidatesSettings

STEP_NAMES = {
    1: "match",
    2: "imagenet_overlap",
    3: "min_count",
    4: "leaves",
    5: "nsfw",
    6: "one_synset_captions",
    7: "similarity_threshold",
    8: "top_classes",
}
AUDIT_SCHEMA = pa.schema(
    [
        ("wnid", pa.string()),
        ("name", pa.string()),
        ("step", pa.int32()),
        ("step_name", pa.string()),
        ("status", pa.string()),
        ("reason", pa.string()),
        ("n_captions", pa.int64()),
    ]
)


def sum_counts(count_files: Iterable[str | os.PathLike]) -> dict[str, int]:
    """Matching captions per wnid over all shards: the sum of the per-shard count files written by
    ``imagenot match --counts`` (gather of a scatter; one small file in memory at a time, so memory
    is bounded by the number of synsets, never by the number of shards)."""
    total: Counter[str] = Counter()
    for path in count_files:
        table = read_parquet(path, columns=["wnid", "n"])
        total.update(dict(zip(table["wnid"].to_pylist(), table["n"].to_pylist(), strict=True)))
    return dict(total)


def synset_name(synset) -> str:
    """Class name: the synset's first lemma as text."""
    return synset.lemma_names()[0].replace("_", " ")


def lemma_keys(lemma_table: pa.Table) -> dict[str, set[str]]:
    """wnid -> its normalised lemma keys."""
    from imagenot.curate.text import normalise

    keys = normalise(lemma_table.column("lemma")).to_pylist()
    out: dict[str, set[str]] = {}
    for key, wnid in zip(keys, lemma_table.column("wnid").to_pylist(), strict=True):
        out.setdefault(wnid, set()).add(key)
    return out


def imagenet_overlap(
    candidates: Iterable[str], keys_of: dict[str, set[str]], imagenet: Iterable[str]
) -> dict[str, str]:
    """Candidates that are ImageNet classes or share a lemma with one -> reason."""
    imagenet = set(imagenet)
    owner: dict[str, str] = {}
    for w in sorted(imagenet):
        for key in sorted(keys_of.get(w, ())):
            owner.setdefault(key, w)
    out = {}
    for w in candidates:
        shared = sorted(k for k in keys_of.get(w, ()) if k in owner)
        if w in imagenet:
            out[w] = "ImageNet class"
        elif shared:
            out[w] = f"shares lemma {shared[0]!r} with ImageNet {owner[shared[0]]}"
    return out


def ancestors_within(wn, wnids: Iterable[str]) -> dict[str, str]:
    """Members of ``wnids`` that are hypernyms (instance hypernyms included) of another member
    -> one such descendant (the smallest wnid). The rest are the leaves of the minimal subtree."""
    from imagenot.core.wordnet import synset_of, wnid

    members = set(wnids)
    found: dict[str, str] = {}
    for w in sorted(members):
        synset = synset_of(wn, w)
        for ancestor in synset.closure(lambda s: s.hypernyms() + s.instance_hypernyms()):
            a = wnid(ancestor)
            if a in members and a != w:
                found.setdefault(a, w)
    return found


def build_candidates(
    counts: dict[str, int],
    wn,
    settings: CandidatesSettings,
    imagenet: Iterable[str],
    lemma_table: pa.Table | None = None,
) -> tuple[pa.Table, pa.Table, dict]:
    """(candidates, audit of steps 1-5, stats) for ``settings.classes``: 'discover', 'imagenet'
    or a class list file; ``min_count``, ``query_template`` and ``nsfw`` are ``settings``'.

    Stats: ``mode``, ``universe`` (synsets considered at step 1), ``ancestors_in_list``."""
    mode, min_count = settings.class_mode, settings.min_count
    from imagenot.core.wordnet import noun_lemma_table, synset_of
    from imagenot.curate.nsfw import nsfw_reasons
    from imagenot.curate.settings import CLASS_MODES

    audit: list[dict] = []
    imagenet = list(imagenet)

    def remove(current: list[str], wnids: dict[str, str], step: int) -> list[str]:
        """Record ``wnids`` (wnid -> reason) as removed at ``step``; the rest of ``current``."""
        for w in sorted(wnids):
            name, reason = synset_name(synset_of(wn, w)), wnids[w]
            row = (w, name, step, STEP_NAMES[step], "removed", reason, counts.get(w, 0))
            audit.append(dict(zip(AUDIT_SCHEMA.names, row, strict=True)))
        return [w for w in current if w not in wnids]

    notes: dict[str, str] = {}
    if mode == "discover":
        current = sorted(w for w, n in counts.items() if n > 0)
        universe = len(current)
        keys = lemma_keys(lemma_table if lemma_table is not None else noun_lemma_table(wn))
        current = remove(current, imagenet_overlap(current, keys, imagenet), 2)
    else:
        # a list file is the rule's input: a relative path missing from the working directory
        # is the clone's
        base = imagenet if mode == "imagenet" else read_class_list(shipped(mode), wn.root.path)
        universe = len(base)
        absent = {w: "no caption mentions it" for w in base if counts.get(w, 0) == 0}
        current = remove(base, absent, 1)
        if mode == "imagenet":
            current = sorted(current)
    if mode not in CLASS_MODES:
        notes = {
            w: f"listed; ancestor of listed {d}" for w, d in ancestors_within(wn, base).items()
        }
        table = _class_table(wn, current, counts, settings.query_template)
    else:
        rare = {
            w: f"{counts.get(w, 0)} captions < min_count {min_count}"
            for w in current
            if counts.get(w, 0) < min_count
        }
        current = remove(current, rare, 3)
        inner = {w: f"ancestor of {d}" for w, d in ancestors_within(wn, current).items()}
        current = remove(current, inner, 4)
        table = _class_table(wn, current, counts, settings.query_template)
        reasons = nsfw_reasons(table, settings.nsfw, wn) if table.num_rows else []
        remove(current, {w: r for w, r in zip(current, reasons, strict=True) if r}, 5)
        table = table.filter(pa.array([not r for r in reasons], pa.bool_()))
    table = table.append_column(
        "note", pa.array([notes.get(w, "") for w in table.column("wnid").to_pylist()], pa.string())
    )
    stats = {
        "mode": mode if mode in CLASS_MODES else "list",
        "class_list": None if mode in CLASS_MODES else str(mode),
        "universe": universe,
        "candidates": table.num_rows,
        "ancestors_in_list": len(notes),
    }
    return table, pa.Table.from_pylist(audit, schema=AUDIT_SCHEMA), stats


def _class_table(wn, wnids: list[str], counts: dict[str, int], template: str) -> pa.Table:
    from imagenot.core.wordnet import synset_of

    synsets = [synset_of(wn, w) for w in wnids]
    names = [synset_name(s) for s in synsets]
    glosses = [s.definition() for s in synsets]
    return pa.table(
        {
            "wnid": pa.array(wnids, pa.string()),
            "name": pa.array(names, pa.string()),
            "lemmas": pa.array(
                [[n.replace("_", " ") for n in s.lemma_names()] for s in synsets],
                pa.list_(pa.string()),
            ),
            "gloss": pa.array(glosses, pa.string()),
            "query": pa.array(
                [template.format(name=n, gloss=g) for n, g in zip(names, glosses, strict=True)],
                pa.string(),
            ),
            "n_captions": pa.array([counts.get(w, 0) for w in wnids], pa.int64()),
        }
    )
