"""The train stage's jobs: I/O around the pure search functions and the training loop.

Each function reads its inputs (dataset directory, trials table, settings from the rule),
runs ``loop.fit`` and writes its outputs atomically. Accuracies are percent. ``settings`` is the
rule's :class:`imagenot.train.settings.JobSettings` (or the trial's or final run's settings
holding it), read field by field with no fallback here: a default lives in the train schema
only. What the job's process adds is passed beside it: its cores (``threads``, the rule's) and
its ``deadline`` (``interrupts.job_deadline``; None for a pass with no checkpoint to write).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from imagenot.core.dataset import ManifestDataset, load_split_tensors
from imagenot.core.io import sha256_file, write_text
from imagenot.train import features, search
from imagenot.train.checkpoints import history_csv
from imagenot.train.device import configure, deterministic_for, resolve_device
from imagenot.train.distributed import from_environment, joined
from imagenot.train.experiments import accumulation, per_gpu_batch
from imagenot.train.failfast import missing_weights
from imagenot.train.feed import EncodedImages, InMemory, layout, stage_to_local
from imagenot.train.identity import Job, dataset_of
from imagenot.train.interrupts import Interrupts
from imagenot.train.loop import fit
from imagenot.train.plan import FEATURE_SPLITS
from imagenot.train.records import write_record
from imagenot.train.registry import build_model, head_module, load_backbone, read_state_dict
from imagenot.train.trials import BEST, CHECKPOINT, drop, read_trial, slot_trial, trial_dir

if TYPE_CHECKING:
    from imagenot.train.files import FeaturesFiles, FinalFiles, TrialFiles
    from imagenot.train.settings import JobSettings, TrialSettings

log = logging.getLogger(__name__)


# -------------------------------------------------------------------------------------- data


def load_split(dataset_dir: Path, split: str, in_memory: bool, encoded: bool = False):
    """A split as InMemory tensors, or a streaming ManifestDataset (``encoded``: serving the
    JPEG bytes, decoded batch-wise on the GPU; see imagenot.train.feed)."""
    if in_memory:
        return InMemory(*load_split_tensors(dataset_dir, split))
    streamed = ManifestDataset(dataset_dir, split)
    return EncodedImages(streamed) if encoded else streamed


def _data_source(
    settings: JobSettings, dataset_dir: Path, fingerprint: str, deadline: float | None = None
) -> tuple[Path, bool]:
    """Where the job reads the dataset (node-local copy when asked, staged before the job's
    ``deadline``) and whether it decodes on the GPU (CUDA jobs streaming from shards, when
    train.decode_on_gpu is on; off by default)."""
    if settings.stage_to_local and not settings.in_memory:
        dataset_dir = stage_to_local(dataset_dir, fingerprint, deadline=deadline)
    encoded = settings.decode_on_gpu and job_device(settings) == "cuda"
    return dataset_dir, encoded


def make_job(settings: JobSettings, hyperparameters: Mapping, seed: int, num_classes: int) -> Job:
    """The loop's Job: the rule's settings, the trial's hyperparameters and seed, the dataset's
    classes, the starting weights' description and the device this process found."""
    return Job.of(settings, hyperparameters, seed, num_classes, job_device(settings))


def job_device(settings: JobSettings) -> str:
    """The device of this job (see ``loop.resolve_device``): the one place CUDA is probed."""
    return resolve_device(settings.device, settings.gpu_job, torch.cuda.is_available())


