"""The training loop (torchvision-references style) with step-level checkpoints and resumption.

Its parts live beside it: the feed (``feed``: data, preprocessing), learning-rate schedules and
optimizers (``schedules``), checkpoints (``checkpoints``), stop requests (``interrupts``) and the
device (``device``). ``fit`` owns the loop and the checkpoint, written durably every
``checkpoint_minutes``, when a signal or the job's deadline asks it to stop, and when the job's
stage or run ends; not after every epoch (a short epoch would rewrite gigabytes every minute).
Everything random is derived from the job seed (data order from the epoch, dropout from the
global step and rank), and the learning rate is a pure function of the global step, so a job
stopped mid-epoch resumes at the saved step and one killed without a recent checkpoint repeats
the epochs and steps since the last one: either way the final metrics equal those of an
uninterrupted run (CPU, deterministic algorithms). Data-parallel
training (``Dist.world > 1``, ranks started by torchrun) is described in
``imagenot.train.distributed``.
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from imagenot.core import job_usage
from imagenot.train.checkpoints import (
    State,
    load_checkpoint,
    previous,
    save_checkpoint,
    save_tensors,
    set_aside_stale_checkpoint,
)
from imagenot.train.distributed import (
    SINGLE,
    Dist,
    accumulates,
    accumulation,
    micro_batches,
    no_sync_unless,
    shard,
)
from imagenot.train.failfast import Diverged, StartupOutOfMemory
from imagenot.train.features import Features
from imagenot.train.feed import Feeder, autocast, layout, to_device
from imagenot.train.identity import Job
from imagenot.train.interrupts import Interrupts
from imagenot.train.registry import build_model, head_module
from imagenot.train.schedules import build_optimizer, learning_rate
from imagenot.train.search import DIVERGED, stable_int, step_seeds

log = logging.getLogger(__name__)


def seed_step(seed: int, device: torch.device) -> None:
    """Seed the generators a training step draws from (dropout, stochastic depth): the CPU's
    and, on CUDA, this process's device's; the same draws as ``torch.manual_seed(seed)``.

    Why not ``torch.manual_seed``: it also seeds every other backend, and for each one not
    initialised (CUDA, XPU, MTIA on a CPU job) torch queues a deferred call together with a
    formatted stack trace; that cost 0.1-0.2 ms per step, on every step of a CPU job, whereas
    seeding the generator in use costs about a microsecond (see docs/benchmarks.md).
    """
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)  # the current device: this rank's GPU


def make_model(job: Job, init: Callable[[nn.Module], None] | None = None):
    """Model (with ``init`` applied, e.g. backbone weights) and optimizer over its trainables."""
    torch.manual_seed(stable_int(job.seed, "init"))
    model = build_model(job.settings.model, job.num_classes)
    if init is not None:
        init(model)
    if job.settings.trainable == "head":
        model.requires_grad_(False)
        head_module(model, job.settings.model).requires_grad_(True)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(params, job.hyperparameters)
    return model, optimizer


def set_mode(model: nn.Module, job: Job, train: bool) -> None:
    """train/eval mode; under TL the frozen backbone stays in eval (BatchNorm statistics fixed)."""
    model.train(train)
    if train and job.settings.trainable == "head":
        model.eval()
        head_module(model, job.settings.model).train()


def horizon(job: Job) -> int:
    """The job's schedule horizon in epochs (``max_epochs`` when not given)."""
    return job.settings.schedule_epochs or job.settings.max_epochs


def schedule_ended(job: Job, epoch: int) -> bool:
    """Whether a cosine schedule with floor 0 has reached its horizon: the rate is 0 from here,
    so further epochs cannot learn (they would only wait for early stopping)."""
    hp = job.hyperparameters
    return hp["scheduler"] == "cosine" and hp["min_lr_factor"] == 0 and epoch >= horizon(job)


