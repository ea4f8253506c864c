"""Subcommands shared by all stages: WordNet preparation and config validation."""

from __future__ import annotations

import argparse

from imagenot.cli import subcommand
from imagenot.curate.files import WordnetFiles
from imagenot.curate.settings import WordnetSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subcommand(subparsers, "prepare-wordnet", _prepare_wordnet, files=WordnetFiles)
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--dict-dir",
        default=None,
        help="WordNet dict directory (default: the schema's wordnet.dict_dir: null = nltk's, "
        "else /usr/share/wordnet)",
    )
    where.add_argument(
        "--settings",
        default=None,
        metavar="JSON",
        help="instead of --dict-dir: JSON (WordnetSettings; what the rule passes)",
    )


def wordnet_settings(args: argparse.Namespace) -> WordnetSettings:
    """The rule's ``--settings``, or the hand-typed ``--dict-dir`` (default: the schema's)."""
    from imagenot.config import schema_default
    from imagenot.settings import parse

    if args.settings is not None:
        return parse(WordnetSettings, args.settings)
    return WordnetSettings(
        args.dict_dir if args.dict_dir is not None else schema_default("wordnet.dict_dir")
    )


def _prepare_wordnet(args: argparse.Namespace) -> None:
    """Build an nltk-readable WordNet 3.0 corpus."""
    from imagenot.wordnet import load_wordnet, noun_synset_count, prepare_nltk_wordnet

    out = prepare_nltk_wordnet(
        WordnetFiles.from_args(args).nltk_data, wordnet_settings(args).dict_dir
    )
    wn = load_wordnet(str(out))
    wn.synset("entity.n.01")  # nltk reads the corpus: its indexes and a data record
    n = noun_synset_count(wn)
    print(f"WordNet ready at {out}: {n} noun synsets")
