"""Is the feed fast enough? One model's training images/s fed by the real feed against the same
model fed from device memory: the logic that ``benchmarks/bench_feed_models.py`` and the
preflight (``imagenot.train.preflight``) share, so that what the preflight reports on a cluster
is what the benchmark measures on a workstation.

For one model it times training steps (forward, backward, optimizer step; bf16 autocast and
channels_last on CUDA, as ``imagenot.train.loop`` trains) twice over the same JPEGs, written once
as one of our datasets at their *stored* side (the paper's 256 px, resized to the training side
by ``preprocess`` as a training job does):

* ``feed``: the training job's feed, :class:`imagenot.train.feed.Feeder` with persistent
  DataLoader workers decoding JPEGs (``encoded``: workers read bytes and ``decode_batch``
  decodes on the device, ``train.decode_on_gpu``), pinned memory on CUDA, ``preprocess`` on the
  device;
* ``device``: the same images decoded once and held on the device as one uint8 tensor, indexed
  per batch, ``preprocess`` on the device: the model's own speed with a free feed.

``ratio`` = feed / device: >= 0.9 means the feed keeps up (docs/gpu.md, "Is the feed fast
enough?"). Warm-up steps are not timed; on CUDA the device is synchronised only at the ends of
each timed window. The feed's workers decode up to ``Feeder.PREFETCH x workers`` batches ahead,
some during the warm-up, so the timed window must be many times that long to measure the steady
state. The step mirrors ``imagenot.train.loop.train_one_epoch`` (:func:`train_step`); what it
leaves out (per-step seeding, the schedule, on-device loss sums, gradient accumulation) costs
microseconds per step, not the feed's milliseconds.
"""

from __future__ import annotations

import io
import math
import os
import time
import timeit
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, get_worker_info

from imagenot.acquire.dataset import Record, write_dataset
from imagenot.core.dataset import ManifestDataset
from imagenot.train.feed import EncodedImages, Feeder, autocast, layout, to_device
from imagenot.train.registry import build_model
from imagenot.train.schedules import build_optimizer

# the most steps one side of bench_model times when it runs for ``seconds``
MOST_STEPS = 4000
# the paper's ImageNot ST optimizer (config/paper.yaml, imagenot_st); its lr does not change speed
HYPERPARAMETERS = {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 2e-5}
N_CLASSES = 10


def smooth_jpegs(n: int, size: int, seed: int) -> list[bytes]:
    """``n`` JPEGs of ``size`` px: smooth colour waves plus noise, which compress and decode like
    photographs (a flat image decodes several times faster and would flatter the feed)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = []
    yy, xx = np.mgrid[0:size, 0:size] / size
    for _ in range(n):
        a, b, c = rng.uniform(0, 6, 3)
        base = np.stack([np.sin(a * xx + b * yy + c + k) for k in range(3)], -1)
        arr = ((base * 0.4 + 0.5) * 255 + rng.normal(0, 12, base.shape)).clip(0, 255)
        buf = io.BytesIO()
        Image.fromarray(arr.astype(np.uint8)).save(buf, format="JPEG", quality=95)
        out.append(buf.getvalue())
    return out


def write_jpeg_dataset(root: Path, n: int, size: int) -> ManifestDataset:
    """``n`` :func:`smooth_jpegs` of ``size`` px written as one of our datasets (its train split,
    ten classes), as a training job reads them."""
    labels = [i % N_CLASSES for i in range(n)]
    return write_jpegs(root, smooth_jpegs(n, size, seed=0), labels, N_CLASSES)


def write_jpegs(root: Path, jpegs: list[bytes], labels, least: int) -> ManifestDataset:
    """JPEGs and their labels written as the train split of a dataset of ``least`` classes, or
    more where the labels name more."""
    names = [f"c{i:02d}" for i in range(max(least, int(max(labels, default=0)) + 1))]
    records = [
        Record(f"k{i:06d}", names[int(label)], "train", data)
        for i, (data, label) in enumerate(zip(jpegs, labels, strict=True))
    ]
    write_dataset(root, records, names, shard_size=5000)
    return ManifestDataset(root, "train")


def resident(dataset: ManifestDataset, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Every image of ``dataset`` decoded once, as one uint8 tensor on ``device``, and labels."""
    images = torch.stack([dataset[i][0] for i in range(len(dataset))])
    return images.to(device), torch.tensor(dataset.labels, dtype=torch.int64).to(device)