def _largest_piece(n: int, job: Job, d: Dist, max_batch: int | None) -> int:
    """The most images one of this rank's micro-batches holds (as :func:`train_one_epoch` cuts
    a full global batch): what a feeder's batch buffers must hold."""
    first = torch.arange(min(job.settings.batch_size, n))
    pieces = micro_batches(shard(first, d), accumulation(len(first), d.world, max_batch))
    return max(len(piece) for piece in pieces)


def train_one_epoch(
    model,
    forward,
    optimizer,
    feeder: Feeder,
    job: Job,
    state: State,
    device: torch.device,
    save: Callable[[], None] | None = None,
    interrupts: Interrupts | None = None,
    d: Dist = SINGLE,
    max_batch: int | None = None,
) -> dict:
    """One pass over the data in the epoch's seeded order; returns loss, accuracy, images/s.

    The order is cut into global batches of the settings' ``batch_size``; this rank trains on
    its part of each (``distributed.shard``), in micro-batches of at most ``max_batch`` whose gradients
    accumulate (DDP synchronises on the last). Starts after ``state.batch`` batches when a
    step-level checkpoint stopped mid-epoch (the order is a function of seed and epoch, each
    step's random draws of seed, step and rank, so the remaining steps are those of an
    uninterrupted run).
    Per-step sums stay on the device: the host synchronises only at checkpoints, every
    :data:`CHECK_EVERY` steps (a non-finite loss on any rank raises ``Diverged``) and the end;
    they stay in ``state`` until the epoch is validated (a stop in validation saves them).
    """
    settings = job.settings
    n = len(feeder.data)
    features = isinstance(feeder.data, Features)
    if state.batch == 0:
        state.step_losses, state.step_correct = [], []
    order = torch.randperm(
        n, generator=torch.Generator().manual_seed(stable_int(job.seed, "order", state.epoch))
    )
    global_batches = list(order.split(settings.batch_size))
    steps_per_epoch = len(global_batches)
    set_mode(model, job, True)
    losses = torch.zeros(steps_per_epoch, dtype=torch.float64, device=device)
    correct = torch.zeros(steps_per_epoch, dtype=torch.int64, device=device)
    if d.main and state.batch:  # sums of the steps before the checkpoint (other ranks: 0)
        losses[: state.batch] = torch.tensor(state.step_losses, dtype=torch.float64)
        correct[: state.batch] = torch.tensor(state.step_correct, dtype=torch.int64)
    plan = [
        micro_batches(shard(b, d), accumulation(len(b), d.world, max_batch))
        for b in global_batches[state.batch :]
    ]
    loader = iter(feeder.epoch([piece for pieces in plan for piece in pieces]))
    done, start = state.batch, time.perf_counter()
    check = 1 if d.world == 1 else CHECK_EVERY
    seed_of, accumulating = step_seeds(job.seed, d.rank), accumulates(forward)
    unchecked = state.batch  # the first step whose loss is not yet checked to be finite

    def sync() -> None:
        state.step_losses = d.sum_(losses.clone())[: state.batch].tolist()
        state.step_correct = d.sum_(correct.clone())[: state.batch].tolist()

    for pieces in tqdm(
        plan,
        total=steps_per_epoch,
        initial=done,
        desc=f"epoch {state.epoch + 1}",
        file=sys.stderr,
        leave=False,
        disable=not d.main,
    ):
        size = len(global_batches[state.batch])
        # dropout etc.: a function of (seed, step, rank), so a resumed step draws what it drew
        seed_step(seed_of(state.step), device)
        lr = learning_rate(state.step, steps_per_epoch, horizon(job), job.hyperparameters)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        for i, _ in enumerate(pieces):
            images, labels = next(loader)
            x, y = to_device(
                images, labels, device, settings.image_size, settings.normalisation, features
            )
            skip_sync = accumulating and i < len(pieces) - 1
            with no_sync_unless(forward, skip_sync), autocast(device):
                logits = forward(x)
                # summed, scaled so that DDP's average over ranks is the global batch's mean
                loss = F.cross_entropy(logits.float(), y, reduction="sum") * (d.world / size)
            with no_sync_unless(forward, skip_sync):
                loss.backward()
            # in place on the step's element (``t[i] += v`` would also copy it back into itself);
            # a non-finite loss leaves its step's sum non-finite: the check below reads the sums
            losses[state.batch].add_(loss.detach().double() * (size / d.world))
            correct[state.batch].add_((logits.detach().argmax(1) == y).sum())
        optimizer.step()
        state.step += 1
        state.batch += 1
        # one host read per CHECK_EVERY steps (the ranks agree on it, at the same steps): are
        # the loss sums of the steps since the last check finite
        if state.step % CHECK_EVERY == 0 or state.batch == steps_per_epoch:
            finite = bool(torch.isfinite(losses[unchecked : state.batch]).all())
            if d.any(not finite, device):
                raise Diverged(f"training loss not finite by step {state.step}")
            unchecked = state.batch
        due = save is not None and interrupts is not None and state.step % check == 0
        if due and d.any(interrupts.checkpoint_due(), device):
            stop = d.any(interrupts.requested is not None, device)
            sync()
            save()
            interrupts.saved(stop)  # raises Preempted when a stop was requested
    elapsed = time.perf_counter() - start
    sync()
    images = max(n - done * settings.batch_size, 0)  # (0: resumed with the epoch trained)
    return {
        "train_loss": sum(state.step_losses) / max(n, 1),
        "train_accuracy": 100.0 * sum(state.step_correct) / max(n, 1),
        "lr": learning_rate(state.step - 1, steps_per_epoch, horizon(job), job.hyperparameters)
        if steps_per_epoch
        else 0.0,
        "images_per_s": images / max(elapsed, 1e-9),
    }


