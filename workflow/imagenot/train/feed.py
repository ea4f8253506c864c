"""Feeding a GPU: JPEG decoding on the device, and datasets staged to node-local disk.

Why: AlexNet or ResNet-18 on an H100 wants ~10,000 images/s, about eight cores of CPU JPEG
decoding at 224 px (docs/gpu.md). On CUDA jobs the loader workers therefore only read the
stored JPEG bytes and the batch is decoded on the GPU by nvJPEG
(``torchvision.io.decode_jpeg(device="cuda")``); elsewhere the same function decodes on the CPU.
Shared cluster filesystems serve many small random reads slowly; ``train.stage_to_local``
copies a dataset's shards to ``$TMPDIR`` (node-local on most clusters) before the first epoch.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from imagenot.train.registry import IMAGENET_MEAN, IMAGENET_STD

log = logging.getLogger(__name__)


def preprocess(images: torch.Tensor, image_size: int) -> torch.Tensor:
    """uint8 N x 3 x H x W -> float, [0, 1], resized to ``image_size``, ImageNet-normalised."""
    x = images.float().div_(255.0)
    if x.shape[-1] != image_size or x.shape[-2] != image_size:
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", antialias=True)
    mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


@dataclass(frozen=True)
class InMemory:
    """A whole split as tensors: uint8 N x 3 x H x W images and int64 labels."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)


class _Batches:
    """A batch sampler whose batches are replaced every epoch: persistent DataLoader workers
    then serve every epoch (they are not re-forked), and the sampler stays seeded and exact."""

    def __init__(self):
        self.batches: list[list[int]] = []

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class Feeder:
    """(uint8 images, labels) for lists of index tensors: slices of an InMemory split, else one
    persistent DataLoader (workers kept across epochs, ``prefetch_factor`` batches ahead each,
    pinned memory for CUDA) over any Dataset of (uint8 CHW tensor, label). An empty index list
    gives an empty batch (a rank with no share of a short last batch)."""

    PREFETCH = 4

    def __init__(self, data, num_workers: int = 0, pin: bool = False):
        self.data = data
        self.sampler = _Batches()
        self.loader = None
        if not isinstance(data, InMemory):
            self.loader = torch.utils.data.DataLoader(
                data,
                batch_sampler=self.sampler,
                num_workers=num_workers,
                pin_memory=pin,
                persistent_workers=num_workers > 0,
                prefetch_factor=self.PREFETCH if num_workers > 0 else None,
                collate_fn=getattr(data, "collate", None),  # encoded JPEGs: a list
                # its own generator: creating the iterator must not draw from the global random
                # state, which a mid-epoch checkpoint restores for the model's dropout
                generator=torch.Generator().manual_seed(0),
            )

    def _empty(self):
        if hasattr(self.data, "empty"):
            return self.data.empty()
        image = self.data.images[:0] if isinstance(self.data, InMemory) else None
        if image is None:
            first, _ = self.data[0]
            image = torch.empty((0, *first.shape), dtype=torch.uint8)
        return image, torch.empty(0, dtype=torch.int64)

    def epoch(self, pieces: list[torch.Tensor]) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        if isinstance(self.data, InMemory):
            return ((self.data.images[idx], self.data.labels[idx]) for idx in pieces)
        self.sampler.batches = [idx.tolist() for idx in pieces if len(idx)]
        if len(self.sampler.batches) == len(pieces):
            return iter(self.loader)
        loaded = iter(self.loader)
        return (next(loaded) if len(idx) else self._empty() for idx in pieces)


class EncodedImages(Dataset):
    """``ds[i] -> (uint8 1-D tensor of the JPEG bytes, int label)`` over a ManifestDataset:
    loader workers only read; :func:`decode_batch` decodes where the model runs."""

    def __init__(self, manifest):
        self.manifest = manifest

    @staticmethod
    def collate(items):
        return collate_encoded(items)

    @staticmethod
    def empty():
        return [], torch.empty(0, dtype=torch.int64)

    def __len__(self) -> int:
        return len(self.manifest)

    def __getitem__(self, index: int):
        data = bytearray(self.manifest.read_bytes(index))
        return torch.frombuffer(data, dtype=torch.uint8), int(self.manifest.labels[index])

    def __getattr__(self, name):  # classes, keys, labels... of the wrapped dataset
        if name == "manifest":
            raise AttributeError(name)
        return getattr(self.manifest, name)


def collate_encoded(items):
    """A batch of encoded images: (list of byte tensors, int64 labels)."""
    return [data for data, _ in items], torch.tensor([label for _, label in items])


def decode_batch(encoded: list[torch.Tensor], image_size: int, device) -> torch.Tensor:
    """JPEG bytes -> uint8 N x 3 x image_size x image_size on ``device`` (nvJPEG on CUDA,
    libjpeg-turbo on the CPU); each image resized (antialiased bilinear) when its size differs."""
    from torchvision.io import ImageReadMode, decode_jpeg

    device = torch.device(device)
    if not encoded:
        return torch.empty((0, 3, image_size, image_size), dtype=torch.uint8, device=device)
    images = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
    out = torch.empty((len(images), 3, image_size, image_size), dtype=torch.uint8, device=device)
    for i, image in enumerate(images):
        if tuple(image.shape[-2:]) != (image_size, image_size):
            image = F.interpolate(
                image.unsqueeze(0).float(),
                size=(image_size, image_size),
                mode="bilinear",
                antialias=True,
            )
            image = image.round_().clamp_(0, 255).to(torch.uint8)[0]
        out[i] = image
    return out


def stage_to_local(dataset_dir: Path, fingerprint: str, root: str | None = None) -> Path:
    """A copy of the dataset under node-local ``root`` (default ``$TMPDIR``), made once per node
    and dataset version (the directory is named by the fingerprint and renamed into place when
    complete, so concurrent jobs never read a partial copy). Without a local root: the
    dataset itself."""
    root = root or os.environ.get("TMPDIR")
    if not root:
        log.warning("train.stage_to_local: $TMPDIR is not set; reading %s in place", dataset_dir)
        return dataset_dir
    target = Path(root) / "imagenot-datasets" / fingerprint[:16]
    if (target / "fingerprint.txt").is_file():
        return target
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.copytree(dataset_dir, partial, dirs_exist_ok=True)
    try:
        partial.rename(target)
    except OSError:  # another job on this node finished its copy first
        shutil.rmtree(partial, ignore_errors=True)
    log.info("staged %s to %s", dataset_dir, target)
    return target
