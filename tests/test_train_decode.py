"""Decoding where the model runs (train.decode_on_gpu, imagenot.train.decode), on the CPU: the
path's own code (workers reading bytes, one flat buffer per batch, decoding ahead of the trainer
on a thread, preprocess) against torchvision's CPU decoding image by image and against the CPU
loader's ring; the CUDA branch's order of waits (pytorch/vision#9606) with the device calls
recorded. What needs a GPU (nvJPEG's pixels against libjpeg-turbo's, its memory over many
batches, the hand-over between streams under load) is measured by benchmarks/gpu_check.py."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from torchvision.io import ImageReadMode, decode_jpeg

from imagenot.train import decode
from imagenot.train.decode import DecodeAhead, EncodedBatch, EncodedImages, decode_batch
from imagenot.train.feed import Feeder, to_device

torch.set_num_threads(1)
NORMALISATION = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
# what a LAION JPEG may be: baseline 4:2:0 (most), 4:4:4, progressive, grayscale
KINDS = [
    {"subsampling": 2},
    {"subsampling": 0},
    {"progressive": True},
    {"gray": True},
]


def _jpeg(rng, side: int, kind: dict) -> bytes:
    from PIL import Image

    yy, xx = np.mgrid[0:side, 0:side] / side
    a, b = rng.uniform(0, 6, 2)
    base = np.stack([np.sin(a * xx + b * yy + k) for k in range(3)], -1)
    arr = ((base * 0.4 + 0.5) * 255 + rng.normal(0, 12, base.shape)).clip(0, 255)
    image = Image.fromarray(arr.astype(np.uint8))
    options = {k: v for k, v in kind.items() if k != "gray"}
    if kind.get("gray"):
        image = image.convert("L")
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90, **options)
    return buf.getvalue()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """48 px JPEGs of every kind, written as one of our datasets (train split, 3 classes)."""
    from imagenot.acquire.dataset import Record, write_dataset
    from imagenot.core.dataset import ManifestDataset

    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("decode") / "ds"
    records = [
        Record(f"k{i:03d}", f"c{i % 3}", "train", _jpeg(rng, 48, KINDS[i % len(KINDS)]))
        for i in range(40)
    ]
    write_dataset(root, records, ["c0", "c1", "c2"], shard_size=5000)
    return ManifestDataset(root, "train")


def _reference(dataset, index) -> torch.Tensor:
    """torchvision's CPU decoding of one image, as RGB, from its stored bytes."""
    data = torch.frombuffer(bytearray(dataset.read_bytes(index)), dtype=torch.uint8)
    return decode_jpeg(data, mode=ImageReadMode.RGB, device="cpu")


def test_batch_decoding_is_torchvisions_cpu_decoding_image_by_image(dataset):
    items = [EncodedImages(dataset)[i] for i in range(len(dataset))]
    batch, labels = EncodedImages.collate(items)
    assert labels.tolist() == dataset.labels.tolist()
    decoded = decode_batch(batch, None, "cpu")  # the training path: the stored size
    assert decoded.shape == (len(dataset), 3, 48, 48)
    for i in range(len(dataset)):
        assert torch.equal(decoded[i], _reference(dataset, i)), f"image {i} ({KINDS[i % 4]})"
    assert torch.equal(decoded, torch.stack([dataset[i][0] for i in range(len(dataset))]))


def test_a_batch_of_two_sizes_is_refused_at_the_stored_size_and_resized_when_asked():
    rng = np.random.default_rng(1)
    jpegs = [_jpeg(rng, 48, KINDS[0]), _jpeg(rng, 40, KINDS[0])]
    batch = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    with pytest.raises(ValueError, match=r"2 sizes .*needs one image size"):
        decode_batch(batch, None, "cpu")
    assert decode_batch(batch, 32, "cpu").shape == (2, 3, 32, 32)
    assert decode_batch([], None, "cpu").shape == (0, 3, 0, 0)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_gpu_path_feeds_the_cpu_paths_pixels(dataset, workers):
    """The whole decode_on_gpu feed as a training job runs it (workers reading bytes, one
    flat buffer per batch, decoded ahead on a thread, to_device resizing 48 -> 32 px and
    normalising) gives the model bit for bit what the CPU loader's ring feed gives it."""
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))
    pieces = [*order.split(7), torch.tensor([], dtype=torch.int64), order[:5]]
    cpu = torch.device("cpu")
    ring = Feeder(dataset, workers, 7)
    encoded = Feeder(EncodedImages(dataset), workers, 7, decode_on=cpu)
    assert encoded.decode_ahead is not None and ring.decode_ahead is None
    for _ in range(2):  # a second epoch: the same decode thread, the workers kept
        fed = []
        for images, labels in encoded.epoch(pieces):
            assert not isinstance(images, EncodedBatch) or not len(images)  # decoded ahead
            fed.append(to_device(images, labels, cpu, 32, NORMALISATION))
        for (images, labels), (x, y) in zip(ring.epoch(pieces), fed, strict=True):
            want_x, want_y = to_device(images, labels, cpu, 32, NORMALISATION)
            assert torch.equal(x, want_x) and torch.equal(y, want_y)
            assert x.shape[1:] == (3, 32, 32)
    encoded.decode_ahead.close()