# In a data-parallel job, how often (optimizer steps) the ranks agree on a checkpoint or stop:
# one small all-reduce, read on the host, per this many steps.
CHECK_EVERY = 8


@torch.no_grad()
def evaluate(
    model, forward, feeder: Feeder, job: Job, device: torch.device, d: Dist, expired: Callable
) -> tuple[float, float, int] | None:
    """(top-1 accuracy in percent, mean loss, n) of the model on the ``feeder``'s data; each
    rank scores its part and the sums are all-reduced. Sums stay on the device (one sync at
    the end).

    ``expired`` (a training job's stop request: deadline, signal), asked before each batch, ends
    the pass early: the ranks agree and None is returned (the caller checkpoints and exits)."""
    settings = job.settings
    set_mode(model, job, False)
    data = feeder.data
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    mine = shard(torch.arange(len(data)), d)
    stopped, features = False, isinstance(data, Features)
    for images, labels in feeder.epoch(list(mine.split(settings.eval_batch_size))):
        if expired():
            stopped = True
            break
        x, y = to_device(
            images, labels, device, settings.image_size, settings.normalisation, features
        )
        with autocast(device):
            logits = forward(x)
        loss_sum += F.cross_entropy(logits.float(), y, reduction="sum").double()
        correct += (logits.argmax(1) == y).sum()
    if d.any(stopped, device):  # every rank reaches this once
        return None
    d.sum_(loss_sum)
    d.sum_(correct)
    n = len(data)
    return 100.0 * int(correct) / max(n, 1), float(loss_sum) / max(n, 1), n


