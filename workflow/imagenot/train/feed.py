"""Feeding the model: the DataLoader of a training job, its batches, and datasets staged to
node-local disk.

Decoding happens in the loader workers on the CPU by default (``train.decode_on_gpu: false``):
each worker decodes its batch's JPEGs (libjpeg-turbo) straight into a slot of a ring of
shared-memory batch buffers that the job allocates once (:class:`BatchRing`); only the slot's
number crosses the worker queue. Why a ring: collating every batch into a fresh shared-memory
tensor (the DataLoader's ``default_collate``, timm's ``fast_collate``) cost ~40 ms per batch of
256 at 224 px to allocate and first touch, against ~105 ms of decoding; the workers reached 0.74
of bare decoding per core (docs/gpu.md). The ring holds one slot per batch the DataLoader may
have in flight (workers x prefetch) plus the one the trainer holds, and the sampler checks,
batch by batch, that no slot is refilled while the trainer may still read it. The price: a
batch's images are valid until the next batch is asked for (copy what you keep; as in DALI).
``resources.cpus_per_gpu`` sizes the workers (docs/gpu.md: ~3,200 images/s per core at 224 px).

Decoding on the GPU (nvJPEG, ``train.decode_on_gpu``: the models it names) lives in
``imagenot.train.decode``: the workers only read bytes, a batch crosses the queue as one flat
buffer (``EncodedBatch``), and a :class:`Feeder` given ``decode_on`` decodes each batch ahead of
the trainer on a thread and a CUDA stream of its own (``decode.DecodeAhead``; why, and how it
avoids pytorch/vision#9606's corruption: that module's docstring).

Shared cluster filesystems serve many small random reads slowly; ``train.stage_to_local``
copies a dataset's shards to ``$TMPDIR`` (node-local on most clusters) before the first epoch.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import time
import uuid
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from imagenot.core.paths import FINGERPRINT_FILE
from imagenot.train.decode import (  # noqa: F401  (the feed's names for its readers)
    DecodeAhead,
    EncodedBatch,
    EncodedImages,
    collate_encoded,
    decode_batch,
)
from imagenot.train.interrupts import Preempted

log = logging.getLogger(__name__)


@functools.cache
def _scale_shift(
    device: torch.device, mean: tuple[float, ...], std: tuple[float, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``1 / (255 std)`` and ``-mean / std`` as 1 x 3 x 1 x 1 tensors on ``device``, made once
    per device and statistics (as timm's PrefetchLoader): building them per batch was a
    blocking host-to-device copy every step."""
    mean_t = torch.tensor(mean, dtype=torch.float64).view(1, 3, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float64).view(1, 3, 1, 1)
    scale, shift = 1.0 / (255.0 * std_t), -mean_t / std_t
    return scale.float().to(device), shift.float().to(device)


def preprocess(
    images: torch.Tensor,
    image_size: int,
    normalisation: dict,
    memory_format=torch.contiguous_format,
) -> torch.Tensor:
    """uint8 N x 3 x H x W -> float, resized to ``image_size``, normalised with the job's
    ``normalisation`` (``(x / 255 - mean) / std``: the starting weights' own statistics for
    FT/TL from published weights, else ``train.normalisation``; ``JobSettings``), laid out in
    ``memory_format`` (the model's: channels-last on GPUs); the conversion also changes the
    layout, whatever the input's (the loader's batches are channels-last, :class:`BatchRing`).

    Why one multiply-add in place: ``(x - mean) / std`` on a fresh float tensor allocated two
    more batch-sized tensors and made four passes over them; on the CPU (the tests' and
    benchmarks' device) that cost more than decoding the batch (183 vs 75 ms for 256 images at
    224 px, one core; docs/gpu.md). Resizing is linear, so it may come before the scaling."""
    x = images.to(torch.float32, memory_format=memory_format)
    if x.shape[-1] != image_size or x.shape[-2] != image_size:
        x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", antialias=True)
        x = x.contiguous(memory_format=memory_format)
    mean, std = normalisation["mean"], normalisation["std"]
    scale, shift = _scale_shift(x.device, tuple(map(float, mean)), tuple(map(float, std)))
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


class RingOverrun(RuntimeError):
    """A ring slot was about to be refilled while the trainer may still read it: the DataLoader
    ran further ahead than ``workers x prefetch`` batches (a torch change), never silently."""


