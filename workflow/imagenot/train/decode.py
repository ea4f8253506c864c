"""JPEG decoding where the model runs (``train.decode_on_gpu``): the loader workers only read each
image's bytes, a batch crosses the worker queue as one flat buffer (:class:`EncodedBatch`), and
:func:`decode_batch` decodes it on the training device (nvJPEG on CUDA, libjpeg-turbo on the
CPU, where the tests run the same code).

Why: a GPU node has 8-16 cores per GPU, and CPU decoding of the paper's 256 px JPEGs fed ~840 to
~1,560 images/s per worker on the first GPU run (docs/gpu.md): AlexNet trains at ~36,000 and
ResNet-18 at ~13,000 images/s on an H200, more than 16 cores decode. The slower five models are
fed by the CPU workers; the config names the models that decode on the GPU
(``train.decode_on_gpu``: a list, or true/false for all), and the preflight's feed check
measures both ways per model and names the list to set.

Correctness (pytorch/vision#9606): ``decode_jpeg(device="cuda")`` allocates its outputs on the
caller's stream, but nvJPEG's hardware engine writes them without waiting for the work already
queued on that stream; the caching allocator hands out a block as soon as it is freed on its
stream, so the decoder could overwrite memory that queued kernels still read (silent corruption,
H100). Draining the stream before the decode removes it. :func:`decode_batch` therefore waits
for the stream it decodes on before the decode, and for the device after it.

Overlap (:class:`DecodeAhead`): decoding synchronously in the training step would stop the
GPU's training work twice per batch. A training job instead decodes each batch ahead on a
thread of its own, on a CUDA stream of its own (the decode stream): that stream holds nothing
but decodes, so draining it costs nothing, and the allocator keeps its blocks apart from the
training stream's; a decoded batch is handed to the training stream behind an event, and
recorded there, so its block is not given back to the decoder before the training stream has
read it. The images are decoded at their stored size and resized by
``feed.preprocess`` in float32, as CPU-decoded batches are: the two paths differ only by the
decoders (nvJPEG against libjpeg-turbo), which the GPU check measures pixel for pixel
(``benchmarks/gpu_check.py``).
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

# batches decoded ahead of the one the trainer holds: the decode thread's device-wide wait
# (after nvJPEG) then waits for a step queued before, never for the one just queued
AHEAD = 2


@dataclass(frozen=True)
class EncodedBatch:
    """A batch of JPEGs as one flat uint8 buffer (every image's bytes back to back) and int64
    offsets (n + 1): one shared-memory object per batch crosses the worker queue, not one per
    image (a list of per-image tensors took one descriptor each, 1,000 per worker at prefetch
    4, and died with "Too many open files" under ``ulimit -n 1024``)."""

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


def collate_encoded(items) -> tuple[EncodedBatch, torch.Tensor]:
    """A batch of encoded images: (:class:`EncodedBatch`, int64 labels)."""
    sizes = torch.tensor([0] + [len(data) for data, _ in items], dtype=torch.int64)
    data = torch.cat([data for data, _ in items]) if items else torch.empty(0, dtype=torch.uint8)
    labels = torch.tensor([label for _, label in items], dtype=torch.int64)
    return EncodedBatch(data, sizes.cumsum(0)), labels


class EncodedImages(Dataset):
    """``ds[i] -> (uint8 1-D tensor of the JPEG bytes, int label)`` over a ManifestDataset:
    loader workers only read and collate (:func:`collate_encoded`); :func:`decode_batch`
    decodes where the model runs (``train.decode_on_gpu``)."""

    def __init__(self, manifest):
        self.manifest = manifest

    collate = staticmethod(collate_encoded)

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


def decode_jpegs(encoded: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """Each JPEG as uint8 3 x H x W on ``device``: nvJPEG on CUDA, the stream it runs on
    drained before (nothing queued there may touch the blocks it writes, module docstring)
    and the device after (its engine writes outside the stream's order); libjpeg-turbo on
    the CPU."""
    from torchvision.io import ImageReadMode, decode_jpeg

    if device.type != "cuda":
        return decode_jpeg(encoded, mode=ImageReadMode.RGB)
    torch.cuda.current_stream(device).synchronize()
    images = decode_jpeg(encoded, mode=ImageReadMode.RGB, device=device)
    torch.cuda.synchronize(device)
    return images


def decode_batch(
    encoded: EncodedBatch | list[torch.Tensor], image_size: int | None, device
) -> torch.Tensor:
    """JPEG bytes -> uint8 N x 3 x H x W on ``device`` (:func:`decode_jpegs`).

    ``image_size`` None (the training path): the images keep their stored size, which must be
    one per batch (as the CPU loader's ring requires); ``feed.preprocess`` resizes them in
    float32 as it resizes CPU-decoded batches, so both paths give the model the same pixels up
    to the decoders. An int: images of another size are resized to it (antialiased bilinear,
    rounded back to uint8), one call per distinct size."""
    device = torch.device(device)
    if isinstance(encoded, EncodedBatch):
        encoded = encoded.images()
    if not encoded:
        side = image_size or 0
        return torch.empty((0, 3, side, side), dtype=torch.uint8, device=device)
    images = decode_jpegs(encoded, device)
    by_size: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, image in enumerate(images):
        by_size[tuple(image.shape[-2:])].append(i)
    if image_size is None:
        if len(by_size) > 1:
            raise ValueError(
                f"a batch of JPEGs of {len(by_size)} sizes ({sorted(by_size)}): a streamed "
                "split needs one image size"
            )
        return torch.stack(images)
    out = torch.empty((len(images), 3, image_size, image_size), dtype=torch.uint8, device=device)
    for size, index in by_size.items():
        batch = torch.stack([images[i] for i in index])
        if size != (image_size, image_size):
            batch = F.interpolate(
                batch.float(), size=(image_size, image_size), mode="bilinear", antialias=True
            )
            batch = batch.round_().clamp_(0, 255).to(torch.uint8)
        out[index] = batch
    return out


_STREAMS: dict[torch.device, torch.cuda.Stream] = {}
_STREAMS_LOCK = threading.Lock()


def decode_stream(device: torch.device) -> torch.cuda.Stream:
    """The decode stream of ``device`` (one per process and device, module docstring)."""
    with _STREAMS_LOCK:
        if device not in _STREAMS:
            _STREAMS[device] = torch.cuda.Stream(device)
        return _STREAMS[device]


@dataclass(frozen=True)
class Decoded:
    """A batch decoded ahead: its images on the device and, on CUDA, the event after which the
    decode stream has written them (None on the CPU)."""

    images: torch.Tensor
    ready: torch.cuda.Event | None


def decode_on_stream(encoded: EncodedBatch, device: torch.device) -> Decoded:
    """In the decode thread: :func:`decode_batch` at the stored size, on CUDA on the decode
    stream (the thread's current stream), then the event the trainer waits for."""
    if device.type != "cuda":
        return Decoded(decode_batch(encoded, None, device), None)
    stream = decode_stream(device)
    # (a thread's current device is the first GPU, whatever its process set: name it)
    with torch.cuda.device(device), torch.cuda.stream(stream):
        images = decode_batch(encoded, None, device)
        ready = torch.cuda.Event()
        ready.record(stream)
    return Decoded(images, ready)


def hand_over(decoded: Decoded, device: torch.device) -> torch.Tensor:
    """In the training thread: the decoded images, safe to read on the current stream (it
    waits for the decode's event) and recorded there, so that the allocator gives their block
    back to the decode stream only after the training stream has read them."""
    if decoded.ready is not None:
        current = torch.cuda.current_stream(device)
        current.wait_event(decoded.ready)
        decoded.images.record_stream(current)
    return decoded.images


class DecodeAhead:
    """Decodes a feed's encoded batches :data:`AHEAD` batches ahead of the trainer on one
    thread (module docstring): ``serve(items)`` yields (uint8 images at the stored size on
    ``device``, labels) in the order of ``items`` ((EncodedBatch, labels) pairs; an empty batch
    passes through undecoded, as the feed serves it). The items are read in the calling
    thread (the DataLoader's iterator is not shared); only the decode runs on the thread."""

    def __init__(self, device: torch.device | str):
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:  # this process's GPU (its rank's)
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self._pool: ThreadPoolExecutor | None = None

    def _submit(self, item) -> tuple[Future | None, object, torch.Tensor]:
        encoded, labels = item
        if not len(encoded):
            return None, encoded, labels
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="imagenot-decode")
        return self._pool.submit(decode_on_stream, encoded, self.device), encoded, labels

    def serve(self, items: Iterable) -> Iterator[tuple[object, torch.Tensor]]:
        items = iter(items)
        pending = deque(self._submit(item) for item in itertools.islice(items, AHEAD))
        while pending:
            future, encoded, labels = pending.popleft()
            nxt = next(items, None)
            if nxt is not None:
                pending.append(self._submit(nxt))
            if future is None:
                yield encoded, labels
            else:
                yield hand_over(future.result(), self.device), labels

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __del__(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False)
