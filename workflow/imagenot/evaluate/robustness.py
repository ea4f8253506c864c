"""Evaluate one model under the 17 test-time transformations, decoding each test image once.

Core: :func:`evaluate_batches` takes a model, its :class:`~imagenot.train.facts.Preprocessing`
and an iterable of decoded batches (the stored test images, labels, keys) and
returns the per-image results; every batch is brought to the image the model sees by the
model's own protocol (resize and centre crop: a published weight's ``weights.transforms()``, or
for a model trained here the whole image at the input side it trained at, recorded in its
``result.json``: ``train.image_size``, or its registry entry's own), transformed 17 times on
the device, normalised (the weight's mean/std, or ``train.normalisation``) and fed to the model.
The order (the model's geometry, then the transformation, then normalisation) gives a shift one
strength on every dataset: the model sees the same blur or rotation whether its dataset is
stored at 480 px (ImageNet, for EfficientNet-V2-L's resize) or 256 (ImageNot), and pixel-sized
strengths are stated at ``train.image_size`` (:mod:`imagenot.evaluate.transforms`). Images a
transformation leaves unchanged (its gate is closed) reuse the untransformed images'
predictions. :func:`summarise` turns per-image
results into the per-transformation table. I/O lives at the edges: :func:`load_checkpoint`,
:func:`dataset_batches` and :func:`evaluate_checkpoint`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from imagenot.core import job_usage
from imagenot.core.io import write_parquet
from imagenot.evaluate.files import RobustnessFiles
from imagenot.evaluate.metrics import topk_correct
from imagenot.evaluate.outputs import (
    ROBUSTNESS_SCHEMA,
    NonFiniteOutputs,
    check_finite_outputs,
    check_published,
)
from imagenot.evaluate.reference import full_float32, numerics, reference_input, run_is_published
from imagenot.evaluate.settings import RobustnessSettings
from imagenot.evaluate.transforms import Transform, build_transforms, key_hashes, transform_uniforms
from imagenot.train.facts import Preprocessing, run_preprocessing
from imagenot.train.records import FinalRecord

log = logging.getLogger(__name__)

PER_IMAGE_SCHEMA = pa.schema(
    dict.fromkeys(("key", "transform"), pa.string())
    | dict.fromkeys(("label", "pred"), pa.int64())
    | dict.fromkeys(("correct", "correct_top5"), pa.bool_())
)
"""The per-image table: each image's key, the transformation, its label, the predicted class,
and whether the top-1 and the top-5 predictions hold the label."""


@dataclass
class PerImage:
    """Per-image results by transformation (in the order first added), each in evaluation
    order: a batch's keys, labels, predictions, top-1 and top-5 hits."""

    parts: dict[str, list[tuple]] = field(default_factory=dict)

    def add(self, name: str, keys: Sequence[str], labels, preds, correct, correct5) -> None:
        arrays = (v.detach().cpu().numpy() for v in (labels, preds, correct, correct5))
        self.parts.setdefault(name, []).append((list(keys), *arrays))

    def table(self) -> pa.Table:
        """Rows sorted by transformation (registry order), then evaluation order."""
        parts = [(name, part) for name, batches in self.parts.items() for part in batches]
        keys, names = [k for _, p in parts for k in p[0]], [n for n, p in parts for _ in p[0]]
        arrays = [
            np.concatenate([p[i] for _, p in parts] or [np.empty(0)]).astype(dtype)
            for i, dtype in enumerate((np.int64, np.int64, bool, bool), 1)  # the schema's order
        ]
        return pa.table([keys, names, *arrays], schema=PER_IMAGE_SCHEMA)


def _as_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 (or [0, 1] float) images as float32 in [0, 1]."""
    return images.to(torch.float32) / 255.0 if images.dtype == torch.uint8 else images.float()


def to_model_input(images: torch.Tensor, image_size: int) -> torch.Tensor:
    """uint8 (or [0, 1] float) ``B x 3 x H x W`` -> float [0, 1] at ``image_size`` x ``image_size``
    (bilinear, antialiased): how :func:`dataset_batches` brings an image stored at another size
    than its split's first to that size."""
    x = _as_float(images)
    if tuple(x.shape[-2:]) != (image_size, image_size):
        x = torch.nn.functional.interpolate(
            x, size=(image_size, image_size), mode="bilinear", antialias=True
        ).clamp_(0.0, 1.0)
    return x


