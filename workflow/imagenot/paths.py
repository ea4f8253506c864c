"""The results tree's roots and the files every stage shares: written here once.

Why a module of its own: every stage's plan, the rules (rules/*.smk) and the readers under
results/ name these paths; spelt in each, a renamed folder would be renamed in some of them
only. A stage whose files other stages read keeps its own patterns in ``imagenot.<stage>.paths``
(curate, acquire, train, evaluate: light, so a reader imports no plan); the last stages keep
theirs in their plan (demo and scale world, figures, diagnostics, preflight) or beside their
writer (:mod:`imagenot.run_summary`). All are built on these roots, and docs/contracts.md is
checked against all of them (tests/test_contracts.py). No imports: every job's Snakemake
parses the rules.

A pattern is a Snakemake wildcard pattern (``{dataset}``): the producing rule's ``output:``,
a consuming rule's ``input:`` and, filled with ``str.format``, the plans' file lists.
"""

from __future__ import annotations

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
# the folder (imagenot.acquire.dataset, imagenot.dataset) and the plans that name its files
SPLITS = ("train", "val", "test")
MANIFEST_FILE = "manifest.parquet"
CLASSES_FILE = "classes.txt"
FINGERPRINT_FILE = "fingerprint.txt"
MANIFEST = f"{DATASET}/{MANIFEST_FILE}"
CLASSES = f"{DATASET}/{CLASSES_FILE}"
FINGERPRINT = f"{DATASET}/{FINGERPRINT_FILE}"
