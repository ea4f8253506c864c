"""The side a dataset's images are stored at, from the config alone.

Why a module of its own: the train stage's planning and the preflight read it (the loader's
batch rings hold stored images; published weights' own resize must not exceed it), and must not
import the acquire stage's jobs, which reach the adapters and their image libraries. The
settings objects it reads (acquire's and curate's) import no third-party library, so a training
job's env needs nothing for them (tests/test_envs.py checks each rule's imports).
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
    on the originals (:mod:`imagenot.dataset`)."""
    return any(
        e["weights"] == "published" and e["dataset"] == dataset
        for e in config["train"]["experiments"]
    )


def dataset_images(config: dict, dataset: str) -> dict | None:
    """Classes and images per split of ``dataset`` as the config sizes it (LAION-built: classes
    x images per class; adapters: the published sizes, capped by the config's per-class keys),
    with the source; None when the kind's size is unknown until read."""
    from imagenot.acquire.kinds import DATASET_KINDS
    from imagenot.acquire.settings import FillSettings, MaterialiseSettings
    from imagenot.curate.settings import SelectSettings

    kind = DATASET_KINDS[config["datasets"][dataset]["kind"]]
    if not kind.adapter:
        fill = FillSettings.from_config(config, dataset)
        classes = SelectSettings.from_config(config, dataset=dataset).n_classes
        per = fill.images_per_class
        return {
            "classes": classes,
            "train": classes * (per - fill.test_per_class - fill.val_per_class),
            "val": classes * fill.val_per_class,
            "test": classes * fill.test_per_class,
            "source": "config: n_classes x images per class, an upper bound (every class "
            "full; discovered classes may be fewer)",
        }
    if kind.published_images is None or kind.class_count is None:
        return None
    settings = MaterialiseSettings.config_values(config, dataset=dataset)
    spec = config["datasets"][dataset]
    classes, (pool, test) = kind.class_count, kind.published_images
    val = classes * settings["val_per_class"]
    train = pool - val
    if spec.get("max_train_per_class"):
        train = min(train, classes * spec["max_train_per_class"])
    if spec.get("test_per_class"):
        test = min(test, classes * spec["test_per_class"])
    return {
        "classes": classes,
        "train": train,
        "val": val,
        "test": test,
        "source": "the dataset's published size, capped by the config's per-class keys",
    }