def evaluate_batches(
    model: torch.nn.Module,
    batches: Iterable[tuple[torch.Tensor, torch.Tensor, Sequence[str]]],
    transforms: Sequence[Transform],
    seed: int,
    preprocessing: Preprocessing,
    device: torch.device | str = "cpu",
    channels_last: bool = True,
    fold_batch_norm: bool = False,
    published: bool = False,
) -> PerImage:
    """Run ``model`` on every batch under every transformation; return per-image results.

    ``batches`` yields ``(x, labels, keys)`` with ``x`` the stored images (uint8, or float in
    [0, 1]; made float on the device), brought to the image the model sees by
    ``preprocessing.geometry``, then transformed, then ``preprocessing.normalise``-d (module
    docstring).
    The first transformation must be Identity: other transformations reuse its predictions for
    the images they leave unchanged. ``channels_last`` (default: on) runs the model with
    channels-last weights (the CPU convolution kernels run faster in that layout, CUDA's tensor
    cores too; the weights get their layout back afterwards). On CUDA the model runs under bf16
    autocast on channels-last inputs, as training does (``imagenot.train.loop``): the
    transformations stay float32, the logits are compared in float32. ``published``: the
    model is published weights, the reference whose numbers were measured in float32: it runs
    in full float32 on every device (no autocast, TF32 off: :func:`imagenot.evaluate.reference.numerics`), and should not
    be folded. ``fold_batch_norm`` runs a copy of the model with each batch
    norm folded into the convolution before it (:func:`fold_batch_norms`; for models torch.fx
    traces faithfully, such as the registry's). The model sees the same input either way.
    """
    if not transforms or transforms[0].n_uniforms != 0:
        raise ValueError("the first transformation must be Identity (no randomness)")
    dev = torch.device(device)
    model = model.to(dev).eval()
    if fold_batch_norm:
        model = fold_batch_norms(model)
    cuda, autocast = dev.type == "cuda", numerics(published, dev).autocast

    def forward(xt: torch.Tensor) -> torch.Tensor:
        xt = preprocessing.normalise(xt)  # a new tensor: x is every transformation's input
        if not cuda:
            return model(xt)
        xt = xt.contiguous(memory_format=torch.channels_last)
        # a model trained here runs as training does (bf16 autocast, float32 logits); published
        # weights in float32, as their numbers were measured (no autocast)
        with torch.autocast("cuda", dtype=autocast, enabled=autocast is not None):
            return model(xt).float()

    out, images = PerImage(), 0
    # the layout change (and its undoing) stays outside inference mode: the model's weights must
    # remain ordinary tensors (trainable) afterwards
    with _channels_last(model, channels_last), full_float32(published), torch.inference_mode():
        # images whose logits hold NaN or infinity, per transformation (summed on the device)
        nonfinite = torch.zeros(len(transforms), dtype=torch.int64, device=dev)
        for x, labels, keys in batches:
            x, labels, images = _as_float(x.to(dev)), labels.to(dev), images + len(keys)
            x = preprocessing.geometry(x)  # the image the model sees: the transformations' input
            base_logits = forward(x)
            hashes = key_hashes(keys)
            for i, t in enumerate(transforms):
                logits = base_logits
                u = transform_uniforms(t, seed, hashes, dev)
                rows = t.gate(u).nonzero().squeeze(1)
                if len(rows):
                    # an all-open gate needs no gather: the operations never modify their input
                    if len(rows) == len(u):
                        xt = t.op(x, u[:, 1:])
                    else:
                        xt = t.op(x.index_select(0, rows), u.index_select(0, rows)[:, 1:])
                    logits = base_logits.clone()
                    logits.index_copy_(0, rows, forward(xt).to(logits.dtype))
                nonfinite[i] += (~torch.isfinite(logits)).any(dim=1).sum()
                hits = topk_correct(logits, labels, 1), topk_correct(logits, labels, 5)
                out.add(t.name, keys, labels, logits.argmax(dim=1), *hits)
        check_finite_outputs(nonfinite.tolist(), [t.name for t in transforms], images)
    return out


def fold_batch_norms(model: torch.nn.Module) -> torch.nn.Module:
    """An inference copy of ``model`` (in eval mode) with every batch norm that directly follows
    a convolution folded into its weights (``torch.fx.experimental.optimization.fuse``): the same
    function up to float rounding, one pass over the activations fewer per fold.

    torch.fx traces the model symbolically, so a forward with Python side effects is not kept;
    use it for plain networks. A model torch.fx cannot trace is returned as it is (logged).
    """
    from torch.fx.experimental.optimization import fuse

    try:
        return fuse(model, inplace=False)
    except Exception as error:  # tracing fails in many ways on dynamic forwards
        log.warning(
            "evaluating %s unfused: torch.fx cannot trace it (%s)", type(model).__name__, error
        )
        return model


