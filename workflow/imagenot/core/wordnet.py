"""WordNet 3.0 (the version ImageNet uses) and ImageNet's 1000 classes.

``prepare_nltk_wordnet`` builds an nltk-readable corpus from Debian's ``/usr/share/wordnet``
(packages ``wordnet-base`` and ``wordnet-sense-index``), generating the ``lexnames`` file those
packages lack; if nltk's own ``wordnet`` corpus is already installed it is copied instead.
ImageNet's classes come from the copy shipped inside ``timm`` (``timm/data/_info``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

# Where the workflow's ``prepare_nltk_wordnet`` writes WordNet (rule ``prepare_wordnet``): the
# default ``--nltk-data`` of the commands that read it (``imagenot match``, ``lemmas``,
# ``wordnet-stats``, ...). Its pattern is written once, in imagenot.core.paths, with the others.
from imagenot.core.paths import NLTK_DATA as NLTK_DATA

DEBIAN_WORDNET = Path("/usr/share/wordnet")

# The 45 lexicographer files of WordNet 3.0 (``man 5 lexnames``): number, name, syntactic category.
LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute "
    "noun.body noun.cognition noun.communication noun.event noun.feeling noun.food noun.group "
    "noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant "
    "noun.possession noun.process noun.quantity noun.relation noun.shape noun.state "
    "noun.substance noun.time verb.body verb.change verb.cognition verb.communication "
    "verb.competition verb.consumption verb.contact verb.creation verb.emotion verb.motion "
    "verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
_POS_NUMBER = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}

# Files nltk's WordNetCorpusReader opens (index.sense is optional but we ship it when present).
_REQUIRED = [
    f"{kind}.{pos}" for kind in ("data", "index") for pos in ("noun", "verb", "adj", "adv")
]
_OPTIONAL = ["adj.exc", "adv.exc", "noun.exc", "verb.exc", "index.sense", "cntlist.rev"]


def lexnames_text() -> str:
    """The ``lexnames`` file: ``NN<TAB>name<TAB>pos-number`` per line."""
    lines = []
    for number, name in enumerate(LEXNAMES):
        pos = 3 if name == "adj.ppl" else _POS_NUMBER[name.split(".")[0]]
        lines.append(f"{number:02d}\t{name}\t{pos}")
    return "\n".join(lines) + "\n"


def _existing_nltk_wordnet() -> Path | None:
    try:  # planning may run where nltk is not installed: Debian's copy then
        import nltk

        path = Path(str(nltk.data.find("corpora/wordnet")))
    except (ImportError, LookupError):
        return None
    return path if path.is_dir() else None


def wordnet_source(dict_dir: str | os.PathLike | None) -> Path:
    """The WordNet 3.0 dict directory the workflow reads (``wordnet.dict_dir``; else nltk's
    installed corpus; else Debian's ``/usr/share/wordnet``), with every file nltk needs; else
    FileNotFoundError naming the missing file and the packages that hold it."""
    source = Path(dict_dir) if dict_dir else (_existing_nltk_wordnet() or DEBIAN_WORDNET)
    for name in _REQUIRED:
        if not (source / name).exists():
            raise FileNotFoundError(
                f"WordNet file {source / name} is missing: install Debian packages "
                "wordnet-base and wordnet-sense-index, or set config key wordnet.dict_dir"
            )
    return source


def unknown_noun_synsets(
    wordnet_dir: str | os.PathLike, wnids: list[str] | tuple[str, ...]
) -> list[str]:
    """The ``wnids`` that name no noun synset of the WordNet in ``wordnet_dir`` (a dict
    directory or an nltk ``corpora/wordnet``).

    A noun wnid is ``n`` + the byte offset of its synset's line in ``data.noun``, and that line
    starts with the offset (WordNet's own addressing, which nltk's
    ``synset_from_pos_and_offset`` reads): one seek per wnid, without loading WordNet, so the
    config check at planning can afford it (milliseconds for a thousand classes). ``n02084072``
    (one byte into dog's line) is not a synset.
    """
    bad = []
    with open(Path(wordnet_dir) / "data.noun", "rb") as f:
        for w in wnids:
            offset = int(w[1:]) if len(w) == 9 and w[0] == "n" and w[1:].isdigit() else -1
            if offset < 0:
                bad.append(w)
                continue
            f.seek(offset)
            if not f.readline().startswith(b"%08d " % offset):
                bad.append(w)
    return bad


def prepare_nltk_wordnet(out_dir: str | os.PathLike, dict_dir: str | os.PathLike | None) -> Path:
    """Create ``out_dir/corpora/wordnet`` readable by nltk and return ``out_dir`` (an NLTK_DATA).

    Source order: ``dict_dir`` (config key ``wordnet.dict_dir``, a field of
    ``imagenot.curate.settings.WordnetSettings``) if set; else an installed nltk ``wordnet``
    corpus; else Debian's ``/usr/share/wordnet``. Raises FileNotFoundError naming the missing
    file and the package. No default: a caller passes the config's value, or None by choice.
    """
    out = Path(out_dir)
    target = out / "corpora" / "wordnet"
    source = wordnet_source(dict_dir)
    tmp = target.with_name(".wordnet.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in [*_REQUIRED, *_OPTIONAL, "lexnames"]:
        if (source / name).exists():
            shutil.copyfile(source / name, tmp / name)
    if not (tmp / "lexnames").exists():  # Debian's packages lack it
        (tmp / "lexnames").write_text(lexnames_text())
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return out


@functools.cache
def load_wordnet(nltk_data: str | os.PathLike):
    """An nltk ``WordNetCorpusReader`` over ``nltk_data/corpora/wordnet`` (cached per path),
    without the map of other WordNet versions' senses onto this one.

    Why: nltk's reader builds that map (``map_wn``, for the Open Multilingual Wordnet) on
    construction, reading both ``index.sense`` files: about half of the reader's start, paid by
    every job that opens WordNet. Nothing here reads the multilingual data (the reader gets no
    OMW reader), and synsets, lemmas and hypernyms come from the data files alone: the same
    answers (``tests/test_wordnet.py``)."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class Reader(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):
            return None

    data_dir = str(Path(nltk_data).resolve())
    if data_dir not in nltk.data.path:  # nltk only reads corpora under its data path
        nltk.data.path.insert(0, data_dir)
    root = Path(data_dir) / "corpora" / "wordnet"
    if not (root / "data.noun").exists():
        raise FileNotFoundError(
            f"no WordNet at {root}: run `.venv/bin/imagenot prepare-wordnet --nltk-data {nltk_data}`"
        )
    return Reader(str(root), None)


def wnid(synset) -> str:
    """WordNet id of a noun synset: ``n`` + 8-digit offset (ImageNet's convention)."""
    return f"{synset.pos()}{synset.offset():08d}"


def synset_of(wn, wnid_: str):
    """The synset for a wnid such as ``n02084071``; ValueError for a malformed id or one that
    names no synset (nltk returns None for it, which would fail later as an AttributeError)."""
    import warnings

    if len(wnid_) != 9 or wnid_[0] not in "nvar" or not wnid_[1:].isdigit():
        raise ValueError(f"malformed WordNet id {wnid_!r} (expected like 'n02084071')")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # nltk warns "No WordNet synset found"
        synset = wn.synset_from_pos_and_offset(wnid_[0], int(wnid_[1:]))
    if synset is None:
        raise ValueError(f"{wnid_} is not a synset of WordNet 3.0")
    return synset


def lemma_text(name: str) -> str:
    """WordNet lemma name as text: underscores become spaces (``hot_dog`` -> ``hot dog``)."""
    return name.replace("_", " ")


def noun_records(wn) -> Iterator[tuple[str, list[str]]]:
    """``(wnid, lemma names)`` of every noun synset of the reader ``wn``, in file order, read
    straight from its ``data.noun`` (``man 5 wndb``: a record is a line not starting with a
    space, whose fields are the offset, the lexicographer file, the synset type, the word count
    in hexadecimal, then a word and its lexical id per word). The records and names are those
    nltk's ``all_synsets("n")`` yields (a syntactic marker such as ``(a)`` is cut off the name
    the same way), read without building every synset's pointers, gloss and examples: 0.34 CPU-s
    against nltk's 7.1 (``benchmarks/bench_wordnet.py``, 2026-11-28). A record that does
    not parse is an error naming the file and line."""
    path = Path(wn.root.path) / "data.noun"
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if line[:1].isspace() or not line.strip():
                continue  # the licence header
            fields = line.split("|", 1)[0].split()
            try:
                offset, count = int(fields[0]), int(fields[3], 16)
                words = fields[4 : 4 + 2 * count]
                [int(lex_id, 16) for lex_id in words[1::2]]
                int(fields[4 + 2 * count])  # the pointer count follows the words
            except (ValueError, IndexError):
                raise ValueError(f"{path}: line {number} is no WordNet data record") from None
            if fields[2] != "n" or len(words) != 2 * count:
                raise ValueError(f"{path}: line {number} is no noun synset record")
            yield f"n{offset:08d}", [_MARKER.sub("", name) for name in words[::2]]


_MARKER = re.compile(r"\([^()]*\)$")
"""An adjective's syntactic marker, cut off a lemma name as nltk cuts it (nouns have none)."""


def noun_synset_count(wn) -> int:
    """How many noun synsets ``wn`` holds (:func:`noun_records`; 82,115 in WordNet 3.0)."""
    return sum(1 for _ in noun_records(wn))


def noun_lemma_table(wn) -> pa.Table:
    """Every (lemma text, wnid) pair of WordNet's noun synsets, sorted; lemma text as in WordNet."""
    pairs = [(lemma_text(name), sid) for sid, names in noun_records(wn) for name in names]
    table = pa.table({"lemma": [p[0] for p in pairs], "wnid": [p[1] for p in pairs]})
    return table.sort_by([("lemma", "ascending"), ("wnid", "ascending")])


def _timm_info(name: str) -> list[str]:
    """A file of timm's ``data/_info``, located without importing timm (and with it torch)."""
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package timm is not installed: it ships ImageNet's class list")
    root = Path(spec.submodule_search_locations[0])
    return (root / "data" / "_info" / name).read_text().splitlines()


@functools.cache
def imagenet_wnids() -> tuple[str, ...]:
    """ILSVRC-2012's 1000 class wnids in label order, from timm's shipped copy."""
    return tuple(line.strip() for line in _timm_info("imagenet_synsets.txt") if line.strip())


@functools.cache
def imagenet_lemmas() -> dict[str, str]:
    """wnid -> comma-separated lemmas, from timm's shipped copy."""
    lines = _timm_info("imagenet_synset_to_lemma.txt")
    return dict(line.split("\t", 1) for line in lines if "\t" in line)


def config_wordnet_dir(config: dict):
    """The WordNet that rule prepare_wordnet reads (``wordnet.dict_dir``, else nltk's corpus,
    else Debian's), which the config checks read too; ValueError naming ``wordnet.dict_dir``
    when it lacks a file, as that job would fail (it reruns when ``dict_dir`` changes, so a
    corpus prepared before does not excuse a wrong one). Without ``dict_dir``, Debian's when
    complete, found without importing nltk (seconds, and every cluster job's Snakemake runs the
    checks), since the job then succeeds from either source."""
    dict_dir = config["wordnet"]["dict_dir"]
    if not dict_dir and all((DEBIAN_WORDNET / name).exists() for name in _REQUIRED):
        return DEBIAN_WORDNET
    try:
        return wordnet_source(dict_dir)
    except FileNotFoundError as exc:
        raise ValueError(f"config key wordnet.dict_dir: {exc}") from None
