"""Host memory of a training job besides the model: the loader's batch rings.

Why: each training process holds two rings of shared-memory batch buffers for its life
(``imagenot.train.feed.BatchRing``: the training and the validation feeder), each
(workers x prefetch + 1) slots of a batch of images at the dataset's *stored* size (the
resize to the model's size runs on the device). At the paper's 256 px, 7 workers and batches
of 256 that is 1.46 GB per ring, 2.9 GB per process: a memory request that leaves it out is
killed on the first epoch. ``train_trial`` adds its own (``plan.slot_mem_mb``), ``train_final``
the config's largest (its memory is a profile expression: ``$IMAGENOT_TRAIN_RING_MB``, set by
rules/common.smk). Light: no torch import (evaluated while Snakemake schedules).
"""

from __future__ import annotations

# The DataLoader's batches in flight per worker (train.feed.Feeder.PREFETCH; a copy here: the
# feed imports torch, and tests/test_train_failfast.py checks the two agree)
FEED_PREFETCH = 4


def stored_image_size(config: dict, dataset: str) -> int:
    """The side of a dataset's stored images (``datasets.<name>.image_size``, else
    ``acquire.image_size``): what the loader decodes, before any resize to the model's size."""
    return config["datasets"][dataset].get("image_size") or config["acquire"]["image_size"]


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
    side = stored_image_size(config, dataset)
    per_rank = -(-job.batch_size // job.world)  # ceil: the largest share of a global batch
    if job.max_batch_per_gpu:
        per_rank = min(per_rank, job.max_batch_per_gpu)
    slots = job.num_workers * FEED_PREFETCH + 1
    image = 3 * side * side
    return -(-slots * (per_rank + job.eval_batch_size) * image // 2**20)


def largest_ring_mb(config: dict) -> int:
    """The largest :func:`ring_mb` of the config's trained runs (0 when none): what a final
    run's memory, a profile expression of the attempt alone (profiles/default), adds per GPU."""
    from imagenot.train.plan import experiments, is_published

    return max(
        (
            ring_mb(config, e["dataset"], e["protocol"], m)
            for e in experiments(config)
            if not is_published(e)
            for m in config["train"]["models"]
        ),
        default=0,
    )