def fit(
    job: Job,
    train_data,
    val_data,
    checkpoint: Path,
    fingerprint: str,
    stop_epoch: int | None = None,
    best_weights: Path | None = None,
    init: Callable[[nn.Module], None] | None = None,
    on_epoch: Callable[[State], None] | None = None,
    max_batch: int | None = None,
    dist: Dist = SINGLE,
    head_only: bool = False,
    deadline: float | None = None,
) -> tuple[nn.Module, State]:
    """Train until early stopping, the settings' ``max_epochs`` or ``stop_epoch`` (a halving rung).

    Resumes from ``checkpoint`` when it belongs to this job (whatever world size wrote it) and
    to this dataset ``fingerprint``, or from the one kept before it when the newest is
    unreadable; any other checkpoint is set aside and training starts afresh
    (:func:`set_aside_stale_checkpoint`). ``deadline`` (seconds since the epoch,
    ``interrupts.job_deadline``): checkpoint and raise Preempted once it has come, in a training
    step or in validation. ``best_weights`` (optional) receives the best validation epoch's
    weights, held in host memory and written with each checkpoint (not at every improvement:
    up to ~0.8 GB per short epoch). A NaN or infinite loss ends the job at once, nothing saved,
    ``stopped_by`` :data:`DIVERGED`. ``on_epoch`` sees the state
    after each epoch. ``dist`` is this process's place in a data-parallel job whose every rank
    calls ``fit`` (started by torchrun, process group joined: ``distributed.joined``); rank 0's
    model and state are the job's (those it saves). ``max_batch`` caps the per-process batch (gradient
    accumulation keeps the settings' global ``batch_size``).

    ``head_only`` (TL over stored features, ``imagenot.train.features``): the data are the
    head's inputs, so each step runs the head alone; the model, its checkpoints and best
    weights stay the full model (frozen backbone + head), as on the image path. One process.
    """
    settings = job.settings
    if head_only and (dist.world > 1 or settings.trainable != "head"):
        raise ValueError("head_only fits a TL job's head in one process (world 1)")
    if head_only != isinstance(train_data, Features):
        raise ValueError("head_only fits a head over Features, and only over Features")
    d = dist
    device = torch.device(job.device)
    model, optimizer = make_model(job, init)
    state = State(identity=job.identity(), fingerprint=fingerprint)
    if d.main:  # vetted once, before any rank reads them
        for candidate in (checkpoint, previous(checkpoint)):
            set_aside_stale_checkpoint(candidate, state.identity, fingerprint)
    d.barrier()
    found = [p for p in (checkpoint, previous(checkpoint)) if p.is_file()]  # newest first
    if found:
        state = load_checkpoint(found[0], model, optimizer)
        if d.main:
            log.info("resumed %s at epoch %d, batch %d", found[0], state.epoch, state.batch)
    model.to(device, memory_format=layout(device))
    optimizer.load_state_dict(optimizer.state_dict())  # move state to the model's device
    forward: nn.Module = head_module(model, settings.model) if head_only else model
    if d.world > 1:
        if device.type == "cuda":  # BatchNorm over the whole per-step batch (module docstring)
            forward = nn.SyncBatchNorm.convert_sync_batchnorm(model)
        # buffers are not broadcast: SyncBatchNorm keeps them equal on CUDA, and on the CPU
        # rank 0's are the ones saved
        forward = nn.parallel.DistributedDataParallel(
            forward,
            device_ids=[torch.cuda.current_device()] if device.type == "cuda" else None,
            broadcast_buffers=False,
        )
    forward = torch.compile(forward) if settings.compile else forward
    stop_epoch = min(stop_epoch or settings.max_epochs, settings.max_epochs)
    pin = device.type == "cuda"
    per_gpu = _largest_piece(len(train_data), job, d, max_batch)
    val_batch = min(settings.eval_batch_size, len(val_data))
    feeders = (  # encoded JPEGs (train.decode_on_gpu) are decoded ahead on the device
        Feeder(train_data, settings.num_workers, per_gpu, pin, decode_on=device),
        Feeder(val_data, settings.num_workers, val_batch, pin, decode_on=device),
    )
    job_usage.declare_workers(2 * settings.num_workers)  # both feeders' workers persist

    first_step = state.step
    try:
        with Interrupts(settings.checkpoint_minutes, deadline) as interrupts:
            _epochs(model, forward, optimizer, feeders, job, state, device, checkpoint,
                    stop_epoch, best_weights, on_epoch, interrupts, d, max_batch)  # fmt: skip
    except torch.cuda.OutOfMemoryError as exc:
        if state.step != first_step:  # it trained here before: a retry may fit (fragmentation)
            raise
        raise StartupOutOfMemory(
            f"CUDA out of memory at the first training step of {settings.model} (per-GPU batch "
            f"{per_gpu}, image size {settings.image_size}): rerun the preflight on this kind of "
            f"node, or set train.max_batch_per_gpu below {per_gpu}"
        ) from exc
    return model, state