@contextlib.contextmanager
def _channels_last(model: torch.nn.Module, enabled: bool) -> Iterator[None]:
    """Run ``model`` with channels-last 4-D weights, then give them their previous layout back."""
    if not enabled:
        yield
        return

    def four_d() -> dict[str, torch.Tensor]:
        named = itertools.chain(model.named_parameters(), model.named_buffers())
        return {name: t for name, t in named if t.dim() == 4}

    strides = {name: t.stride() for name, t in four_d().items()}
    model.to(memory_format=torch.channels_last)
    try:
        yield
    finally:
        with torch.no_grad():
            for name, t in four_d().items():  # buffers are replaced, parameters keep identity
                if name in strides and t.stride() != strides[name]:
                    restored = torch.empty_strided(
                        t.shape, strides[name], dtype=t.dtype, device=t.device
                    )
                    t.data = restored.copy_(t.data)


def tensor_batches(
    images: torch.Tensor, labels: torch.Tensor, keys: Sequence[str], batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor, list[str]]]:
    """Batches of in-memory images (uint8 or [0, 1] float, one size) for
    :func:`evaluate_batches`, as stored (float in [0, 1])."""
    if not (len(images) == len(labels) == len(keys)):
        raise ValueError(f"{len(images)} images, {len(labels)} labels and {len(keys)} keys differ")
    for start in range(0, len(images), batch_size):
        part = slice(start, start + batch_size)
        yield _as_float(images[part]), labels[part], list(keys[part])


def evaluate_tensors(
    model: torch.nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    keys: Sequence[str],
    settings: RobustnessSettings,
    preprocessing: Preprocessing,
    device: torch.device | str = "cpu",
) -> pa.Table:
    """Per-image results of ``model`` on in-memory images under the configured transformations."""
    batches = tensor_batches(images, labels, keys, settings.batch_size)
    transforms = build_transforms(settings.transforms, settings.strength_side)
    return evaluate_batches(
        model, batches, transforms, settings.seed, preprocessing, device
    ).table()


def summarise(per_image: pa.Table, meta: Mapping[str, Any], confidence: float) -> pa.Table:
    """Per-transformation top-1/top-5 (percent), n and the Clopper-Pearson top-1 interval of
    coverage ``confidence`` (``evaluate.confidence``); a published run's rows carry its
    ``weights`` and ``published_top1`` as its ``result.json`` (``meta``) records them."""
    from scipy.stats import binomtest  # its exact interval: Clopper-Pearson's

    df = per_image.select(["transform", "correct", "correct_top5"]).to_pandas()
    hits = df.groupby("transform", sort=False).agg(
        n=("correct", "size"), k=("correct", "sum"), k5=("correct_top5", "sum")
    )
    names, (n, k, k5) = list(hits.index), hits.to_numpy(np.int64).T
    cis = [
        binomtest(int(a), int(b)).proportion_ci(confidence, "exact")
        for a, b in zip(k, n, strict=True)
    ]
    published = run_is_published(meta)  # such a run records both
    top1 = meta.get("published_top1") if published else None
    run = {"model": meta["model"], "dataset": meta["dataset"], "protocol": meta["protocol"]}
    run |= {"seed": int(meta["seed"]), "record_sha256": meta.get("record_sha256")}
    run |= {"weights": meta["weights"] if published else None}
    run |= {"published_top1": None if top1 is None else float(top1)}
    rows = {c: [v] * len(names) for c, v in run.items()}  # the table's columns: the schema's
    rows |= {"transform": names, "top1": 100.0 * k / n, "top5": 100.0 * k5 / n, "n": n}
    rows |= {"ci_low": [100.0 * c.low for c in cis], "ci_high": [100.0 * c.high for c in cis]}
    return pa.table(rows, schema=ROBUSTNESS_SCHEMA)


# --------------------------------------------------------------------------- I/O edges


def load_checkpoint(
    model_path: str | os.PathLike,
    result_path: str | os.PathLike,
    paths: Sequence[str | os.PathLike] = (),
) -> tuple[torch.nn.Module, FinalRecord]:
    """The trained network of ``.../final/seed-{seed}/model.safetensors`` and its run's record
    ``result_path`` (``result.json``), checked (:func:`imagenot.train.records.read_final`): its
    seal and keys, and its identity against its own path, the weights' and ``paths`` (what is
    read or written with it)."""
    from imagenot.evaluate.paths import RUN_DIR
    from imagenot.train.checkpoints import load_weights
    from imagenot.train.records import RUN_PATTERNS, read_final
    from imagenot.train.registry import build_model

    model_path = Path(model_path)
    info = read_final(
        result_path,
        paths=(model_path, *paths),
        patterns=(*RUN_PATTERNS, f"{RUN_DIR}/{{name}}"),  # an evaluation's outputs name it too
    )
    model = build_model(info.model, info.num_classes)
    # the weights result.json describes (its sha256), with the digest the workflow stores in
    # every weights file it writes, intact and finite (WeightsError otherwise)
    model.load_state_dict(load_weights(model_path, info.weights_sha256, require_digest=True))
    return model.eval(), info