def test_decoding_ahead_keeps_order_passes_empty_batches_and_raises_in_the_trainer():
    rng = np.random.default_rng(2)
    jpegs = [torch.frombuffer(bytearray(_jpeg(rng, 16, KINDS[0])), dtype=torch.uint8)]
    items = []
    for i in range(6):
        batch, _ = EncodedImages.collate([(jpegs[0], i)] * (i % 3))
        items.append((batch, torch.full((i % 3,), i)))
    ahead = DecodeAhead("cpu")
    served = list(ahead.serve(iter(items)))
    assert [int(y[0]) for _, y in served if len(y)] == [1, 2, 4, 5]
    assert all(isinstance(x, EncodedBatch) for x, y in served if not len(y))
    assert all(x.shape == (len(y), 3, 16, 16) for x, y in served if len(y))
    bad, _ = EncodedImages.collate([(torch.tensor([1, 2, 3], dtype=torch.uint8), 0)])
    with pytest.raises(RuntimeError):
        list(ahead.serve(iter([items[1], (bad, torch.zeros(1))])))
    half = ahead.serve(iter(items * 4))  # an epoch abandoned after two batches
    assert [len(y) for _, y in [next(half), next(half)]] == [0, 1]
    ahead.close()


def test_the_cuda_branch_drains_its_stream_before_nvjpeg_and_the_device_after(monkeypatch):
    """pytorch/vision#9606: nvJPEG's hardware engine writes without waiting for work queued on
    the caller's stream, into blocks the allocator handed out as freed there. The CUDA branch
    must drain that stream before the decode and wait for the device after it; recorded here
    with torch's and torchvision's device calls stood in for."""
    import torchvision.io

    calls = []

    class Stream:
        def synchronize(self):
            calls.append("drain the decoding stream")

    def fake_decode(data, mode, device=None):
        calls.append(f"decode on {device}")
        return [decode_jpeg(d, mode=mode) for d in data]

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append("wait device"))
    monkeypatch.setattr(torchvision.io, "decode_jpeg", fake_decode)
    rng = np.random.default_rng(3)
    data = [torch.frombuffer(bytearray(_jpeg(rng, 16, KINDS[0])), dtype=torch.uint8)]
    images = decode.decode_jpegs(data, torch.device("cuda"))
    assert calls == ["drain the decoding stream", "decode on cuda", "wait device"]
    assert images[0].shape == (3, 16, 16)


def test_training_on_encoded_batches_resized_equals_training_on_decoded_items(dataset, tmp_path):
    """fit() on the decode_on_gpu path (here on the CPU) with the stored 48 px resized to 32:
    the same history and weights as the CPU loader's path."""
    from toy_job import toy_job

    from imagenot.train import search
    from imagenot.train.loop import fit

    hp = {**search.DEFAULTS, "optimizer": "sgd", "lr": 0.05}
    job = toy_job(
        "resnet_mini", 3, hp, seed=0, image_size=32, batch_size=8, max_epochs=1, patience=2
    )
    model_a, a = fit(job, dataset, dataset, tmp_path / "a.safetensors", "fp")
    data = EncodedImages(dataset)
    model_b, b = fit(job, data, data, tmp_path / "b.safetensors", "fp")
    strip = [{k: v for k, v in r.items() if k != "images_per_s"} for r in a.history]
    assert strip == [{k: v for k, v in r.items() if k != "images_per_s"} for r in b.history]
    for (name, p), (_, q) in zip(
        model_a.state_dict().items(), model_b.state_dict().items(), strict=True
    ):
        assert torch.equal(p, q), name
