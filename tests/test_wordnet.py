"""WordNet 3.0 preparation from Debian's files and ImageNet's classes from timm."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from imagenot.core import wordnet


def test_lexnames_has_45_files_numbered_in_order():
    lines = wordnet.lexnames_text().splitlines()
    assert len(lines) == 45
    assert lines[0] == "00\tadj.all\t3"
    assert lines[3] == "03\tnoun.Tops\t1"
    assert lines[44] == "44\tadj.ppl\t3"


def test_dog_wnid_and_noun_synset_count(wn):
    dog = wordnet.synset_of(wn, "n02084071")
    assert dog.name() == "dog.n.01"
    assert wordnet.wnid(dog) == "n02084071"
    assert wordnet.noun_synset_count(wn) == 82115


def test_noun_records_are_the_synsets_and_lemma_names_nltk_reads(wn):
    """The direct read of data.noun gives exactly nltk's noun synsets, in order, each with
    nltk's lemma names (146,347 synset-lemma pairs in WordNet 3.0)."""
    ours = list(wordnet.noun_records(wn))
    assert ours == [(wordnet.wnid(s), s.lemma_names()) for s in wn.all_synsets("n")]
    assert sum(len(names) for _, names in ours) == 146_347


def _reader(tmp_path, record: str):
    """A stand-in for nltk's reader holding ``record`` after a licence line: what
    noun_records uses of the reader is its root folder."""
    root = tmp_path / "corpora" / "wordnet"
    root.mkdir(parents=True)
    (root / "data.noun").write_text(f"  1 licence header\n{record}\n")
    return SimpleNamespace(root=SimpleNamespace(path=str(root)))


def test_a_sound_noun_record_is_read(tmp_path):
    reader = _reader(tmp_path, "00001740 03 n 01 entity 0 000 | that which exists")
    assert list(wordnet.noun_records(reader)) == [("n00001740", ["entity"])]


@pytest.mark.parametrize(
    "record",
    [
        "00001740 03 n 02 entity 0 000 | one word where two are counted",
        "0000x740 03 n 01 entity 0 000 | an offset that is no number",
        "00001740 03 v 01 run 0 000 | a verb in the noun file",
    ],
)
def test_a_damaged_noun_record_is_named_by_file_and_line(tmp_path, record):
    with pytest.raises(ValueError, match=r"data\.noun: line 2 is no"):
        list(wordnet.noun_records(_reader(tmp_path, record)))


def test_malformed_wnid_is_refused(wn):
    with pytest.raises(ValueError, match="malformed WordNet id"):
        wordnet.synset_of(wn, "dog")


def test_imagenet_classes_from_timm(wn):
    ids = wordnet.imagenet_wnids()
    assert len(ids) == 1000 and len(set(ids)) == 1000
    assert ids[0] == "n01440764"  # tench, label 0
    assert wordnet.synset_of(wn, ids[0]).name() == "tench.n.01"
    assert "tench" in wordnet.imagenet_lemmas()["n01440764"]


def test_noun_lemma_table_covers_multiword_lemmas(wn):
    table = wordnet.noun_lemma_table(wn)
    pairs = set(zip(table["lemma"].to_pylist(), table["wnid"].to_pylist(), strict=True))
    assert ("hot dog", "n07697537") in pairs
    assert len(set(table["lemma"].to_pylist())) > 115_000


def test_missing_wordnet_files_name_the_packages(tmp_path):
    with pytest.raises(FileNotFoundError, match="wordnet-base"):
        wordnet.prepare_nltk_wordnet(tmp_path / "out", str(tmp_path))