def dataset_batches(
    dataset_dir: str | os.PathLike,
    split: str,
    batch_size: int,
    workers: int = 0,
    originals: Preprocessing | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, list[str]]]:
    """Decode each image of ``split`` once (DataLoader workers) into batches of the stored
    images (uint8; float in [0, 1] where an image stored at another size than its batch's first
    had to be resized to that size: materialised datasets store one size). With ``originals``
    (a published weight's protocol): the split's original files instead, each brought to the
    image the model sees in the workers as torchvision's reference evaluation does
    (``originals.pil_geometry``: uint8, ``crop_size`` square)."""
    from torch.utils.data import DataLoader

    from imagenot.core.dataset import ManifestDataset

    geometry = originals.pil_geometry if originals is not None else None
    ds = ManifestDataset(dataset_dir, split, geometry, originals=originals is not None)
    keys = ds.keys

    def collate(items):
        labels = torch.tensor([label for _, label in items])
        size = tuple(items[0][0].shape[-2:])
        if all(tuple(img.shape[-2:]) == size for img, _ in items):
            # the usual case: the batch stays uint8 until it is on the device (a quarter of a
            # float batch in the workers' queue: the reference's 480 px images are large)
            return torch.stack([img for img, _ in items]), labels
        images = [to_model_input(img.unsqueeze(0), size[-1])[0] for img, _ in items]
        return torch.stack(images), labels

    job_usage.declare_workers(workers)  # the job's recorded peak counts them
    loader = DataLoader(
        ds, batch_size=batch_size, shuffle=False, num_workers=workers, collate_fn=collate
    )
    start = 0
    for x, labels in loader:
        yield x, labels, keys[start : start + len(labels)]
        start += len(labels)


def resolve_device(device: str, gpu_job: bool = False) -> torch.device:
    """The evaluation's device by fact (``imagenot.core.device.resolve_device``): ``auto`` = the GPU
    when there is one; a job planned for a GPU (``gpu_job``) that sees none stops."""
    from imagenot.core.device import resolve_device as by_fact

    if device not in ("auto", "cpu", "cuda"):
        return torch.device(device)  # an explicit device such as cuda:1
    return torch.device(by_fact(device, gpu_job, torch.cuda.is_available()))


def evaluate_checkpoint(
    files: RobustnessFiles, settings: RobustnessSettings, workers: int, gpu_job: bool
) -> pa.Table:
    """Evaluate a final run (``files.model``, its record ``files.result``) on its dataset's
    ``settings.split`` (the shards ``files.manifest`` lists, in its folder; ``files.classes``
    the classes file beside it, :func:`imagenot.core.dataset.folder_of`), made on the dataset
    ``files.fingerprint`` names (:func:`imagenot.train.records.check_fingerprint`); write both tables
    (``files.robustness``, ``files.per_image``) atomically, on ``settings.device``
    (``train.device``: ``auto``, ``cpu``, ``cuda``); ``workers``: DataLoader workers (the job's
    cores but one). ``gpu_job``: the config plans this job for a GPU (``resources.gpus > 0``):
    without a CUDA device it stops (:func:`resolve_device`) before reading anything."""
    from imagenot.core.dataset import folder_of, read_fingerprint_file
    from imagenot.train.records import check_fingerprint

    dev = resolve_device(settings.device, gpu_job)
    model_path, result = files.model, files.result
    dataset_dir = folder_of(files.manifest, files.classes)
    model, info = load_checkpoint(
        model_path, result, (files.robustness, files.per_image, dataset_dir)
    )
    preprocessing = run_preprocessing(info, result)
    check_fingerprint(info, result, dataset_dir, read_fingerprint_file(files.fingerprint))
    log.info("evaluating %s on %s/%s on %s", model_path, dataset_dir, settings.split, dev)
    published = run_is_published(info)  # the reference: float32, unfolded (numerics)
    originals = reference_input(published, preprocessing, dataset_dir, settings.split)
    batches = dataset_batches(
        dataset_dir, settings.split, settings.batch_size, workers, originals=originals
    )
    if originals is not None:  # the workers made the image the model sees
        preprocessing = dataclasses.replace(preprocessing, resize_size=None)
    transforms = build_transforms(settings.transforms, settings.strength_side)
    run = (model, batches, transforms, settings.seed, preprocessing, dev)
    fold = numerics(published, dev).fold_batch_norm
    try:
        per_image = evaluate_batches(*run, fold_batch_norm=fold, published=published).table()
    except NonFiniteOutputs as exc:
        raise NonFiniteOutputs(f"{model_path}: {exc}") from None
    table = summarise(per_image, info, settings.confidence)
    check_published(table, info)
    write_parquet(per_image, files.per_image)
    write_parquet(table, files.robustness)
    return table
