"""Feeding: batch JPEG decoding (the GPU path, run here on the CPU), node-local staging."""

from __future__ import annotations

import io

import pytest
import torch
from toy_job import toy_job, with_fields

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
    from imagenot.core.dataset import ManifestDataset

    plain = ManifestDataset(dataset_dir, "train")
    encoded = EncodedImages(plain)
    bytes_, labels = EncodedImages.collate([encoded[i] for i in range(4)])
    assert torch.equal(labels, torch.tensor([int(plain.labels[i]) for i in range(4)]))
    decoded = decode_batch(bytes_, 32, "cpu")
    assert torch.equal(decoded, torch.stack([plain[i][0] for i in range(4)]))
    assert decode_batch(bytes_, 48, "cpu").shape == (4, 3, 48, 48)
    assert decode_batch([], 48, "cpu").shape == (0, 3, 48, 48)


def test_training_on_encoded_batches_equals_decoded_items(dataset_dir, tmp_path):
    from imagenot.core.dataset import ManifestDataset
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
    feeder = Feeder(EncodedImages(train), 0, 8)
    ((images, labels),) = list(feeder.epoch([torch.tensor([], dtype=torch.int64)]))
    assert len(images) == 0 and images.images() == [] and len(labels) == 0


def test_dataset_staged_to_node_local_disk_once(dataset_dir, tmp_path, monkeypatch):
    from imagenot.core.dataset import ManifestDataset, read_fingerprint

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
from imagenot.core.dataset import ManifestDataset
from imagenot.train.feed import EncodedImages, Feeder, decode_batch
plain = ManifestDataset(sys.argv[1], "train")
data = EncodedImages(plain) if sys.argv[2] == "encoded" else plain
feeder = Feeder(data, 2, 400)
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
    (decoded: a ring slot's number; encoded: one flat buffer + offsets), whatever its size."""
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


def _epochs(feeder, plans):
    """Every batch of ``plans`` (one list of index tensors per epoch) as (images, labels) copies
    taken before the next batch is asked for (ring batches are valid until then). A plan given
    as (pieces, k) is abandoned after k batches, as a stopped epoch is."""
    seen = []
    for plan in plans:
        pieces, stop = plan if isinstance(plan, tuple) else (plan, None)
        for i, (images, labels) in enumerate(feeder.epoch(pieces)):
            if i == stop:
                break
            seen.append((images.clone(), labels))
    return seen


def test_worker_batches_arrive_in_one_reused_ring_identical_to_the_in_process_feed(dataset_dir):
    """With workers, every batch is decoded into a slot of one shared-memory ring allocated
    once (workers x prefetch + 1 slots): the same images and labels as the feed without workers,
    over epochs with empty shares, a smaller last batch, and an epoch abandoned midway (its
    batches in flight are drained, never handed out)."""
    from imagenot.core.dataset import ManifestDataset

    plain = ManifestDataset(dataset_dir, "train")
    g = torch.Generator().manual_seed(1)
    empty = torch.tensor([], dtype=torch.int64)
    plans = [
        [empty, empty],  # the workers start on an epoch of empty shares: the ring exists already
        list(torch.randperm(len(plain), generator=g).split(4)),
        (list(torch.randperm(len(plain), generator=g).split(4)), 3),
        [empty, *torch.randperm(len(plain), generator=g).split(7), empty],
        list(torch.arange(len(plain)).repeat(3).split(4)),  # more batches than slots, twice
    ]
    expected = _epochs(Feeder(plain, 0, 7), plans)
    feeder = Feeder(plain, 2, 7)
    got = _epochs(feeder, plans)
    ring = feeder.ring_sampler.ring
    assert ring.slots == 2 * Feeder.PREFETCH + 1 and ring.capacity == 7
    assert len(got) == len(expected) > 3 * ring.slots
    for (a, la), (b, lb) in zip(got, expected, strict=True):
        assert torch.equal(a, b) and torch.equal(la, lb)
    # the images are views into the ring: no batch-sized allocation per step
    start = ring.images.untyped_storage().data_ptr()
    end = start + ring.images.untyped_storage().nbytes()
    for images, _ in feeder.epoch(plans[1]):
        assert start <= images.data_ptr() < end


def test_a_ring_too_small_for_the_batches_in_flight_is_refused_not_overwritten(dataset_dir):
    """Should the DataLoader run further ahead than workers x prefetch batches (here: a ring
    sized for a prefetch of 3 under a loader prefetching 4), the sampler refuses the batch whose
    slot still holds one in flight: an error, never a batch overwritten while it is read."""
    from imagenot.core.dataset import ManifestDataset
    from imagenot.train.feed import RingOverrun

    plain = ManifestDataset(dataset_dir, "train")
    feeder = Feeder(plain, 2, 4)
    feeder.PREFETCH = 3  # the ring's size only; the loader was built with Feeder.PREFETCH
    with pytest.raises(RingOverrun, match="in flight"):
        list(feeder.epoch(list(torch.arange(len(plain)).repeat(2).split(4))))


def test_a_streamed_split_of_mixed_image_sizes_is_named(tmp_path):
    """A ring slot holds one image size: an image of another size ends the batch with its key."""
    from PIL import Image

    from imagenot.acquire.dataset import Record, write_dataset
    from imagenot.core.dataset import ManifestDataset

    records = []
    for i, size in enumerate([32, 32, 32, 24]):
        buf = io.BytesIO()
        Image.new("RGB", (size, size), (i * 40, 0, 0)).save(buf, format="JPEG")
        records.append(Record(f"k{i:03d}", "c0", "train", buf.getvalue()))
    write_dataset(tmp_path / "ds", records, ["c0"], shard_size=5000)
    feeder = Feeder(ManifestDataset(tmp_path / "ds", "train"), 1, 4)
    with pytest.raises(ValueError, match=r"item k003: image of \(3, 24, 24\)"):
        list(feeder.epoch([torch.arange(4)]))


def test_training_with_loader_workers_equals_training_without(dataset_dir, tmp_path):
    """The training loop as a GPU job runs it (persistent workers for the train and val splits,
    batches through the ring, a second epoch served by the same workers) gives the weights and
    history of the in-process feed."""
    from safetensors.torch import load_file

    from imagenot.core.dataset import ManifestDataset
    from imagenot.train import search

    hp = {**search.DEFAULTS, "optimizer": "sgd", "lr": 0.05}
    job = toy_job(
        "resnet_mini", 3, hp, seed=0, image_size=32, batch_size=8, max_epochs=2, patience=3
    )
    train, val = ManifestDataset(dataset_dir, "train"), ManifestDataset(dataset_dir, "val")
    runs = {}
    for workers in (0, 2):
        best = tmp_path / f"best-{workers}.safetensors"
        worker_job = with_fields(job, num_workers=workers)
        _, state = fit(worker_job, train, val, tmp_path / f"c-{workers}", "fp", best_weights=best)
        history = [{k: v for k, v in r.items() if k != "images_per_s"} for r in state.history]
        runs[workers] = history, load_file(best)
    (h0, w0), (h2, w2) = runs[0], runs[2]
    assert h0 == h2 and len(h0) == 2
    assert w0.keys() == w2.keys() and all(torch.equal(w0[k], w2[k]) for k in w0)


def test_a_pinned_batch_is_a_copy_of_its_slot(dataset_dir, monkeypatch):
    """CUDA jobs: the DataLoader's pin-memory thread calls ``pin_memory()`` on a worker's answer
    (a slot number) and hands out pinned copies, after which the slot may be refilled. Pinning
    needs a GPU; here ``Tensor.pin_memory`` is a copy, which is what it is on the host side."""
    from imagenot.core.dataset import ManifestDataset
    from imagenot.train.feed import BatchRing, _Task

    plain = ManifestDataset(dataset_dir, "train")
    ring = BatchRing(2, 4, plain.image_shape())
    filled = ring.fill(plain, _Task(seq=7, slot=1, indices=[3, 1, 2]))
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self.clone())
    images, labels = filled.pin_memory()
    assert torch.equal(images, torch.stack([plain[i][0] for i in (3, 1, 2)]))
    assert labels.tolist() == [int(plain.labels[i]) for i in (3, 1, 2)]
    ring.images[1].zero_()  # the slot refilled: the pinned copy keeps its images
    assert images.float().mean() > 0
