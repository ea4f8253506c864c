"""The results tree's roots and the files every stage shares: written here once.

Why a module of its own: every stage's plan, the rules (rules/*.smk) and the readers under
results/ name these paths; spelt in each, a renamed folder would be renamed in some of them
only. A stage whose files other stages read keeps its own patterns in ``imagenot.<stage>.paths``
(curate, acquire, train, evaluate: light, so a reader imports no plan); the last stages keep
theirs in their plan (demo and scale world, figures, diagnostics, preflight) or beside their
writer (:mod:`imagenot.run.run_summary`). All are built on these roots, and docs/contracts.md is
checked against all of them (tests/test_contracts.py). No imports but the standard library's:
every job's Snakemake parses the rules.

A pattern is a Snakemake wildcard pattern (``{dataset}``): the producing rule's ``output:``,
a consuming rule's ``input:`` and, filled with ``str.format``, the plans' file lists.
"""

from __future__ import annotations

from pathlib import Path

# the clone's root (workflow/imagenot/core/paths.py): the files it ships under resources/ are read
# from it by :func:`shipped`
CLONE = Path(__file__).resolve().parents[3]


def shipped(path: str) -> str:
    """A file named in the config as the workflow reads it (``diagnostics.class_lists``,
    ``diagnostics.reference_classes``, ``scale_world.captions``, a dataset's
    ``classes.from_file``). A relative path is read from the working directory; one that is not
    there but names a file the clone ships (``resources/...``: the authors' class lists, the
    scale world's captions, the demo class list) is the clone's file, by its absolute path, so a
    run in a working directory of its own (``--directory``, or the workflow used as a module)
    reads the same file. Any other path is returned as given (its check says there is no file).
    """
    given = Path(path)
    if given.is_absolute() or given.exists() or not (CLONE / given).is_file():
        return path
    return str(CLONE / given)


RESULTS = "results"
LOGS = f"{RESULTS}/logs"
BENCH = f"{RESULTS}/benchmarks"

# the figures and tables of the report (the figures stage's and the diagnostics' own)
FIGURES = f"{RESULTS}/figures"
TABLES = f"{RESULTS}/tables"

# wordnet (rules/wordnet.smk): WordNet as an nltk corpus, and its noun lemmas once
NLTK_DATA = f"{RESULTS}/wordnet/nltk_data"
NOUN_LEMMAS = f"{RESULTS}/wordnet/noun_lemmas.parquet"

# A materialised dataset (acquire's gather writes it; train, evaluate and diagnostics read it):
# one layout for every dataset kind.
DATASET = f"{RESULTS}/datasets/{{dataset}}"
# a dataset folder's splits and files by name, for the writer and the readers that are handed
# the folder (imagenot.acquire.dataset, imagenot.core.dataset) and the plans that name its files
SPLITS = ("train", "val", "test")
MANIFEST_FILE = "manifest.parquet"
CLASSES_FILE = "classes.txt"
FINGERPRINT_FILE = "fingerprint.txt"
MANIFEST = f"{DATASET}/{MANIFEST_FILE}"
CLASSES = f"{DATASET}/{CLASSES_FILE}"
FINGERPRINT = f"{DATASET}/{FINGERPRINT_FILE}"
