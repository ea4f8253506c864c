"""The published reference exactly as published: what its evaluation computes in, and on.

Published weights (the ImageNet reference) are evaluated as their accuracies were measured:
float32 numbers of the unfused networks (:func:`numerics`; a model trained here runs as it
trained, bf16 autocast on CUDA), on the original files of the test images
(:func:`reference_input`: torchvision's resize and centre crop on the decoded original, not on
the dataset's stored square copy).

Why apart from :mod:`imagenot.evaluate.robustness`: these are facts about the run (its
``result.json``), the device and the dataset, tested on their own
(tests/test_evaluate_robustness.py, tests/test_reference_input.py); the evaluation loop only asks
them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from imagenot.train.facts import Preprocessing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Numerics:
    """How a model's forward pass is computed in its evaluation: ``autocast`` (the dtype of
    CUDA autocast, None: float32 throughout), ``fold_batch_norm`` and ``tf32`` (whether float32
    matrix products and convolutions may round through TF32, torch's CUDA default for
    convolutions)."""

    autocast: torch.dtype | None
    fold_batch_norm: bool
    tf32: bool


def numerics(published: bool, device: torch.device | str) -> Numerics:
    """The evaluation's arithmetic for a run: published weights are evaluated as they were
    published (float32, TF32 off, batch norms unfolded: torchvision's accuracies are float32
    numbers of the unfused networks); a model trained here as it trained (bf16 autocast on CUDA,
    ``imagenot.train.loop``; batch norms folded, the same function up to rounding). On the
    CPU both run float32."""
    cuda = torch.device(device).type == "cuda"
    if published:
        return Numerics(autocast=None, fold_batch_norm=False, tf32=False)
    return Numerics(autocast=torch.bfloat16 if cuda else None, fold_batch_norm=True, tf32=True)


def run_is_published(info: Mapping[str, Any]) -> bool:
    """Whether a run's ``result.json`` (``info``) is published weights (written by
    ``imagenot.train.published.run_published``), not a model trained here."""
    return info.get("source") == "published"


@contextlib.contextmanager
def full_float32(enabled: bool) -> Iterator[None]:
    """With ``enabled``: CUDA float32 matrix products and convolutions in IEEE float32 (no TF32),
    restored afterwards."""
    if not enabled:
        yield
        return
    conv, matmul = torch.backends.cudnn.conv, torch.backends.cuda.matmul
    before = conv.fp32_precision, matmul.fp32_precision
    conv.fp32_precision = matmul.fp32_precision = "ieee"
    try:
        yield
    finally:
        conv.fp32_precision, matmul.fp32_precision = before


def reference_input(
    published: bool, preprocessing: Preprocessing, dataset_dir: str | os.PathLike, split: str
) -> Preprocessing | None:
    """The protocol whose geometry runs on the split's original files (published weights on a
    dataset that stores them: :mod:`imagenot.core.dataset`), or None: the stored copy is read. A
    published weight evaluated on the copy is logged as a warning: its input is not the
    published protocol's (a mean of 2-7 levels of 255 apart, docs/contracts.md)."""
    from imagenot.core.dataset import has_originals

    if not published or preprocessing.resize_size is None:
        return None
    if has_originals(dataset_dir, split):
        return preprocessing
    log.warning(
        "%s: split %s stores no originals; the published weights see their protocol run on the "
        "stored copy, not on the original files their accuracy was measured on (rematerialise "
        "the dataset with this version: published-weights datasets keep their test originals)",
        dataset_dir,
        split,
    )
    return None