class Witness(Dataset):
    """The feed's dataset, unchanged, but every process that serves an item appends its pid and
    DataLoader worker id (``get_worker_info``; ``main`` in the training process) to ``log``
    once: the report's evidence of who decoded."""

    def __init__(self, data, log: Path):
        self.data, self.log, self._pid = data, log, None

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        if self._pid != os.getpid():
            self._pid = os.getpid()
            info = get_worker_info()
            with self.log.open("a") as f:
                f.write(f"{self._pid} {'main' if info is None else info.id}\n")
        return self.data[index]

    def __getattr__(self, name):  # collate / empty / image_shape of the wrapped dataset
        if name == "data":
            raise AttributeError(name)
        return getattr(self.data, name)


def train_step(
    model, optimizer, images, labels, device: torch.device, size: int, normalisation: dict
) -> None:
    """One training step as ``train_one_epoch`` takes it: the feed's :func:`to_device` (decode,
    preprocess with the job's ``normalisation``, channels-last), forward under its autocast,
    cross-entropy, backward, optimizer step."""
    x, y = to_device(images, labels, device, size, normalisation)
    optimizer.zero_grad(set_to_none=True)
    with autocast(device):
        logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    optimizer.step()


def timed(
    batches,
    model,
    optimizer,
    device,
    size: int,
    normalisation: dict,
    warmup: int,
    steps: int | None = None,
    seconds: float = 0.0,
) -> tuple[float, int, int]:
    """Seconds, images and steps of the timed window after ``warmup`` steps; synchronised at the
    window's ends. With ``steps``: it ends after at least ``steps`` steps and ``seconds`` of
    wall time (the host runs ahead of the device by a few steps at most, and the last
    synchronisation counts), else with ``batches``."""
    start, seen, done = None, 0, 0
    for i, (images, labels) in enumerate(batches):
        if i == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
        train_step(model, optimizer, images, labels, device, size, normalisation)
        if i >= warmup:
            seen += len(labels)
            done += 1
            if steps is not None and done >= steps and time.perf_counter() - start >= seconds:
                break
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, seen, done


def pieces(n: int, batch: int, steps: int) -> list[torch.Tensor]:
    """``steps`` batches of ``batch`` indices, running over the dataset and round again."""
    return [torch.arange(i * batch, (i + 1) * batch) % n for i in range(steps)]


