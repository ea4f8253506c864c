"""Feeding: batch JPEG decoding (the GPU path, run here on the CPU), node-local staging."""

from __future__ import annotations

import io

import pytest
import torch
from toy_job import toy_job

from imagenot.train.feed import EncodedImages, Feeder, decode_batch, stage_to_local
from imagenot.train.loop import fit

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    from PIL import Image

    from imagenot.acquire.dataset import Record, write_dataset

    out = tmp_path_factory.mktemp("ds") / "toy"
    g = torch.Generator().manual_seed(0)
    records = []
    for i in range(45):
        c, split = i % 3, ["train", "train", "val"][(i // 3) % 3]
        arr = torch.full((32, 32, 3), 60 + 70 * c) + torch.randint(
            -20, 20, (32, 32, 3), generator=g
        )
        buf = io.BytesIO()
        Image.fromarray(arr.clamp(0, 255).to(torch.uint8).numpy()).save(buf, format="JPEG")
        records.append(Record(f"k{i:03d}", f"c{c}", split, buf.getvalue()))
    write_dataset(out, records, ["c0", "c1", "c2"], shard_size=5000)
    return out


def test_batch_decoding_matches_the_cpu_loader_and_resizes(dataset_dir):
    from imagenot.acquire.dataset import ManifestDataset

    plain = ManifestDataset(dataset_dir, "train")
    encoded = EncodedImages(plain)
    bytes_, labels = EncodedImages.collate([encoded[i] for i in range(4)])
    assert torch.equal(labels, torch.tensor([int(plain.labels[i]) for i in range(4)]))
    decoded = decode_batch(bytes_, 32, "cpu")
    assert torch.equal(decoded, torch.stack([plain[i][0] for i in range(4)]))
    assert decode_batch(bytes_, 48, "cpu").shape == (4, 3, 48, 48)
    assert decode_batch([], 48, "cpu").shape == (0, 3, 48, 48)


def test_training_on_encoded_batches_equals_decoded_items(dataset_dir, tmp_path):
    from imagenot.acquire.dataset import ManifestDataset
    from imagenot.train import search

    hp = {**search.DEFAULTS, "optimizer": "sgd", "lr": 0.05}
    job = toy_job(
        "resnet_mini", 3, hp, seed=0, image_size=32, batch_size=8, max_epochs=1, patience=2
    )
    train, val = ManifestDataset(dataset_dir, "train"), ManifestDataset(dataset_dir, "val")
    _, a = fit(job, train, val, tmp_path / "a.safetensors", "fp")
    _, b = fit(job, EncodedImages(train), EncodedImages(val), tmp_path / "b.safetensors", "fp")
    strip = [{k: v for k, v in r.items() if k != "images_per_s"} for r in a.history]
    assert strip == [{k: v for k, v in r.items() if k != "images_per_s"} for r in b.history]
    # an empty share of a batch (a rank beyond a short last batch) is an empty batch
    feeder = Feeder(EncodedImages(train), 0)
    ((images, labels),) = list(feeder.epoch([torch.tensor([], dtype=torch.int64)]))
    assert len(images) == 0 and images.images() == [] and len(labels) == 0


def test_dataset_staged_to_node_local_disk_once(dataset_dir, tmp_path, monkeypatch):
    from imagenot.acquire.dataset import ManifestDataset, read_fingerprint

    fingerprint = read_fingerprint(dataset_dir)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    local = stage_to_local(dataset_dir, fingerprint)
    assert local.is_relative_to(tmp_path) and read_fingerprint(local) == fingerprint
    assert ManifestDataset(local, "train").read_bytes(0) == ManifestDataset(
        dataset_dir, "train"
    ).read_bytes(0)
    assert stage_to_local(dataset_dir, fingerprint) == local  # a second job reuses the copy
    monkeypatch.delenv("TMPDIR")
    assert stage_to_local(dataset_dir, fingerprint) == dataset_dir  # no local disk: in place


# A batch larger than a low descriptor limit allows per-image objects: before, every JPEG of an
# encoded batch crossed the worker queue as its own shared-memory tensor (one descriptor each,
# times prefetch and workers), and the loader died with "Too many open files".
FEED_UNDER_LIMIT = """
import resource, sys, torch
resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
from imagenot.acquire.dataset import ManifestDataset
from imagenot.train.feed import EncodedImages, Feeder, decode_batch
plain = ManifestDataset(sys.argv[1], "train")
data = EncodedImages(plain) if sys.argv[2] == "encoded" else plain
feeder = Feeder(data, num_workers=2)
order = torch.arange(len(plain)).repeat(40)   # 1,200 images in batches of 400
seen = 0
for epoch in range(2):   # persistent workers serve a second epoch
    for images, labels in feeder.epoch(list(order.split(400))):
        if sys.argv[2] == "encoded":
            images = decode_batch(images, 32, "cpu")
        assert images.shape == (len(labels), 3, 32, 32), images.shape
        assert torch.equal(labels, torch.as_tensor(plain.labels)[order[seen % len(order):][:len(labels)]])
        seen += len(labels)
print(seen)
"""


@pytest.mark.parametrize("source", ["decoded", "encoded"])
def test_the_feed_runs_with_workers_at_batches_beyond_a_low_descriptor_limit(dataset_dir, source):
    """The training feed as a job builds it (persistent workers, prefetch, collate) at batches
    of 400 images under ``ulimit -n 128``: each batch crosses the worker queue as one object
    (decoded: one uint8 tensor; encoded: one flat buffer + offsets), whatever its size."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", FEED_UNDER_LIMIT, str(dataset_dir), source],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == [str(2 * 1200)]
