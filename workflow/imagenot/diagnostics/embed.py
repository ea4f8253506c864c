"""Image embeddings for the similarity diagnostics: a CLIP image tower or a trained backbone.

Two encoders (config ``diagnostics.encoder.kind``):

- ``backbone``: a model trained by this workflow (``model.safetensors`` and its run's
  ``result.json``, docs/contracts.md), rebuilt with ``imagenot.train.registry.build_model``; the
  embedding is the penultimate feature vector, i.e. the input of the model's
  classifier head (the registry's ``head_module``), captured with a forward pre-hook;
- ``clip``: a CLIP model loaded with ``transformers`` from a hub id or a local directory
  (``CLIPModel.get_image_features``); offline, point it at a local copy holding the model and
  its processor config (``preprocessor_config.json``).

Images are uint8 CHW tensors streamed from a dataset on disk (``ManifestDataset``), prepared in
batches as the encoder expects: an encoder is ``(encode, prepare)``, ``prepare`` turning uint8
batches into its input. Each encoder's preprocessing comes from where its publisher keeps it,
never restated here: CLIP's from its image processor config (shortest-edge resize, bicubic for
OpenAI's, centre crop, its mean/std: ``AutoImageProcessor`` runs it), a backbone's from its
``result.json`` (``imagenot.train.facts.run_preprocessing``: published weights' resize, crop and
statistics).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from imagenot.core import job_usage
from imagenot.core.io import read_npy
from imagenot.diagnostics.settings import EmbedSettings

PROCESSOR_CONFIG = "preprocessor_config.json"  # transformers' image processor config file


def penultimate_encoder(model, head=None) -> Callable:
    """A function images -> features: the input of ``head`` (default: the last ``nn.Linear``)."""
    import torch

    if head is None:
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        if not linears:
            raise ValueError(f"{type(model).__name__} has no nn.Linear to take features before")
        head = linears[-1]
    captured: list = []
    head.register_forward_pre_hook(lambda _m, args: captured.append(args[0]))

    def encode(x):
        captured.clear()
        model(x)
        return torch.flatten(captured[-1], 1)

    return encode


def backbone_encoder(clip_model, checkpoint, result_path, device: str) -> tuple[tuple, str]:
    """The ``backbone`` entry of the encoder registry: ((encode, prepare), description) of a
    checkpoint trained (or published weights written) by this workflow, with its run's record
    ``result_path``; ``prepare`` is the run's own input protocol."""
    import torch

    from imagenot.evaluate.robustness import load_checkpoint
    from imagenot.train.facts import run_preprocessing
    from imagenot.train.registry import head_module

    # the network as its evaluation loads it: its record checked (seal, numbers, identity)
    model, result = load_checkpoint(checkpoint, result_path)
    protocol = run_preprocessing(result, result_path)
    encode = penultimate_encoder(model.to(device), head_module(model, result.model))

    def prepare(images):
        return protocol.apply(images.float().div_(255.0))

    return (torch.no_grad()(encode), prepare), f"backbone:{checkpoint}"


def clip_processor(model_id: str):
    """CLIP's own image processor, from the processor config beside the model (hub id or local
    dir): its resize (OpenAI's: shortest edge to 224, bicubic), centre crop and mean/std, as
    ``CLIPProcessor`` prepares images for the model. A local directory without the config is an
    error saying how to save it."""
    from transformers import AutoImageProcessor

    try:
        return AutoImageProcessor.from_pretrained(model_id)
    except OSError as exc:
        raise FileNotFoundError(
            f"diagnostics.encoder.clip_model {model_id}: no {PROCESSOR_CONFIG} "
            f"({str(exc).splitlines()[0]}); save it beside the model: "
            "transformers.CLIPProcessor.from_pretrained(HUB_ID).save_pretrained(DIR)"
        ) from None


def processor_side(processor) -> int | None:
    """The largest side of the image CLIP's ``processor`` hands the model: its centre crop
    (``crop_size``) when it crops, else its resize (``size``: ``shortest_edge`` or height and
    width); None where its config gives neither."""
    crops = getattr(processor, "do_center_crop", False)
    size = getattr(processor, "crop_size", None) if crops else getattr(processor, "size", None)
    if isinstance(size, int):
        return size
    sides = [v for k, v in dict(size or {}).items() if k in ("height", "width", "shortest_edge")]
    return max(sides) if sides else None


def check_clip_input(settings: EmbedSettings) -> None:
    """Before a CLIP model loads: refuse a processor whose input (:func:`processor_side`) is
    larger than ``settings.clip_image_size``, the side the split is stored at (the processor
    would enlarge every stored image, and the embeddings be those of blurred ones); nothing to
    check for another encoder."""
    model_id, size = settings.clip_model, settings.clip_image_size
    if model_id is None or size is None:
        return
    side = processor_side(clip_processor(model_id))
    if side is not None and side > size:
        raise ValueError(
            f"config key diagnostics.encoder.clip_image_size: {size} px is smaller than the "
            f"{side} px input of {model_id}'s {PROCESSOR_CONFIG}; set it to at least {side}"
        )


