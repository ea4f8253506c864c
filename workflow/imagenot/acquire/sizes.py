"""The side a dataset's images are stored at, from the config alone.

Why a module of its own: the train stage's planning and the preflight read it (the loader's
batch rings hold stored images; published weights' own resize must not exceed it), and must not
import the acquire stage's settings, whose jobs reach the adapters and their image libraries.
"""

from __future__ import annotations

from imagenot.settings import config_lookup

# Where a dataset's image_size is read (MaterialiseSettings.SECTIONS): its own key, else acquire's.
STORED_SIZE_SECTIONS = ("datasets.{dataset}", "acquire")


def stored_size(config, dataset: str) -> int:
    """The side ``dataset``'s images are stored at (its own ``image_size``, else
    ``acquire.image_size``, as :class:`imagenot.acquire.settings.MaterialiseSettings` reads it):
    what the loaders decode and the feed's ring holds (256 px for the paper, not the 224
    trained), and what published weights' own resize must not exceed
    (``imagenot.train.checks.check_stored_size``)."""
    return config_lookup(
        config, STORED_SIZE_SECTIONS, "image_size", {"dataset": dataset}, override=True
    )


def keeps_originals(config, dataset: str) -> bool:
    """Whether ``dataset`` keeps its test images' original files beside the stored copy: when
    published weights are evaluated on it (a ``train.experiments`` entry with ``weights:
    published``, ``imagenot.train.experiments.is_published``), whose accuracies were measured
    on the originals (:mod:`imagenot.dataset`; rule acquire_materialise_reference_range)."""
    return any(
        e["weights"] == "published" and e["dataset"] == dataset
        for e in config["train"]["experiments"]
    )
