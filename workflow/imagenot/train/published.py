"""The ``train-published`` job: published ImageNet weights as a final run, nothing trained.

Why apart from :mod:`imagenot.train.jobs`: it shares none of a training job's machinery (no
trial, loop, checkpoint or device set-up); it re-indexes a published head to the dataset's
classes and writes the run's weights and result in the shape the evaluate stage reads. Light
at import: torch and the dataset reader are imported when the job runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from imagenot.core.io import sha256_file
from imagenot.train.records import FinalRecord, write_final

if TYPE_CHECKING:
    from imagenot.train.files import PublishedFiles
    from imagenot.train.settings import PublishedSettings

log = logging.getLogger(__name__)


def run_published(settings: PublishedSettings, files: PublishedFiles, run: Mapping) -> FinalRecord:
    """The paper's ImageNet models (appendix A.1): torchvision's published weights
    (``files.weights``), not trained here. Write them as the run's weights (``files.model``)
    with a record like a final run's (``files.result``), so the evaluate stage tests them on the dataset's test split (ImageNet's validation
    set) under the 17 transformations as any trained model. The result records the weights'
    own facts (``imagenot.train.facts``): the preprocessing the evaluation applies (their
    resize, crop, interpolation and normalisation) and the published top-1/top-5 the measured
    ones are compared with.

    The head keeps the rows of the dataset's classes, matched by wnid against ILSVRC-2012's
    label order (``files.classes``), so a dataset holding a subset of the classes (or another
    order) is scored correctly; a class that is not an ILSVRC-2012 wnid is an error naming
    classes.txt.
    """
    import torch

    from imagenot.core.dataset import read_class_file, read_fingerprint_file
    from imagenot.core.registries import RegistryError
    from imagenot.core.wordnet import imagenet_wnids
    from imagenot.train.checkpoints import save_weights
    from imagenot.train.facts import weight_facts
    from imagenot.train.registry import build_model, head_keys, read_state_dict

    model_name, weights = settings.model, settings.weights
    weights_file = Path(files.weights)
    classes = read_class_file(files.classes)
    order = {wnid: i for i, wnid in enumerate(imagenet_wnids())}
    unknown = [c for c in classes if c not in order]
    if unknown:
        raise RegistryError(
            f"{files.classes}: class {unknown[0]!r} is not an ILSVRC-2012 wnid "
            f"({len(unknown)} such); published ImageNet weights can only score ImageNet classes"
        )
    state = read_state_dict(weights_file)
    model = build_model(model_name, len(classes))
    rows = torch.tensor([order[c] for c in classes])
    own = model.state_dict()
    for key in head_keys(model_name, own):
        if key not in state or state[key].shape[0] != len(order):
            raise RegistryError(
                f"{weights_file}: {key!r} is not a {len(order)}-way ImageNet head of {model_name}"
            )
        state[key] = state[key].index_select(0, rows)
    model.load_state_dict(state)  # strict: every other key must fit as published
    num_classes, fingerprint = len(classes), read_fingerprint_file(files.fingerprint)
    facts = weight_facts(weights, model_name)
    save_weights(model, Path(files.model))
    result = FinalRecord.of(
        {
            **run,
            "seed": 0,
            "model": model_name,
            "num_classes": num_classes,
            "image_size": facts.preprocessing.crop_size,  # the weights' input, not train's
            "source": "published",
            "weights": weights,
            "preprocessing": facts.preprocessing.to_dict(),
            "normalisation": facts.preprocessing.normalisation(),
            "published_top1": facts.top1,
            "published_top5": facts.top5,
            "published_source": facts.source,
            "init": f"{weights_file} sha256:{sha256_file(weights_file)}",
            "dataset_fingerprint": fingerprint,
            "chance_accuracy": 100.0 / num_classes,
            "weights_sha256": sha256_file(files.model),
        }
    )
    result = write_final(result, Path(files.result))
    log.info("%s: published weights %s written for %d classes", run, weights, num_classes)
    return result