def clip_encoder(model_id: str, device: str):
    """(encode, prepare) for a transformers CLIP model (hub id or local dir); ``prepare`` is
    CLIP's image processor (:func:`clip_processor`) on the uint8 batch, on its device."""
    import torch
    from transformers import CLIPModel

    model = CLIPModel.from_pretrained(model_id).eval().to(device)
    processor = clip_processor(model_id)

    @torch.no_grad()
    def encode(x):
        out = model.get_image_features(pixel_values=x)
        return out if isinstance(out, torch.Tensor) else out.pooler_output

    def prepare(images):
        pixels = processor(images=images, return_tensors="pt")["pixel_values"]
        return pixels.to(device=images.device, dtype=torch.float32)

    prepare.processor = processor  # what it runs, for the record and the tests
    return encode, prepare


def load_encoder(
    kind: str,
    clip_model: str | None,
    checkpoint: str | None,
    result: str | None,
    device: str,
    command: str,
) -> tuple[tuple, str]:
    """``((encode, prepare), description)`` of the encoder ``kind`` (``diagnostics.encoder``,
    registered in :data:`imagenot.diagnostics.encoders.IMAGE_ENCODERS`): a backbone from
    ``checkpoint`` and its run's ``result``, or CLIP ``clip_model``; an unknown kind or a missing
    input is a one-line error naming ``command``."""
    from imagenot.core.registries import resolve
    from imagenot.diagnostics.encoders import IMAGE_ENCODERS

    if kind not in IMAGE_ENCODERS:
        raise SystemExit(
            f"imagenot {command}: --settings.kind {kind!r}: one of {', '.join(IMAGE_ENCODERS)}"
        )
    entry = IMAGE_ENCODERS.entry(kind)
    given = {"clip_model": clip_model, "checkpoint": checkpoint, "result": result}
    if missing := [n for n in entry.needs if not given[n]]:
        flags = " and ".join(f"--settings.{n}" if n == "clip_model" else f"--{n}" for n in missing)
        raise SystemExit(f"imagenot {command}: a {kind} encoder needs {flags}")
    return resolve(entry.build)(clip_model, checkpoint, result, device)


def clip_from_id(clip_model, checkpoint, result, device) -> tuple[tuple, str]:
    """The ``clip`` entry of the encoder registry: :func:`clip_encoder`."""
    return clip_encoder(clip_model, device), f"clip:{clip_model}"


def embed(images, encode: Callable, prepare: Callable, batch_size: int, device: str):
    """Embeddings (float32 numpy N x D) of uint8 images, in batches, in input order."""
    batches = (images[start : start + batch_size] for start in range(0, len(images), batch_size))
    return _embed_batches(batches, encode, prepare, device)


def _embed_batches(batches, encode: Callable, prepare: Callable, device: str) -> np.ndarray:
    """Embeddings (float32 numpy N x D) of uint8 image batches, in order."""
    import torch

    with torch.no_grad():
        chunks = [encode(prepare(batch.to(device))).float().cpu().numpy() for batch in batches]
    return np.concatenate(chunks).astype(np.float32) if chunks else np.zeros((0, 0), np.float32)


def first_per_class(labels: np.ndarray, limit: int | None) -> np.ndarray:
    """Indices of the first ``limit`` items of each label, in input order (all if None)."""
    import pandas as pd

    labels = np.asarray(labels, dtype=np.int64)
    if limit is None:
        return np.arange(labels.size)
    rank = pd.Series(labels).groupby(labels).cumcount().to_numpy()  # within its label
    return np.flatnonzero(rank < limit)


def embed_dataset(
    dataset_dir: str | os.PathLike,
    settings: EmbedSettings,
    encoder: tuple,
    workers: int,
    device: str,
) -> dict[str, np.ndarray]:
    """Embed one split of a dataset on disk (streamed through a DataLoader): every image of
    ``settings.split``, in manifest order, ``settings.batch_size`` at a time.

    Returns ``embeddings`` (N x D float32), ``labels`` (N), ``keys`` (N) and ``classes``.
    """
    from torch.utils.data import DataLoader

    from imagenot.core.dataset import ManifestDataset

    encode, prepare = encoder
    dataset = ManifestDataset(dataset_dir, settings.split)
    job_usage.declare_workers(workers)  # the job's recorded peak counts them
    loader = DataLoader(dataset, batch_size=settings.batch_size, num_workers=workers, shuffle=False)
    embeddings = _embed_batches((images for images, _ in loader), encode, prepare, device)
    bad = int((~np.isfinite(embeddings)).any(axis=1).sum()) if embeddings.size else 0
    if bad:  # finite weights can give them (a batch norm's variance below 0): never measured
        raise ValueError(
            f"{dataset_dir}: the encoder's embeddings of {bad} of {len(embeddings)} image(s) "
            "are not finite (NaN or infinity); refused"
        )
    arrays = {"embeddings": embeddings, "split": np.asarray(settings.split)}
    arrays |= {"labels": np.asarray(dataset.labels), "keys": np.asarray(dataset.keys, dtype=str)}
    return arrays | {"classes": np.asarray(dataset.classes, dtype=str)}


def write_embeddings(arrays: dict[str, np.ndarray], path: str | os.PathLike) -> None:
    """Save the arrays of :func:`embed_dataset` atomically as ``.npz``."""
    from imagenot.core.io import atomic_path

    with atomic_path(path, ".npz") as tmp:
        np.savez(tmp, **arrays)


read_embeddings = read_npy  # the arrays of write_embeddings, by name
