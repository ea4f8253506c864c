"""Host memory of a training job besides the model: the loader's batch rings.

Why: each training process holds two rings of shared-memory batch buffers for its life
(``imagenot.train.feed.BatchRing``: the training and the validation feeder), each
(workers x prefetch + 1) slots of a batch of images at the dataset's *stored* size (the
resize to the model's size runs on the device). At the paper's 256 px, 7 workers and batches
of 256 that is 1.46 GB per ring, 2.9 GB per process: a memory request that leaves it out is
killed on the first epoch. Every training job's memory adds its own
(``resources.process_mem_mb``, called by the rules). Light: no torch import (evaluated while Snakemake schedules).
"""

from __future__ import annotations

from imagenot.acquire.sizes import stored_size
from imagenot.train.experiments import is_published, per_gpu_batch

# The DataLoader's batches in flight per worker (train.feed.Feeder.PREFETCH; a copy here: the
# feed imports torch, and tests/test_train_failfast.py checks the two agree)
FEED_PREFETCH = 4


def ring_bytes(workers: int, train_batch: int, eval_batch: int, stored: int) -> int:
    """Shared memory of one training process's loader rings (``imagenot.train.feed.BatchRing``):
    per feeder (workers x prefetch + 1) slots of a batch of uint8 3 x stored x stored images,
    the train feeder's batch its largest micro-batch, the validation feeder's the eval batch.
    No workers (in-memory splits, CPU jobs): no ring."""
    if workers == 0:
        return 0
    slots = workers * FEED_PREFETCH + 1
    return slots * (train_batch + eval_batch) * 3 * stored * stored


def ring_mb(config: dict, dataset: str, protocol: str, model: str) -> int:
    """Host memory (MB) of one training process's two batch rings (``train.feed.BatchRing``:
    training and validation feeders, each (workers x prefetch + 1) slots of a batch of stored
    images, shared memory held for the job's life); 0 without loader workers or for a head fit
    over stored features."""
    from imagenot.train.settings import JobSettings

    job = JobSettings.for_training(config, dataset, protocol, model)
    if job.features or job.num_workers == 0 or job.in_memory:
        return 0
    if job.decode_on_gpu and job.gpu_job:  # JPEG bytes cross the queue, no ring (train.feed)
        return 0
    # the train feeder's slots hold its largest micro-batch (loop.fit cuts the batch so)
    per_rank = per_gpu_batch(job.batch_size, job.world, job.max_batch_per_gpu)
    held = ring_bytes(job.num_workers, per_rank, job.eval_batch_size, stored_size(config, dataset))
    return -(-held // 2**20)


def largest_ring_mb(config: dict) -> int:
    """The largest :func:`ring_mb` of the config's trained runs (0 when none): the most a
    training process's memory request adds for its rings (``imagenot plan``'s peak)."""
    return max(
        (
            ring_mb(config, e["dataset"], e["protocol"], m)
            for e in config["train"]["experiments"]
            if not is_published(e)
            for m in config["train"]["models"]
        ),
        default=0,
    )