def _configure(settings: JobSettings, threads: int, processes: int) -> None:
    """This process's torch settings; ``threads``: the job's cores on this node; ``processes``:
    the data-parallel ranks sharing them (each rank of a torchrun job configures itself:
    nothing of a parent's reaches it)."""
    deterministic = deterministic_for(settings.deterministic, job_device(settings))
    configure(deterministic, max(1, threads // processes))


def backbone_loader(settings: JobSettings, record: str | None):
    """A callable loading the FT/TL starting weights (``settings.init``) into a fresh model, or
    None (ST); ``record``: their run's record when they are a final run's (the job's
    ``init_record`` role, read with them: :func:`imagenot.train.registry.read_state_dict`); a
    record handed to a job with no starting weights is refused."""
    init = settings.init
    if not init and record is not None:
        raise ValueError(f"--init-record {record}: the job starts from no weights (settings init)")
    if not init:
        return None
    try:
        state = read_state_dict(init, record)
    except OSError as exc:
        raise missing_weights(settings.model, init, exc) from None
    # a partial, not a lambda: data-parallel workers receive it pickled
    return functools.partial(load_backbone, name=settings.model, state=state, source=init)


def _feature_files(files) -> list[tuple[str, Path]]:
    """(split, file) of ``files.features``: one file per split of ``plan.FEATURE_SPLITS``, in
    its order (what a TL job writes and its head fits read)."""
    if len(files.features) != len(FEATURE_SPLITS):
        raise ValueError(
            f"--features: {len(files.features)} files for the splits {FEATURE_SPLITS}, one each"
        )
    return [(split, Path(f)) for split, f in zip(FEATURE_SPLITS, files.features, strict=True)]


def run_features(settings: JobSettings, threads: int, files: FeaturesFiles) -> dict[str, dict]:
    """The TL backbone's features of every image of the splits a head is fitted on
    (``imagenot.train.features``; ``plan.FEATURE_SPLITS``: train and val, the test split being
    the evaluation's), written to ``files.features`` (one per split, in that order) from the
    dataset whose manifest is ``files.manifest``: the starting weights in a fresh model, eval
    mode, the image path's data source and preprocess, on the job's device. One job for the
    splits: the model is loaded and the device set up once (on a cluster, a GPU job's start-up
    is longer than a CIFAR-10 split's pass). Returns each split's metadata."""
    if settings.trainable != "head" or not settings.init:
        raise ValueError("features are computed for TL jobs (trainable head, starting weights)")
    splits = _feature_files(files)
    _configure(settings, threads, 1)
    dataset_dir, num_classes, fingerprint = dataset_of(files)
    # no training: no hyperparameters, and the seed is moot (eval mode, no random draw)
    job = make_job(settings, {}, 0, num_classes)
    device = torch.device(job.device)
    model = build_model(settings.model, num_classes)  # the head is never run: its init is moot
    backbone_loader(settings, files.init_record)(model)
    model.to(device, memory_format=layout(device))  # as loop.fit: the image path's kernels
    head = head_module(model, settings.model)
    source, encoded = _data_source(settings, dataset_dir, fingerprint)
    written = {}
    for split, out in splits:
        data = load_split(source, split, settings.in_memory, encoded)
        extracted = features.extract(model, head, data, job, device)
        meta = features.describe(job, fingerprint, split)
        meta |= {"dtype": str(extracted.images.dtype).removeprefix("torch."), "device": device.type}
        features.write(extracted, meta, out)
        written[split] = meta
        size = f"{len(extracted)} x {tuple(extracted.images.shape[1:])}"
        log.info(f"{settings.model} {split}: {size} features ({meta['dtype']}) written to {out}")
    return written


def fit_job(
    settings: JobSettings,
    threads: int,
    deadline: float | None,
    files: TrialFiles | FinalFiles,
    row: Mapping,
    seed: int,
    workdir: Path,
    stop_epoch: int | None = None,
) -> dict | None:
    """Train one job in this process, a rank of a data-parallel job when torchrun started it
    (``imagenot.train.distributed``): its checkpoint, best-validation weights (``BEST``) and
    ``metrics.csv`` in ``workdir``. Returns the training summary on rank 0 and None on the
    other ranks, which write nothing. ``files``: the job's, whose dataset it trains on; a TL
    head fit (settings ``features``) reads its stored features, ``files.features`` (one per
    split of ``plan.FEATURE_SPLITS``, in its order), each checked to be that of its starting
    weights, dataset version and image size."""
    ranks = from_environment()
    if ranks.world > 1:  # torchrun forwards SLURM's signals at once: keep one that comes early
        Interrupts.record_early()
    _configure(settings, threads, ranks.local_world)
    dataset_dir, num_classes, fingerprint = dataset_of(files)
    job = make_job(settings, search.hyperparameters_of(row), seed, num_classes)
    head_only = bool(settings.features)
    if head_only:  # TL over stored features: the head alone, in one process
        train, val = (
            features.read(path, features.describe(job, fingerprint, split))
            for split, path in _feature_files(files)
        )
    else:
        source, encoded = _data_source(settings, dataset_dir, fingerprint, deadline)
        train = load_split(source, "train", settings.in_memory, encoded)
        val = load_split(source, "val", settings.in_memory, encoded)
    batching = micro_batching(settings)
    if ranks.main:
        log.info(
            f"{settings.model}: {settings.batch_size} images per step, at most "
            f"{batching['micro_batch_size']} per GPU at once: {batching['micro_batches']} "
            f"micro-batch(es) per GPU (largest per GPU: {settings.max_batch_per_gpu or 'no cap'})"
        )
    backend = "nccl" if job.device == "cuda" else "gloo"
    with joined(backend, planned=settings.world) as d:
        _, state = fit(
            job,
            train,
            val,
            workdir / CHECKPOINT,
            fingerprint,
            stop_epoch,
            workdir / BEST,
            backbone_loader(settings, files.init_record),
            max_batch=settings.max_batch_per_gpu,
            dist=d,
            head_only=head_only,
            deadline=deadline,
        )
    if not d.main:
        return None
    write_text(history_csv(state), workdir / "metrics.csv")
    return {
        "model": settings.model,
        "num_classes": num_classes,
        "n_val": len(val),
        "image_size": settings.image_size,
        "val_accuracy": state.best_val,
        "best_epoch": state.best_epoch,
        "epochs": state.epoch,
        "stopped_by": state.stopped_by,
        "hyperparameters": job.hyperparameters,
        "seed": seed,
        "dataset_fingerprint": fingerprint,
        "normalisation": settings.normalisation,
        "identity": job.identity(),
        **batching,
    }


def micro_batching(settings: JobSettings) -> dict:
    """How a job cuts each global batch on one GPU (``experiments.accumulation``, as the loop
    cuts it): its ``micro_batches`` and the ``micro_batch_size`` of the largest, under
    ``max_batch_per_gpu`` (``train.max_batch_per_gpu``, lowered to what the site's preflight
    measured to fit: ``preflight_plan.measured_job``). In the job's log and result."""
    cap, world = settings.max_batch_per_gpu, settings.world
    return {
        "micro_batches": accumulation(settings.batch_size, world, cap),
        "micro_batch_size": per_gpu_batch(settings.batch_size, world, cap),
    }


def run_slot(
    settings: TrialSettings,
    threads: int,
    deadline: float | None,
    files: TrialFiles,
    stage: int,
    slot: int,
) -> dict | None:
    """Train the trial in ``slot`` of ``stage`` up to ``settings.stage_epochs`` (a halving rung)
    or to the end, resuming its checkpoint; write the slot's result to ``files.result``.
    ``files.previous``: the previous rung's decision (None at stage 0, whose slot is the
    trial); a slot nothing was promoted into is the command's (``imagenot.train.cli.trial``
    writes it without importing torch), not this job's.

    The trial keeps its best-validation weights in its folder; when it ends (early stopping,
    the cap or the schedule's end) its checkpoint is deleted and the weights' sha256 recorded,
    so a final run can reuse them (``imagenot.train.finals``). Returns None on data-parallel
    ranks other than 0.
    """
    out = Path(files.result)
    trial = slot_trial(slot, Path(files.previous) if files.previous else None)
    row = read_trial(Path(files.trials), trial)
    workdir = trial_dir(out.parent.parent, trial)  # the run's folder: {run}/stage-{k}/slot-{s}
    summary = fit_job(
        settings.job, threads, deadline, files, row, row["seed"], workdir, settings.stage_epochs
    )
    if summary is None:  # a data-parallel rank other than 0: rank 0 writes the result
        return None
    result = {"stage": stage, "slot": slot, "trial": trial, **summary}
    if summary["stopped_by"] == search.DIVERGED:  # never promoted nor selected: free its disk
        drop(workdir)
    if summary["stopped_by"] in search.ENDED:
        drop(workdir, best=False)
        result["best_sha256"] = sha256_file(workdir / BEST)
    write_record(result, out, "slot")
    log.info(
        f"stage {stage} slot {slot} (trial {trial}): best val accuracy "
        f"{result['val_accuracy']:.2f}% after {result['epochs']} epochs"
    )
    return result