# The rings of this process by id, for the pin-memory thread (which only sees slot numbers).
_RINGS: weakref.WeakValueDictionary[str, BatchRing] = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class _Task:
    """What the sampler hands a worker: the batch's sequence number, its slot, its items."""

    seq: int
    slot: int
    indices: list[int]


@dataclass(frozen=True)
class _Filled:
    """A worker's answer: ring ``ring``'s ``slot`` holds batch ``seq``'s ``n`` images."""

    ring: str
    seq: int
    slot: int
    n: int

    def pin_memory(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The DataLoader's pin-memory thread (CUDA jobs) calls this: pinned copies, after
        which the slot is free (the copy happens before the batch is handed out)."""
        images, labels = _RINGS[self.ring].view(self)
        return images.pin_memory(), labels.pin_memory()


class BatchRing:
    """Shared-memory batch buffers reused across steps (module docstring): ``slots`` x
    ``capacity`` images of ``shape`` (uint8) and their int64 labels, allocated once, before
    the workers start (they inherit it, or receive it pickled as shared memory)."""

    def __init__(self, slots: int, capacity: int, shape: tuple[int, ...]):
        self.id = uuid.uuid4().hex
        self.slots, self.capacity = slots, capacity
        # stored channels-last (N x H x W x C), viewed as N x C x H x W: a decoded JPEG is
        # already laid out so (libjpeg writes pixels), and copying it into an NCHW-contiguous
        # slot was a transposing copy of ~70 us per 224 px image, a quarter of its decoding
        channels, height, width = shape
        base = torch.empty((slots, capacity, height, width, channels), dtype=torch.uint8)
        self.images = base.share_memory_().permute(0, 1, 4, 2, 3)
        self.labels = torch.empty((slots, capacity), dtype=torch.int64).share_memory_()
        # training process only (the sampler's checks): the batch the trainer holds, and the
        # first batch of this epoch not yet handed out (from it on, batches are in flight)
        self.held: int | None = None
        self.in_flight_from = 0
        _RINGS[self.id] = self

    def refusal(self, seq: int) -> str | None:
        """Why batch ``seq`` may not be dispatched now (None: it may): its slot would be
        refilled while the trainer holds that slot's batch, or while a batch in flight (not
        yet handed out) waits in it."""
        if seq - self.in_flight_from >= self.slots:
            return f"batches {self.in_flight_from}..{seq} in flight, {self.slots} slots"
        if self.held is not None and (seq - self.held) % self.slots == 0:
            return f"the trainer holds batch {self.held} in its slot"
        return None

    def fill(self, data, task: _Task) -> _Filled:
        """In a worker: decode ``task``'s items into its slot (each image is copied once, into
        memory that is already mapped)."""
        images, labels = self.images[task.slot], self.labels[task.slot]  # (Feeder.epoch: fits)
        for j, index in enumerate(task.indices):
            image, label = data[index]
            if image.shape != images.shape[1:]:
                name = data.keys[index] if hasattr(data, "keys") else index
                raise ValueError(
                    f"item {name}: image of {tuple(image.shape)}, the split's first is "
                    f"{tuple(images.shape[1:])}: a streamed split needs one image size"
                )
            images[j].copy_(image)
            labels[j] = label
        return _Filled(self.id, task.seq, task.slot, len(task.indices))

    def view(self, filled: _Filled) -> tuple[torch.Tensor, torch.Tensor]:
        """The images of a filled slot (a view, valid until the next batch is asked for) and a
        copy of its labels (small; callers keep them)."""
        n = filled.n
        return self.images[filled.slot, :n], self.labels[filled.slot, :n].clone()


class _RingSampler(_Batches):
    """Numbers the epoch's batches across epochs and gives each its slot (sequence number
    modulo the slots); refuses a slot the trainer may still read (:class:`RingOverrun`)."""

    def __init__(self):
        super().__init__()
        self.ring: BatchRing | None = None
        self.sent = 0

    def __iter__(self):
        ring = self.ring
        if not self.batches:  # (an epoch of empty shares only: no ring may exist yet)
            return
        # runs when the DataLoader first asks (after a new epoch's iterator has drained what an
        # abandoned one left in flight): batches before this one are done
        ring.in_flight_from = self.sent
        for batch in self.batches:
            seq, self.sent = self.sent, self.sent + 1
            why = ring.refusal(seq)
            if why is not None:
                raise RingOverrun(f"batch {seq} may not refill slot {seq % ring.slots}: {why}")
            yield _Task(seq, seq % ring.slots, batch)


class _IntoRing:
    """The Dataset the workers see: ``__getitems__`` (the DataLoader's batched fetch) fills the
    task's ring slot from ``data``."""

    def __init__(self, data, sampler: _RingSampler):
        self.data, self.sampler = data, sampler

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        return self.data[index]

    def __getitems__(self, task: _Task) -> _Filled:
        return self.sampler.ring.fill(self.data, task)


def _as_is(batch):
    """The collate function of ring batches: the worker's answer is already the batch."""
    return batch


class Feeder:
    """(uint8 images, labels) for lists of index tensors: slices of an InMemory split, else one
    persistent DataLoader (workers kept across epochs, ``prefetch_factor`` batches ahead each,
    pinned memory for CUDA) over any Dataset of (uint8 CHW tensor, label); with workers, the
    images arrive in a :class:`BatchRing` of batches of at most ``largest`` images, valid until
    the next batch or epoch is asked for. An empty index list gives an empty batch (a rank with no share
    of a short last batch). Encoded JPEGs (``decode.EncodedImages``) with ``decode_on`` (the
    training device) arrive decoded there, at their stored size, decoded ahead of the trainer
    (``decode.DecodeAhead``); without it, as ``EncodedBatch`` for :func:`to_device` to decode."""

    PREFETCH = 4

    def __init__(self, data, num_workers: int, largest: int, pin: bool = False, decode_on=None):
        self.data = data
        self.largest = largest
        self.ring_sampler = None
        self.loader = None
        collate = getattr(data, "collate", None)  # encoded JPEGs: one flat buffer per batch
        ahead = collate is not None and decode_on is not None
        self.decode_ahead = DecodeAhead(decode_on) if ahead else None
        if isinstance(data, InMemory):
            return
        dataset, self.sampler = data, _Batches()
        if num_workers > 0 and collate is None:
            self.ring_sampler = self.sampler = _RingSampler()
            dataset, collate = _IntoRing(data, self.sampler), _as_is
        self.loader = torch.utils.data.DataLoader(
            dataset,
            batch_sampler=self.sampler,
            num_workers=num_workers,
            pin_memory=pin,
            persistent_workers=num_workers > 0,
            prefetch_factor=self.PREFETCH if num_workers > 0 else None,
            collate_fn=collate,
            # its own generator: creating the iterator must not draw from the global random
            # state, which a mid-epoch checkpoint restores for the model's dropout
            generator=torch.Generator().manual_seed(0),
        )

    def _empty(self):
        if hasattr(self.data, "empty"):
            return self.data.empty()
        image = torch.empty((0, *self.data[0][0].shape), dtype=torch.uint8)
        return image, torch.empty(0, dtype=torch.int64)

    def epoch(self, pieces: list[torch.Tensor]) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        if isinstance(self.data, InMemory):
            return ((self.data.images[idx], self.data.labels[idx]) for idx in pieces)
        self.sampler.batches = [idx.tolist() for idx in pieces if len(idx)]
        too_big = max((len(idx) for idx in pieces), default=0)
        if too_big > self.largest:
            raise ValueError(f"a batch of {too_big} images; this feeder serves {self.largest}")
        sampler = self.ring_sampler
        if sampler is not None and sampler.ring is None and len(self.data):
            # allocated before the first iterator starts the workers, which inherit it (also
            # when this epoch has only empty shares: the workers start now, and for good): one
            # slot per batch in flight (workers x prefetch) and the one the trainer holds
            probe = getattr(self.data, "image_shape", None)  # the header: no decode here
            shape = tuple(probe() if probe is not None else self.data[0][0].shape)
            slots = self.loader.num_workers * self.PREFETCH + 1
            sampler.ring = BatchRing(slots, self.largest, shape)
        if sampler is not None and sampler.ring is not None:
            sampler.ring.held = None  # a new epoch gives back the batch held from the last
        served = self._serve(iter(self.loader), pieces)
        return served if self.decode_ahead is None else self.decode_ahead.serve(served)

    def _serve(self, loaded, pieces: list[torch.Tensor]):
        ring = self.ring_sampler.ring if self.ring_sampler is not None else None
        for idx in pieces:
            if not len(idx):
                yield self._empty()
                continue
            if ring is None:
                yield next(loaded)
                continue
            ring.held = None  # asking for the next batch gives the last one back
            item = next(loaded)
            seq, ring.in_flight_from = ring.in_flight_from, ring.in_flight_from + 1
            if isinstance(item, _Filled):  # (pinned batches arrive as tensors, slot freed)
                if item.seq != seq:
                    raise RingOverrun(f"batch {item.seq} handed out where {seq} was due")
                ring.held = seq
                item = ring.view(item)
            yield item


def layout(device: torch.device) -> torch.memory_format:
    """The memory format of a model and its batches on ``device``: channels-last on CUDA."""
    return torch.channels_last if device.type == "cuda" else torch.contiguous_format


def autocast(device: torch.device):
    """The mixed precision every forward pass runs under (training, evaluation, stored
    features): bfloat16 on CUDA, none on the CPU (so CPU runs stay deterministic)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def to_device(
    x,
    y: torch.Tensor,
    device: torch.device,
    image_size: int,
    normalisation: dict,
    features: bool = False,
):
    """A batch ready for the model; encoded JPEGs (not decoded ahead by the feed) are decoded on
    ``device`` first, at their stored size, then :func:`preprocess` (resized to ``image_size``, normalised with ``normalisation``).
    ``features``: the batch is stored backbone features (``imagenot.train.features``: the
    head's input, preprocessed when they were computed) and only moves to the device. One
    function for the loop and for feature extraction, so both see the same pixels."""
    if features:
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    if isinstance(x, EncodedBatch | list):  # at the stored size: preprocess resizes (float)
        x = decode_batch(x, image_size if not len(x) else None, device)
    x = preprocess(x.to(device, non_blocking=True), image_size, normalisation, layout(device))
    return x, y.to(device, non_blocking=True)


# room a staged copy must leave on the node-local disk: 5% of the dataset and 1 GB besides
STAGE_SLACK, STAGE_SPARE = 0.05, 1 << 30


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (a dataset folder)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def staging_room(need: int, root: str | os.PathLike) -> tuple[bool, int]:
    """Whether a copy of ``need`` bytes fits under ``root`` with room to spare
    (:data:`STAGE_SLACK`, :data:`STAGE_SPARE`: other jobs on the node write there too), and the
    bytes free there."""
    free = shutil.disk_usage(root).free
    return need * (1 + STAGE_SLACK) + STAGE_SPARE <= free, free


def stage_to_local(
    dataset_dir: Path, fingerprint: str, root: str | None = None, deadline: float | None = None
) -> Path:
    """A copy of the dataset under node-local ``root`` (default ``$TMPDIR``), made once per node
    and dataset version (the directory is named by the fingerprint and renamed into place when
    complete, so concurrent jobs never read a partial copy). Without a local root, or where it
    lacks the room for the copy (:func:`staging_room`): the dataset itself, with a warning.
    ``deadline`` (the job's, ``interrupts.job_deadline``): checked before each
    file; once it has come the partial copy is removed and ``Preempted`` raised (the job exits
    75 and its retry stages again), so staging a large dataset cannot outlast the time limit."""
    root = root or os.environ.get("TMPDIR")
    if not root:
        log.warning("train.stage_to_local: $TMPDIR is not set; reading %s in place", dataset_dir)
        return dataset_dir
    target = Path(root) / "imagenot-datasets" / fingerprint[:16]
    if (target / FINGERPRINT_FILE).is_file():
        return target
    need = tree_bytes(dataset_dir)
    Path(root).mkdir(parents=True, exist_ok=True)
    fits, free = staging_room(need, root)
    if not fits:
        log.warning(
            "train.stage_to_local: %s has %.1f GB free, the dataset %.1f GB (and %.0f%% + 1 GB "
            "to spare); reading %s in place",
            root, free / 1e9, need / 1e9, 100 * STAGE_SLACK, dataset_dir,
        )  # fmt: skip
        return dataset_dir
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")

    def copy(src, dst):
        if deadline is not None and time.time() >= deadline:
            raise Preempted("deadline reached while staging the dataset: exiting")
        return shutil.copy2(src, dst)

    try:
        shutil.copytree(dataset_dir, partial, dirs_exist_ok=True, copy_function=copy)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    try:
        partial.rename(target)
    except OSError:  # another job on this node finished its copy first
        shutil.rmtree(partial, ignore_errors=True)
    log.info("staged %s to %s", dataset_dir, target)
    return target
