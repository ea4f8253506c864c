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
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from imagenot.io import sha256_file, write_text
from imagenot.train import search
from imagenot.train.checkpoints import history_csv, remove_checkpoint
from imagenot.train.device import configure, deterministic_for, resolve_device
from imagenot.train.failfast import PermanentFailure, diverged_final, missing_weights
from imagenot.train.feed import InMemory
from imagenot.train.loop import Job, fit
from imagenot.train.records import FinalRecord, write_final, write_record
from imagenot.train.registry import load_backbone, read_state_dict
from imagenot.train.trials import (
    BEST,
    CHECKPOINT,
    read_selection,
    read_trial,
    slot_trial,
    trial_dir,
)

if TYPE_CHECKING:
    from imagenot.train.files import FeaturesFiles, FinalFiles, TrialFiles
    from imagenot.train.settings import FinalSettings, JobSettings, TrialSettings

log = logging.getLogger(__name__)
# a result's record of how its training cut the batch (:func:`micro_batching`); a final run
# that reuses its trial's weights copies the trial's
MICRO_BATCHING = ("micro_batches", "micro_batch_size")


# -------------------------------------------------------------------------------------- data


def load_split(dataset_dir: Path, split: str, in_memory: bool, encoded: bool = False):
    """A split as InMemory tensors, or a streaming ManifestDataset (``encoded``: serving the
    JPEG bytes, decoded batch-wise on the GPU; see imagenot.train.feed)."""
    from imagenot.dataset import ManifestDataset, load_split_tensors

    if in_memory:
        return InMemory(*load_split_tensors(dataset_dir, split))
    if encoded:
        from imagenot.train.feed import EncodedImages

        return EncodedImages(ManifestDataset(dataset_dir, split))
    return ManifestDataset(dataset_dir, split)


def _data_source(
    settings: JobSettings, dataset_dir: Path, fingerprint: str, deadline: float | None = None
) -> tuple[Path, bool]:
    """Where the job reads the dataset (node-local copy when asked, staged before the job's
    ``deadline``) and whether it decodes on the GPU (CUDA jobs streaming from shards, when
    train.decode_on_gpu is on; off by default)."""
    if settings.stage_to_local and not settings.in_memory:
        from imagenot.train.feed import stage_to_local

        dataset_dir = stage_to_local(dataset_dir, fingerprint, deadline=deadline)
    encoded = settings.decode_on_gpu and job_device(settings) == "cuda"
    return dataset_dir, encoded


def dataset_of(files: TrialFiles | FinalFiles | FeaturesFiles) -> tuple[Path, int, str]:
    """(folder, number of classes, fingerprint) of the dataset a training job's ``files``
    hand it: its manifest's folder (the shards and classes it is read with) and its
    fingerprint file."""
    from imagenot.dataset import read_classes, read_fingerprint_file

    dataset_dir = Path(files.manifest).parent
    return dataset_dir, len(read_classes(dataset_dir)), read_fingerprint_file(files.fingerprint)


def init_description(settings: JobSettings) -> str:
    """The starting weights as they enter a job's identity: their file and its sha256. A
    missing file is a fault no retry fixes (``failfast.MissingWeights``, naming the keys)."""
    init = settings.init
    if not init:
        return "random"
    try:
        return f"{init} sha256:{sha256_file(init)}"
    except OSError as exc:
        raise missing_weights(settings.model, init, exc) from None


def make_job(settings: JobSettings, hyperparameters: Mapping, seed: int, num_classes: int) -> Job:
    """The loop's Job: the rule's settings, the trial's hyperparameters and seed, the dataset's
    classes, the starting weights' description and the device this process found."""
    return Job(
        settings=settings,
        num_classes=num_classes,
        hyperparameters=dict(hyperparameters),
        seed=seed,
        init=init_description(settings),
        device=job_device(settings),
    )


def job_device(settings: JobSettings) -> str:
    """The device of this job (see ``loop.resolve_device``): the one place CUDA is probed."""
    import torch

    return resolve_device(settings.device, settings.gpu_job, torch.cuda.is_available())


