"""Feeding the model: the DataLoader of a training job, its batches, and datasets staged to
node-local disk.

Decoding happens in the loader workers on the CPU by default (``train.decode_on_gpu: false``):
each worker decodes its batch's JPEGs (libjpeg-turbo) and collates them into one uint8 tensor,
which crosses the worker queue as one shared-memory object, so a job holds a few file
descriptors per batch in flight whatever the batch size. ``resources.cpus_per_gpu`` sizes the
workers (docs/gpu.md: ~3,200 images/s per core at 224 px).

Decoding on the GPU (nvJPEG, ``train.decode_on_gpu: true``) is an explicit choice: with the
pinned torch/torchvision, ``decode_jpeg(device="cuda")`` allocates its outputs on the caller's
stream but writes them on nvJPEG's own (pytorch/vision issue 9606), which silently corrupted
images on H100 while the previous step's kernels were still queued. :func:`decode_batch`
therefore waits for the device before decoding and for the decode before the images are used
(two synchronisations per batch: the price of correctness). The workers then only read bytes,
and a batch of JPEGs crosses the queue as one flat buffer plus offsets (:class:`EncodedBatch`):
a list of per-image tensors took one descriptor each, 1,000 per worker at prefetch 4, and died
with "Too many open files" under ``ulimit -n 1024``.

Shared cluster filesystems serve many small random reads slowly; ``train.stage_to_local``
copies a dataset's shards to ``$TMPDIR`` (node-local on most clusters) before the first epoch.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import shutil
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from imagenot.train.registry import IMAGENET_MEAN, IMAGENET_STD

log = logging.getLogger(__name__)


@functools.cache
def _scale_shift(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``1 / (255 std)`` and ``-mean / std`` (ImageNet's) as 1 x 3 x 1 x 1 tensors on ``device``,
    made once per device (as timm's PrefetchLoader): building them per batch was a blocking
    host-to-device copy every step."""
    mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float64).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, dtype=torch.float64).view(1, 3, 1, 1)
    scale, shift = 1.0 / (255.0 * std), -mean / std
    return scale.float().to(device), shift.float().to(device)


def preprocess(images: torch.Tensor, image_size: int) -> torch.Tensor:
    """uint8 N x 3 x H x W -> float, resized to ``image_size``, ImageNet-normalised
    (``(x / 255 - mean) / std``).

    Why one multiply-add in place: ``(x - mean) / std`` on a fresh float tensor allocated two
    more batch-sized tensors and made four passes over them; on the CPU (the tests' and
    benchmarks' device) that cost more than decoding the batch (183 vs 75 ms for 256 images at
    224 px, one core; docs/gpu.md). Resizing is linear, so it may come before the scaling."""
    x = images.to(torch.float32)
    if x.shape[-1] != image_size or x.shape[-2] != image_size:
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", antialias=True)
    scale, shift = _scale_shift(x.device)
    return x.mul_(scale).add_(shift)


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

    def __init__(self, data, num_workers: int, pin: bool = False):
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


@dataclass(frozen=True)
class EncodedBatch:
    """A batch of JPEGs as one flat uint8 buffer (every image's bytes back to back) and int64
    offsets (n + 1): one shared-memory object per batch crosses the worker queue, not one per
    image (module docstring)."""

    data: torch.Tensor
    offsets: torch.Tensor

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def images(self) -> list[torch.Tensor]:
        """Each image's bytes (views of the buffer), as ``decode_jpeg`` takes them."""
        bounds = self.offsets.tolist()
        return [self.data[a:b] for a, b in itertools.pairwise(bounds)]

    def pin_memory(self) -> EncodedBatch:
        """The DataLoader's ``pin_memory`` calls this for a type it does not know."""
        return EncodedBatch(self.data.pin_memory(), self.offsets)


class EncodedImages(Dataset):
    """``ds[i] -> (uint8 1-D tensor of the JPEG bytes, int label)`` over a ManifestDataset:
    loader workers only read and collate (:func:`collate_encoded`); :func:`decode_batch`
    decodes where the model runs (``train.decode_on_gpu``)."""

    def __init__(self, manifest):
        self.manifest = manifest

    @staticmethod
    def collate(items):
        return collate_encoded(items)

    @staticmethod
    def empty():
        none = EncodedBatch(torch.empty(0, dtype=torch.uint8), torch.zeros(1, dtype=torch.int64))
        return none, torch.empty(0, dtype=torch.int64)

    def __len__(self) -> int:
        return len(self.manifest)

    def __getitem__(self, index: int):
        data = bytearray(self.manifest.read_bytes(index))
        return torch.frombuffer(data, dtype=torch.uint8), int(self.manifest.labels[index])

    def __getattr__(self, name):  # classes, keys, labels... of the wrapped dataset
        if name == "manifest":
            raise AttributeError(name)
        return getattr(self.manifest, name)


def collate_encoded(items) -> tuple[EncodedBatch, torch.Tensor]:
    """A batch of encoded images: (:class:`EncodedBatch`, int64 labels)."""
    sizes = torch.tensor([0] + [len(data) for data, _ in items], dtype=torch.int64)
    data = torch.cat([data for data, _ in items]) if items else torch.empty(0, dtype=torch.uint8)
    labels = torch.tensor([label for _, label in items], dtype=torch.int64)
    return EncodedBatch(data, sizes.cumsum(0)), labels


def decode_batch(
    encoded: EncodedBatch | list[torch.Tensor], image_size: int, device
) -> torch.Tensor:
    """JPEG bytes -> uint8 N x 3 x image_size x image_size on ``device`` (nvJPEG on CUDA,
    libjpeg-turbo on the CPU); images resized (antialiased bilinear) when their size differs,
    one call per distinct size (a batch of a materialised dataset has one)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    device = torch.device(device)
    if isinstance(encoded, EncodedBatch):
        encoded = encoded.images()
    if not encoded:
        return torch.empty((0, 3, image_size, image_size), dtype=torch.uint8, device=device)
    if device.type == "cuda":
        # pytorch/vision#9606 (module docstring): nothing queued may touch memory nvJPEG is
        # about to write, and nothing may read its outputs before its own stream is done
        torch.cuda.current_stream(device).synchronize()
        images = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
        torch.cuda.synchronize(device)
    else:
        images = decode_jpeg(encoded, mode=ImageReadMode.RGB)
    out = torch.empty((len(images), 3, image_size, image_size), dtype=torch.uint8, device=device)
    by_size: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, image in enumerate(images):
        by_size[tuple(image.shape[-2:])].append(i)
    for size, index in by_size.items():
        batch = torch.stack([images[i] for i in index])
        if size != (image_size, image_size):
            batch = F.interpolate(
                batch.float(), size=(image_size, image_size), mode="bilinear", antialias=True
            )
            batch = batch.round_().clamp_(0, 255).to(torch.uint8)
        out[index] = batch
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