def bench_model(
    name: str,
    dataset: ManifestDataset,
    on_device: tuple[torch.Tensor, torch.Tensor],
    *,
    batch: int,
    size: int,
    normalisation: dict,
    steps: int,
    warmup: int,
    workers: int,
    encoded: bool,
    num_classes: int,
    device: torch.device,
    root: Path,
    both: bool = False,
    seconds: float = 0.0,
) -> dict:
    """Images/s of model ``name`` at ``batch`` and training side ``size``, fed from
    ``on_device`` (:func:`resident`) and by the real feed (normalised with ``normalisation``: the
    cost is the same whatever its values) over ``dataset`` (``workers`` loader
    workers; ``encoded``: they read bytes and the batches are decoded on ``device``, ahead of the
    trainer); the workers' pids as evidence (``root`` holds their log). ``both``: the feed is
    measured both ways (``cpu_decode_*`` and ``gpu_decode_*``: decoded in the workers, decoded
    on the device), ``feed_*`` and ``ratio`` being the way ``encoded`` names. ``seconds``: each
    side's timed window lasts at least that long as well as ``steps`` steps (:func:`timed`), and
    the feed's warm-up drains the batches its workers decoded ahead where the model is fast."""
    model = build_model(name, num_classes).to(device, memory_format=layout(device))
    model.train()
    optimizer = build_optimizer(list(model.parameters()), HYPERPARAMETERS)
    most = warmup + steps if not seconds else max(warmup + steps, MOST_STEPS)
    order = pieces(len(dataset), batch, most)

    # (b) device-resident: indexing one uint8 tensor already on the device (the indices moved
    # there before the timed window: no host-to-device copy per step)
    images, labels = on_device
    held = ((images[idx], labels[idx]) for idx in [idx.to(device) for idx in order])
    device_s, device_n, device_steps = timed(
        held, model, optimizer, device, size, normalisation, warmup, steps, seconds
    )
    dev = device_n / device_s
    feed_warmup = warmup
    if seconds and workers:  # the feed's batches decoded ahead must be drained first where
        # the model outruns the feed (a window shorter than them measured the prefetch)
        step_s = device_s / max(device_steps, 1)
        feed_warmup = min(workers * Feeder.PREFETCH + 1, max(warmup, math.ceil(0.5 / step_s)))

    def fed(on_gpu: bool) -> dict:
        """(a) the real feed, as a training job builds it."""
        log = root / f"workers-{name}.txt"
        log.unlink(missing_ok=True)
        data = Witness(EncodedImages(dataset) if on_gpu else dataset, log)
        feeder = Feeder(data, workers, batch, pin=device.type == "cuda", decode_on=device)
        feed_s, feed_n, _ = timed(
            feeder.epoch(order), model, optimizer, device, size, normalisation, feed_warmup,
            steps, seconds,
        )  # fmt: skip
        seen = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
        if feeder.decode_ahead is not None:
            feeder.decode_ahead.close()
        del feeder  # ends its persistent workers
        return {
            "images": feed_n,
            "img_per_s": round(feed_n / feed_s, 1),
            "ratio": round(feed_n / feed_s / dev, 3),
            "worker_pids": sorted({int(pid) for pid, who in seen if who != "main"}),
            "main_process_items": any(who == "main" for _, who in seen),
        }

    ways = {encoded: fed(encoded)}
    if both:
        ways[not encoded] = fed(not encoded)
    main = ways[encoded]
    row = {"model": name, "batch_size": batch, "steps": device_steps, "feed_warmup": feed_warmup,
           "workers": workers, "encoded": encoded, "feed_images": main["images"],
           "device_images": device_n, "feed_img_per_s": main["img_per_s"],
           "device_img_per_s": round(dev, 1), "ratio": main["ratio"],
           "feed_worker_pids": main["worker_pids"],
           "feed_main_process_items": main["main_process_items"]}  # fmt: skip
    for on_gpu, way in ways.items():
        prefix = "gpu_decode" if on_gpu else "cpu_decode"
        row |= {f"{prefix}_img_per_s": way["img_per_s"], f"{prefix}_ratio": way["ratio"]}
    return row


class Sample:
    """``n`` items of a dataset (every ``len // n``-th, from the start: spread over its shards
    as a shuffled epoch reads them), with the reader's interface the feed uses (``ds[i]``,
    ``read_bytes``, ``labels``, ``keys``, ``image_shape``): the preflight reads a sample of a
    real dataset where it lies instead of all of it."""

    def __init__(self, dataset: ManifestDataset, n: int):
        step = max(1, len(dataset) // max(n, 1))
        self.dataset = dataset
        self.index = list(range(0, len(dataset), step))[:n]
        self.labels = np.asarray([dataset.labels[i] for i in self.index], dtype=np.int64)
        self.keys = [dataset.keys[i] for i in self.index]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int):
        return self.dataset[self.index[i]]

    def read_bytes(self, i: int) -> bytes:
        return self.dataset.read_bytes(self.index[i])

    def image_shape(self, i: int = 0) -> tuple[int, int, int]:
        return self.dataset.image_shape(self.index[i])


def decode_floor(dataset: ManifestDataset) -> float:
    """Images/s of decoding every image once on one core, no loader (as bench_loader)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = min(
            timeit.repeat(lambda: [dataset[i] for i in range(len(dataset))], repeat=2, number=1)
        )
    finally:
        torch.set_num_threads(threads)
    return len(dataset) / best