def _configure(settings: JobSettings, threads: int, processes: int) -> None:
    """This process's torch settings; ``threads``: the job's cores on this node; ``processes``:
    the data-parallel ranks sharing them (each rank of a torchrun job configures itself:
    nothing of a parent's reaches it)."""
    deterministic = deterministic_for(settings.deterministic, job_device(settings))
    configure(deterministic, max(1, threads // processes))


def backbone_loader(settings: JobSettings):
    """A callable loading the FT/TL starting weights into a fresh model, or None (ST)."""
    init = settings.init
    if not init:
        return None
    try:
        state = read_state_dict(init)
    except OSError as exc:
        raise missing_weights(settings.model, init, exc) from None
    # a partial, not a lambda: data-parallel workers receive it pickled
    return functools.partial(_load_backbone, name=settings.model, state=state, source=init)


def _load_backbone(model, name: str, state: dict, source: str) -> None:
    load_backbone(model, name, state, source)


def run_features(settings: JobSettings, threads: int, files: FeaturesFiles) -> dict[str, dict]:
    """The TL backbone's features of every image of every split (``imagenot.train.features``),
    written to ``files.features`` (one per split, in ``SPLITS`` order) from the dataset whose
    manifest is ``files.manifest``: the starting weights in a fresh model, eval
    mode, the image path's data source and preprocess, on the job's device. One job for the
    three splits: the model is loaded and the device set up once (on a cluster, a GPU job's
    start-up is longer than a CIFAR-10 split's pass). Returns each split's metadata."""
    import torch

    from imagenot.dataset import SPLITS
    from imagenot.train import features
    from imagenot.train.registry import build_model, head_module

    if settings.trainable != "head" or not settings.init:
        raise ValueError("features are computed for TL jobs (trainable head, starting weights)")
    if len(files.features) != len(SPLITS):
        raise ValueError(
            f"--features: {len(files.features)} files for the {len(SPLITS)} splits {SPLITS}"
        )
    _configure(settings, threads, 1)
    dataset_dir, num_classes, fingerprint = dataset_of(files)
    # no training: no hyperparameters, and the seed is moot (eval mode, no random draw)
    job = make_job(settings, {}, 0, num_classes)
    device = torch.device(job.device)
    model = build_model(settings.model, num_classes)  # the head is never run: its init is moot
    backbone_loader(settings)(model)
    model.to(device)
    if device.type == "cuda":  # as loop.fit: the same kernels as the image path
        model.to(memory_format=torch.channels_last)
    head = head_module(model, settings.model)
    source, encoded = _data_source(settings, dataset_dir, fingerprint)
    written = {}
    for split, out in zip(SPLITS, files.features, strict=True):
        data = load_split(source, split, settings.in_memory, encoded)
        extracted = features.extract(model, head, data, job, device)
        meta = features.describe(job, fingerprint, split)
        meta["dtype"] = str(extracted.images.dtype).removeprefix("torch.")
        meta["device"] = device.type
        features.write(extracted, meta, Path(out))
        written[split] = meta
        log.info(
            "%s %s: %d x %s features (%s) written to %s",
            settings.model,
            split,
            len(extracted),
            tuple(extracted.images.shape[1:]),
            meta["dtype"],
            out,
        )
    return written


def load_features(settings: JobSettings, job: Job, fingerprint: str, split: str):
    """A TL job's stored features of ``split`` (settings ``features``: their folder), checked
    to be those of the job's starting weights, dataset version and image size."""
    from imagenot.train import features

    path = Path(settings.features) / f"{split}.safetensors"
    return features.read(path, features.describe(job, fingerprint, split))


def _fit(
    settings: JobSettings,
    threads: int,
    deadline: float | None,
    files: TrialFiles | FinalFiles,
    row: Mapping,
    seed: int,
    workdir: Path,
    stop_epoch: int | None,
    best: Path,
):
    """Train one job in this process, a rank of a data-parallel job when torchrun started it
    (``imagenot.train.distributed``). Returns (job, model, summary) on rank 0 and None on the
    other ranks, which write nothing. ``files``: the job's, whose dataset it trains on."""
    from imagenot.train.distributed import from_environment, joined
    from imagenot.train.interrupts import Interrupts

    ranks = from_environment()
    if ranks.world > 1:  # torchrun forwards SLURM's signals at once: keep one that comes early
        Interrupts.record_early()
    _configure(settings, threads, ranks.local_world)
    dataset_dir, num_classes, fingerprint = dataset_of(files)
    job = make_job(settings, search.hyperparameters_of(row), seed, num_classes)
    head_only = bool(settings.features)
    if head_only:  # TL over stored features: the head alone, in one process
        train = load_features(settings, job, fingerprint, "train")
        val = load_features(settings, job, fingerprint, "val")
    else:
        source, encoded = _data_source(settings, dataset_dir, fingerprint, deadline)
        train = load_split(source, "train", settings.in_memory, encoded)
        val = load_split(source, "val", settings.in_memory, encoded)
    batching = micro_batching(settings)
    if ranks.main:
        log.info(
            "%s: %d images per step, at most %d per GPU at once: %d micro-batch(es) per GPU "
            "(largest per GPU: %s)",
            settings.model, settings.batch_size, batching["micro_batch_size"],
            batching["micro_batches"], settings.max_batch_per_gpu or "no cap",
        )  # fmt: skip
    backend = "nccl" if job.device == "cuda" else "gloo"
    with joined(backend, planned=settings.world) as d:
        model, state = fit(
            job,
            train,
            val,
            workdir / CHECKPOINT,
            fingerprint,
            stop_epoch,
            best,
            backbone_loader(settings),
            max_batch=settings.max_batch_per_gpu,
            dist=d,
            head_only=head_only,
            deadline=deadline,
        )
    if not d.main:
        return None
    write_text(history_csv(state), workdir / "metrics.csv")
    summary = {
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
    return job, model, summary


def micro_batching(settings: JobSettings) -> dict:
    """How a job cuts each global batch on one GPU (``experiments.accumulation``, as the loop
    cuts it): its ``micro_batches`` and the ``micro_batch_size`` of the largest, under
    ``max_batch_per_gpu`` (``train.max_batch_per_gpu``, lowered to what the site's preflight
    measured to fit: ``preflight_plan.measured_job``). In the job's log and result."""
    from imagenot.train.experiments import accumulation, per_gpu_batch

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
    trial).

    The trial keeps its best-validation weights in its folder; when it ends (early stopping,
    the cap or the schedule's end) its checkpoint is deleted and the weights' sha256 recorded,
    so ``run_final`` can reuse them. Returns None for an empty slot (nothing promoted into it)
    and on data-parallel ranks other than 0.
    """
    from imagenot.train.trials import write_empty_slot

    out = Path(files.result)
    trial = slot_trial(slot, Path(files.previous) if files.previous else None)
    if trial is None:
        write_empty_slot(stage, slot, out)
        return None
    row = read_trial(Path(files.trials), trial)
    workdir = trial_dir(out.parent.parent, trial)  # the run's folder: {run}/stage-{k}/slot-{s}
    fitted = _fit(
        settings.job, threads, deadline, files, row, row["seed"], workdir,
        settings.stage_epochs, workdir / BEST,
    )  # fmt: skip
    if fitted is None:  # a data-parallel rank other than 0: rank 0 writes the result
        return None
    summary = fitted[2]
    result = {"stage": stage, "slot": slot, "trial": trial, **summary}
    if summary["stopped_by"] == search.DIVERGED:  # never promoted nor selected: free its disk
        remove_checkpoint(workdir / CHECKPOINT)
        (workdir / BEST).unlink(missing_ok=True)
    if summary["stopped_by"] in search.ENDED:
        remove_checkpoint(workdir / CHECKPOINT)
        result["best_sha256"] = sha256_file(workdir / BEST)
    write_record(result, out, "slot")
    log.info(
        "stage %d slot %d (trial %d): best val accuracy %.2f%% after %d epochs",
        stage,
        slot,
        trial,
        result["val_accuracy"],
        result["epochs"],
    )
    return result


def reusable_trial(selection: Mapping, job_identity: str, trial_weights: Path) -> bool:
    """Whether the selected trial's best weights are what a final run would train: the trial
    ended on its own (not at a rung), with the same job (hyperparameters, seed, epochs, data
    start), and its weights file is the one it recorded."""
    result = selection.get("result") or {}
    return (
        result.get("stopped_by") in search.ENDED
        and result.get("identity") == job_identity
        and trial_weights.is_file()
        and result.get("best_sha256") == sha256_file(trial_weights)
    )


def run_final(
    final: FinalSettings,
    threads: int,
    deadline: float | None,
    files: FinalFiles,
    seed: int,
    run: Mapping,
) -> FinalRecord | None:
    """Retrain the selected trial with ``seed``; keep the best-validation weights and test them:
    the weights to ``files.model``, the record to ``files.result``; the checkpoint, the best
    weights so far and ``metrics.csv`` beside them (where a retry resumes).

    With ``final.reuse_trial`` (the space's first seed) the run trains with the trial's own seed, so
    it is the trial run again: when the trial already ran the full schedule its weights and
    metrics are taken as they are (no retraining; deterministic CPU runs give the same weights
    either way, which a test checks). Returns None on data-parallel ranks other than 0.
    """
    import shutil

    import torch

    from imagenot.train.checkpoints import load_weights
    from imagenot.train.loop import evaluate
    from imagenot.train.registry import head_module

    settings = final.job
    selection, out_dir = Path(files.selection), Path(files.model).parent
    model_file, result_file = Path(files.model), Path(files.result)
    chosen = read_selection(selection)  # the trial's own sealed result, copied: checked
    row = read_trial(Path(files.trials), chosen["trial"])
    train_seed = (
        row["seed"]
        if final.reuse_trial
        else search.stable_int(final.master_seed, run["dataset"], run["protocol"], "final", seed)
    )
    best = out_dir / "best.safetensors"
    dataset_dir, num_classes, _ = dataset_of(files)
    job = make_job(settings, search.hyperparameters_of(row), train_seed, num_classes)
    source = trial_dir(selection.parent, chosen["trial"])
    if final.reuse_trial and reusable_trial(chosen, job.identity(), source / BEST):
        from imagenot.train.distributed import from_environment

        if not from_environment().main:  # nothing to train: rank 0 copies and tests
            return None
        _configure(settings, threads, 1)
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / BEST, best)
        shutil.copyfile(source / "metrics.csv", out_dir / "metrics.csv")
        keys = ("model", "num_classes", "n_val", "image_size", "val_accuracy", "best_epoch")
        summary = {k: chosen["result"][k] for k in keys}
        summary.update(
            {k: chosen["result"][k] for k in ("epochs", "stopped_by", "hyperparameters")},
            **{k: chosen["result"][k] for k in MICRO_BATCHING if k in chosen["result"]},
            seed=train_seed,
            dataset_fingerprint=chosen["result"]["dataset_fingerprint"],
            normalisation=settings.normalisation,
            identity=job.identity(),
            reused_trial=True,
        )
        from imagenot.train.registry import build_model

        model = build_model(settings.model, num_classes).to(torch.device(job.device))
        log.info("final %s seed %d: reusing trial %d's weights", run, seed, chosen["trial"])
    else:
        fitted = _fit(settings, threads, deadline, files, row, train_seed, out_dir, None, best)
        if fitted is None:  # a data-parallel rank other than 0: rank 0 tests and writes
            return None
        job, model, summary = fitted
        summary["reused_trial"] = False
        if summary["stopped_by"] == search.DIVERGED:  # not retried (failfast)
            remove_checkpoint(out_dir / CHECKPOINT)
            lr = job.hyperparameters["lr"]
            raise diverged_final(run, seed, chosen["trial"], lr, train_seed)
    model.load_state_dict(load_weights(best))
    fingerprint = summary["dataset_fingerprint"]
    if settings.features:  # TL over stored features: score the head on the test features
        test = load_features(settings, job, fingerprint, "test")
        forward = head_module(model, settings.model)
    else:
        source, encoded = _data_source(settings, dataset_dir, fingerprint)
        test = load_split(source, "test", settings.in_memory, encoded)
        forward = model
    test_accuracy, test_loss, n_test = evaluate(model, forward, test, job, torch.device(job.device))
    if n_test and not math.isfinite(test_loss):  # finite weights can give non-finite outputs
        raise PermanentFailure(
            f"{best}: final {run} seed {seed}: the model's outputs on the test split are not "
            "finite (NaN or infinity; e.g. a batch norm's running variance below 0); its test "
            "accuracy is refused, not reported at chance"
        )
    # Finished training: drop the checkpoint before handing the best weights on, so a checkpoint
    # never outlives them (a rerun after a kill here trains afresh, to the same weights).
    remove_checkpoint(out_dir / CHECKPOINT)
    model_file.unlink(missing_ok=True)
    best.replace(model_file)
    result = FinalRecord.of(
        {
            **summary,
            **run,
            "seed": seed,
            "train_seed": train_seed,
            "trial": chosen["trial"],
            "test_accuracy": test_accuracy,
            "n_test": n_test,
            "chance_accuracy": 100.0 / summary["num_classes"],
            "weights_sha256": sha256_file(model_file),
        }
    )
    result = write_final(result, result_file)
    log.info(
        "final %s seed %d: test accuracy %.2f%% (chance %.2f%%)",
        run,
        seed,
        test_accuracy,
        result.chance_accuracy,
    )
    return result
