"""The analyse stage's files (rules/analyse.smk): the accuracy table every evaluation feeds and
the rankings statistics read from it, as Snakemake patterns written once here; the figures stage
(:mod:`imagenot.figures.plan`) and its rules read them under these names.

No stage check and no targets of its own: the figures and tables that ``rule all`` asks for
(``imagenot.figures.plan.targets``) read every file of this stage, so the stage runs exactly when
something downstream needs it.
"""

from __future__ import annotations

from imagenot.core.paths import RESULTS
from imagenot.train.facts import shipped_path

ACCURACY = f"{RESULTS}/analyse/accuracy.csv"
PER_IMAGE = f"{RESULTS}/analyse/per_image.parquet"
RANKINGS = f"{RESULTS}/analyse/rankings_{{variant}}.json"
# the rankings' two variants (rule rankings_json's wildcard): standard and Robust accuracy
VARIANTS = ("standard", "robust")
# every registered weights' facts, published top-1/top-5 among them (imagenot.train.facts): the
# shipped file, as an absolute path (valid whatever the working directory); the accuracy-table
# command reads it from the package, and its rule records only published_version()
PUBLISHED_ACCURACY = shipped_path()


def published_version() -> str:
    """The shipped published accuracies' file name and digest: the accuracy table's parameter
    (a new table reruns it), with no path of the clone in it (a moved run plans nothing)."""
    from imagenot.core.io import code_version

    return code_version(PUBLISHED_ACCURACY)
