"""The handler of ``imagenot prepare-wordnet`` (declared in :mod:`imagenot.core.steps`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imagenot.curate.files import WordnetFiles
    from imagenot.curate.settings import WordnetSettings


def wordnet_settings(settings: WordnetSettings | None, dict_dir: str | None) -> WordnetSettings:
    """The rule's ``--settings``, or the hand-typed ``--dict-dir`` (default: the schema's); both
    given is an error."""
    from imagenot.core.config import schema_default
    from imagenot.curate.settings import WordnetSettings

    if settings is not None:
        if dict_dir is not None:
            raise ValueError("--dict-dir and --settings: give one of them")
        return settings
    return WordnetSettings(dict_dir if dict_dir is not None else schema_default("wordnet.dict_dir"))


def prepare_wordnet(
    files: WordnetFiles, settings: WordnetSettings | None, dict_dir: str | None
) -> None:
    """Build an nltk-readable WordNet 3.0 corpus."""
    from imagenot.core.wordnet import load_wordnet, noun_synset_count, prepare_nltk_wordnet

    out = prepare_nltk_wordnet(files.nltk_data, wordnet_settings(settings, dict_dir).dict_dir)
    wn = load_wordnet(str(out))
    wn.synset("entity.n.01")  # nltk reads the corpus: its indexes and a data record
    n = noun_synset_count(wn)
    print(f"WordNet ready at {out}: {n} noun synsets")
