"""Transfer learning over stored features: the frozen backbone runs once per split, not per epoch.

Why: TL (protocol ``tl-SOURCE``, ``trainable: head``) freezes every layer but the classifier
head, keeps the backbone in eval mode (BatchNorm statistics fixed, no dropout) and trains
without augmentation, so what the head receives for an image is the same in every epoch of
every trial and final run. The ``train_features`` rule therefore computes, per (backbone
weights file, dataset, split), the head's input for every image once (the same preprocess,
autocast and eval-mode backbone as the image path of ``imagenot.train.loop``); TL trials and
final runs then fit the head on those features with the same ``loop.fit`` (optimizer,
schedule, seeds, data order, batch cutting, early stopping, checkpoints), and the saved
weights are the full model (backbone + fitted head), as the image path saves them.

File format (docs/contracts.md): a safetensors file with tensors ``features`` (N x D, in the
dtype the backbone emitted: float32 on the CPU; under CUDA's bf16 autocast whatever the layer
before the head returns, bf16 for most families, so storing it loses nothing the head would
have seen) and ``labels`` (N, int64), rows in the split's manifest order, and metadata naming
what the features are a function of (model, starting weights and their sha256, dataset
fingerprint, split, image size, input normalisation). A reader checks the metadata against its
job: a file of other weights, statistics or dataset version is an error naming the file, never
silently used.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch

from imagenot.train.checkpoints import load_tensors, save_tensors
from imagenot.train.feed import Feeder, InMemory, autocast, to_device

log = logging.getLogger(__name__)

FORMAT = "imagenot-features-1"


class Features(InMemory):
    """A split's stored features: float N x D (the head's input) and int64 labels. Served by
    ``Feeder`` as any InMemory; the loop moves them to the device without preprocessing and
    runs the head alone on them (``loop.fit(head_only=True)``)."""


class FeaturesError(ValueError):
    """A features file that is not the one a job needs (other weights, dataset or size)."""


def describe(job, fingerprint: str, split: str) -> dict:
    """What a features file is a function of (its safetensors metadata, all strings): the
    loop's ``job`` (model, starting weights, image size and the normalisation the backbone's
    input had), the dataset version and the split."""
    return {
        "format": FORMAT,
        "model": job.settings.model,
        "init": job.init,
        "dataset_fingerprint": fingerprint,
        "split": split,
        "image_size": str(job.settings.image_size),
        "normalisation": json.dumps(job.settings.normalisation, sort_keys=True),
    }


@torch.no_grad()
def extract(model: torch.nn.Module, head: torch.nn.Module, data, job, device) -> Features:
    """The input of ``head`` for every item of ``data`` (in order), computed by ``model`` in
    eval mode on ``device`` with the training path's preprocess and autocast
    (``feed.to_device``, ``feed.autocast``): the Features (N x D, labels) on the CPU. ``job``
    gives the image size, eval batch size and loader workers."""
    captured: list[torch.Tensor] = []

    def keep(_module, inputs):
        captured.append(inputs[0].detach())

    model.eval()
    hook = head.register_forward_pre_hook(keep)
    largest = min(job.settings.eval_batch_size, len(data))
    feeder = Feeder(data, job.settings.num_workers, largest, device.type == "cuda", device)
    features, labels = [], []
    try:
        batches = list(torch.arange(len(data)).split(job.settings.eval_batch_size))
        for images, y in feeder.epoch(batches):
            x, _ = to_device(images, y, device, job.settings.image_size, job.settings.normalisation)
            with autocast(device):
                model(x)
            features.append(captured.pop().to("cpu"))
            labels.append(y.to(torch.int64))
    finally:
        hook.remove()
    if not features:
        raise FeaturesError("a split without images has no features")
    return Features(torch.cat(features), torch.cat(labels))


def write(features: Features, meta: dict, out: Path) -> None:
    """The features file, atomically, with the digest of its tensors and refused when any
    value is not finite (``checkpoints.save_tensors``)."""
    save_tensors({"features": features.images, "labels": features.labels}, out, meta)


def read(path: Path, expected: dict) -> Features:
    """The features of ``path`` as float32 (the head fits in float32 on the CPU), after
    checking its metadata against ``expected`` (:func:`describe`)."""
    tensors, meta = load_tensors(path, require_digest=True)  # digest and finite values checked
    for key, value in expected.items():
        if meta.get(key) != value:
            raise FeaturesError(
                f"{path}: metadata {key} is {meta.get(key)!r}, this job needs {value!r} "
                f"(stale features: delete the file and rerun train_features)"
            )
    if set(tensors) != {"features", "labels"}:
        raise FeaturesError(f"{path}: tensors {sorted(tensors)}, expected features and labels")
    features = tensors["features"].float()
    labels = tensors["labels"].to(torch.int64)
    if len(features) != len(labels):
        raise FeaturesError(f"{path}: {len(features)} feature rows but {len(labels)} labels")
    return Features(features, labels)