def _epochs(
    model, forward, optimizer, feeders, job, state, device, checkpoint, stop_epoch, best_weights,
    on_epoch, interrupts, d: Dist, max_batch,
) -> None:  # fmt: skip
    settings = job.settings
    held: list[dict] = []  # the best weights not yet written, in host memory (rank 0)

    def save() -> None:  # rank 0 writes; the others wait until the files are there
        if d.main:
            # the best weights first: a checkpoint on disk never names a best epoch whose
            # weights are not (a kill between the two repeats the epochs since the last save)
            if held and best_weights is not None:
                save_tensors(held.pop(), best_weights)
            save_checkpoint(checkpoint, model, optimizer, state)
        d.barrier()

    train, val = feeders
    while state.stopped_by is None and state.epoch < stop_epoch:
        # each rank scores its part with the plain module: no collective inside the passes,
        # whose number may differ between ranks
        scorer = forward if d.world == 1 else model
        try:
            row = train_one_epoch(
                model, forward, optimizer, train, job, state, device, save, interrupts, d,
                max_batch,
            )  # fmt: skip
            scored = evaluate(model, scorer, val, job, device, d, interrupts.stop_due)
            if scored is not None and not math.isfinite(scored[1]):
                raise Diverged(f"validation loss {scored[1]} after epoch {state.epoch + 1}")
        except Diverged as exc:  # nothing more is saved (the weights are not finite): the end
            state.stopped_by = DIVERGED
            if d.main:
                log.warning("diverged: %s; the trial ends here (stopped_by %s)", exc, DIVERGED)
            return
        if scored is None:  # the deadline or a signal came during validation: the epoch's
            save()  # training is kept (state.batch: all its steps); its validation reruns
            interrupts.saved(True)  # raises Preempted
        val_accuracy, val_loss, _ = scored
        state.batch, state.step_losses, state.step_correct = 0, [], []
        state.epoch += 1
        row = {"epoch": state.epoch, **row, "val_loss": val_loss, "val_accuracy": val_accuracy}
        state.history.append(row)
        if val_accuracy > state.best_val:
            state.best_val, state.best_epoch, state.bad_epochs = val_accuracy, state.epoch, 0
            if best_weights is not None and d.main:
                held[:] = [
                    {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
                ]
        else:
            state.bad_epochs += 1
        if state.bad_epochs >= settings.patience:
            state.stopped_by = "early_stopping"
        elif state.epoch >= settings.max_epochs:
            state.stopped_by = "max_epochs"
        elif schedule_ended(job, state.epoch):
            state.stopped_by = "schedule_end"
        # Save when the interval or a stop (signal, deadline) asks, and when the stage or run
        # ends (the next stage resumes there); a kill in between repeats from the last save.
        ended = state.stopped_by is not None or state.epoch >= stop_epoch
        if d.any(interrupts.checkpoint_due(), device) or ended:
            stop = d.any(interrupts.requested is not None, device)
            save()
            interrupts.saved(stop and not ended)  # a stop now only matters if work is left
        if d.main:
            log.info(
                "epoch %(epoch)d: train loss %(train_loss).4f acc %(train_accuracy).2f%%, val acc "
                "%(val_accuracy).2f%%, lr %(lr).3g, %(images_per_s).1f images/s",
                row,
            )
        if on_epoch is not None:
            on_epoch(state)
