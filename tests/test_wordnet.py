"""WordNet 3.0 preparation from Debian's files and ImageNet's classes from timm."""

from __future__ import annotations

import pytest

from imagenot import wordnet


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
    assert sum(1 for _ in wn.all_synsets("n")) == 82115


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
