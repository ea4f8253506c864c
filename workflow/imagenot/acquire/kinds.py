"""The one list of dataset kinds (``datasets.<name>.kind``), importable without torch or numpy.

``laion`` datasets are built by the workflow itself (curate + acquire); every other kind is read
from files on disk by an adapter: a reader of its images and a reader of its class list, given as
``"module:function"`` strings that :func:`imagenot.core.registries.resolve` imports when a job reads
data (planning and config validation import neither the adapters nor numpy). The config schema's
``kind`` values, ``imagenot materialise --kind`` choices and the acquire and diagnostics plans
derive from this list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from imagenot.core.registries import Registry


@dataclass(frozen=True)
class DatasetKind:
    """How a dataset of this kind is obtained.

    ``items(root, only) -> (classes, items)`` lists its images (``only``: the classes wanted, or
    None for all; see :mod:`imagenot.acquire.adapters`); ``classes(root) -> list`` its class list
    without listing images. Both None: built by the workflow (``laion``). ``class_count``: classes
    of the kind when fixed, for planning range jobs before the data is at hand.
    ``class_roots(root) -> list[Path]``: for a kind stored as one folder per class, the folders
    holding those class folders (``train/``, ``val/``, ...): the materialisation's empty-folder
    check reads every one of them and planning counts classes there; None: not folder-based.
    A folder-based kind that does not declare its roots cannot skip the check silently: the
    check asks the entry, never the kind's name.
    ``wnid_classes``: its class names are WordNet ids (the WordNet diagnostics apply).
    ``keys``: the keys of ``datasets.<name>`` (beyond ``kind`` and ``description``) a dataset
    of this kind reads, and ``required_keys`` those it cannot do without: the config check
    (:func:`imagenot.acquire.plan.check`, hence planning and ``imagenot validate-config``)
    refuses a missing required key and a key the kind would ignore, naming
    ``datasets.<name>.<key>``, before any rule reads them. ``keys`` None: any key of the
    schema (a plugin kind that declares none).
    """

    items: str | Callable[..., Any] | None
    classes: str | Callable[..., Any] | None
    class_count: int | None = None
    class_roots: str | Callable[..., Any] | None = None
    wnid_classes: bool = False
    keys: tuple[str, ...] | None = None
    required_keys: tuple[str, ...] = ()
    # (training pool, test split) images as the dataset is published, for planning a run's cost
    # before the data is at hand (``imagenot plan``); None: unknown until read
    published_images: tuple[int, int] | None = None
    # (bytes, source): the published test split's original files, what ``originals/`` holds
    # when published weights are evaluated on the dataset (imagenot.acquire.sizes.
    # originals_bytes); 0 bytes: its adapter reads pixel arrays, no file to keep; None: unknown
    published_originals: tuple[int, str] | None = None

    @property
    def adapter(self) -> bool:
        """Read from disk by an adapter (rather than built by the workflow)."""
        return self.items is not None

    @property
    def class_folders(self) -> bool:
        """Stored as one folder per class (it declares :attr:`class_roots`)."""
        return self.class_roots is not None


LAION_KEYS = (
    "classes",
    "n_classes",
    "images_per_class",
    "test_per_class",
    "val_per_class",
    "allow_fewer",
)
"""What a LAION-built dataset reads (imagenot.curate.settings, imagenot.acquire.settings
FillSettings/TopupSettings)."""
ADAPTER_KEYS = ("path", "test_per_class", "val_per_class", "max_train_per_class", "image_size")
"""What a dataset on disk reads (imagenot.acquire.settings.MaterialiseSettings); ``path``
needed."""


def _adapter(name: str, count: int | None, where: str = "imagenot.acquire.adapters", **declared):
    """A kind read by the adapter functions ``{where}:{name}_items``, ``_classes`` (and
    ``_class_roots`` where ``declared`` says ``class_roots=True``)."""
    roots = f"{where}:{name}_class_roots" if declared.pop("class_roots", False) else None
    return DatasetKind(
        f"{where}:{name}_items",
        f"{where}:{name}_classes",
        count,
        roots,
        keys=ADAPTER_KEYS,
        required_keys=("path",),
        **declared,
    )


ARRAYS = (0, "its adapter reads pixel arrays: no file to keep")


DATASET_KINDS: Registry = Registry(
    "dataset kind",
    {
        "laion": DatasetKind(None, None, wnid_classes=True, keys=LAION_KEYS),
        # published sizes: Fashion-MNIST 60,000 + 10,000; CIFAR-10 50,000 + 10,000;
        # ILSVRC-2012 1,281,167 training images + 50,000 validation images (our test split)
        "fashion_mnist": _adapter(
            "fashion_mnist", 10, published_images=(60_000, 10_000), published_originals=ARRAYS
        ),
        "cifar10": _adapter(
            "cifar10", 10, published_images=(50_000, 10_000), published_originals=ARRAYS
        ),
        "imagenet": _adapter(
            "imagenet",
            1000,
            "imagenot.acquire.imagenet",
            class_roots=True,
            wnid_classes=True,
            published_images=(1_281_167, 50_000),
            published_originals=(
                6_744_924_160,
                "ILSVRC2012_img_val.tar, the 50,000 validation JPEGs: 6,744,924,160 bytes as "
                "image-net.org serves it",
            ),
        ),
        "imagefolder": _adapter("imagefolder", None, class_roots=True),
    },
)


def adapter_kinds() -> tuple[str, ...]:
    """Kinds read from disk by an adapter, in registry order."""
    return tuple(name for name, kind in DATASET_KINDS.items() if kind.adapter)


def wnid_kinds() -> tuple[str, ...]:
    """Kinds whose class names are WordNet ids."""
    return tuple(name for name, kind in DATASET_KINDS.items() if kind.wnid_classes)
