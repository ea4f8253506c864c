"""The preflight: short jobs, in the training jobs' env and with their resources, that check
what the GPU jobs of the config depend on before any is submitted (why, and which jobs wait for
which check: the module docstring of ``imagenot.train.preflight_plan``; how to run it:
docs/gpu.md, "First hour on a GPU").

Checks, each ``pass``, ``warn`` (runs, but wastes GPU time or departs from the protocol),
``fail`` (the jobs would fail), ``skip`` (with its reason: a GPU-only check on a CPU run) or
``info`` (measured, not judged):

* ``cuda``: the device the jobs will use, by the jobs' own rule (``imagenot.core.device``), and a
  matrix product and a cuDNN convolution on it (the env's CUDA against the node's driver);
* ``memory``: per model and space, two training steps (forward, backward, SGD step: momentum
  buffers allocated) in bf16 autocast on channels-last inputs, as the loop trains, at the
  model's input side (``registry.input_size``) and the space's batch per GPU, or the TL
  backbone's forward pass at the eval batch; the allocator's peak against the device's memory,
  and where the batch does not fit the largest batch that does (``largest_fit``): the site's
  training jobs take it as their micro-batch;
* ``feed``: the real feed against device-resident data at the dataset's stored size, read
  where the jobs read it, both ways of decoding on CUDA (``imagenot.train.preflight_feed``;
  ``imagenot.train.feed_bench``, shared with ``benchmarks/bench_feed_models.py``);
* ``host``: ``/dev/shm`` and the job's memory limit (its cgroup) against the loader rings'
  need (``rings.ring_bytes``; every training job asks for them on top of ``mem_mb``);
* ``precision``: bf16 against float32 from the same weights on the same batches, dropout and
  stochastic depth off (``imagenot.train.preflight_precision``): the losses and gradients of a
  few training steps, and evaluation logits and top-1 predictions on a batch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from imagenot.core.device import DeviceError, cuda_available, resolve_device
from imagenot.train import feed_bench, preflight_feed, preflight_precision, rings
from imagenot.train.experiments import accumulation
from imagenot.train.feed import autocast, layout, preprocess
from imagenot.train.preflight_plan import Check, measured_batch
from imagenot.train.registry import build_model, input_size
from imagenot.train.schedules import build_optimizer
from imagenot.train.settings import PreflightSettings

NUM_CLASSES = 1000  # the widest head of the paper (ImageNot, ImageNet)
FIT_FRACTION = 0.9  # of the device's memory: room for fragmentation and other processes
SEARCH_STEPS = 4  # bisections between the largest batch that fits and the smallest that does not
GIB = 1 << 30


class PreflightFailed(ValueError):
    """At least one check failed: one line naming them and the report."""


@dataclass
class Options:
    """How long the measured checks run (the rule's defaults; benchmarks/gpu_check.sh and the
    tests shorten them): feed steps, warm-up steps and JPEGs written per stored size, and
    ``workers`` replacing the config's loader workers (None: the config's)."""

    feed_steps: int = 20
    feed_warmup: int = 5
    feed_images: int = 512
    workers: int | None = None
    # the feed measured both ways of decoding (None: on CUDA; preflight_feed.check_feed), and
    # the folder of the datasets the jobs read (None: the config's, results/datasets)
    both_decoders: bool | None = None
    datasets_root: str | None = None
    # each side of a feed check times at least this long besides feed_steps (feed_bench.timed)
    feed_seconds: float = 2.0


# ---- cuda ----------------------------------------------------------------------------------
def check_cuda(settings: PreflightSettings) -> tuple[Check, torch.device | None]:
    """The device the jobs will train on, and whether CUDA works on it (None: it does not)."""
    try:
        device = resolve_device(settings.device, settings.gpu_job, cuda_available())
    except DeviceError as exc:
        hint = ""
        if os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER"):
            hint = (
                "; this job runs in a container: Apptainer shows the GPUs only with --nv "
                "(the site profile of `imagenot slurm-profile` passes apptainer-args: --nv)"
            )
        return Check("cuda", "fail", f"{exc}{hint}"), None
    if device == "cpu":
        why = "train.device is cpu" if settings.device == "cpu" else "resources.gpus is 0"
        return Check("cuda", "skip", f"no GPU planned ({why}): CPU jobs"), torch.device("cpu")
    dev = torch.device("cuda")
    try:
        a = torch.randn(512, 512, device=dev)
        (a @ a).sum().item()
        x = torch.randn(2, 3, 32, 32, device=dev).to(memory_format=torch.channels_last)
        conv = torch.nn.Conv2d(3, 8, 3).to(dev, memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            conv(x).float().sum().item()
        torch.cuda.synchronize(dev)
    except RuntimeError as exc:
        msg = " ".join(str(exc).split())[:300]
        msg = f"CUDA is visible but does not run ({msg}); an env built for a newer driver: set "
        msg += 'resources.cuda (or the site\'s cuda) to "12" (docs/cluster.md)'
        return Check("cuda", "fail", msg), None
    props = torch.cuda.get_device_properties(dev)
    detail = f"{props.name}, {props.total_memory / GIB:.1f} GiB, torch CUDA {torch.version.cuda}"
    return Check("cuda", "pass", detail, {"gpu": props.name}), dev


# ---- memory --------------------------------------------------------------------------------
def _batch(n: int, side: int, device: torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` random uint8 images of ``side`` px and their labels, drawn from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, side, side), dtype=torch.uint8, generator=g)
    g = torch.Generator().manual_seed(seed + 1)
    return images.to(device), torch.randint(0, NUM_CLASSES, (n,), generator=g).to(device)


def step_peak(run: dict, batch: int, image_size: int, device: torch.device) -> int | None:
    """The allocator's peak (bytes) of two training steps of ``run``'s model at ``batch``
    (``features`` mode: one forward pass in eval mode), or None when the device ran out of
    memory. On the CPU the steps run (the model builds and trains at this size) and the peak is
    0: the CPU has no device memory to measure. Every tensor of the steps lives in
    :func:`_steps`'s frame, gone before the cache is emptied: the next, smaller attempt's peak
    starts from nothing."""
    try:
        return _steps(run, batch, image_size, device)
    except torch.OutOfMemoryError:
        return None
    finally:
        preflight_feed.release()


def _steps(run: dict, batch: int, image_size: int, device: torch.device) -> int:
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    model = build_model(run["model"], NUM_CLASSES).to(device, memory_format=layout(device))
    images, labels = _batch(batch, run["stored_size"], device, seed=0)
    if run["mode"] == "features":
        model.eval()
        with torch.no_grad(), autocast(device):
            model(preprocess(images, image_size, run["normalisation"], layout(device)))
    else:
        model.train()
        optimizer = build_optimizer(list(model.parameters()), feed_bench.HYPERPARAMETERS)
        for _ in range(2):
            feed_bench.train_step(
                model, optimizer, images, labels, device, image_size, run["normalisation"]
            )
    if not cuda:
        return 0
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_reserved(device)


def _micro_batches(run: dict, largest: int) -> int | None:
    """Micro-batches per GPU of ``run``'s global batch at ``largest`` images each, as the loop
    cuts it (``experiments.accumulation``); None for a TL feature pass or when nothing fits."""
    if run["mode"] == "features" or not largest:
        return None
    return accumulation(run["batch_size"], run["world"], largest)


@dataclass(frozen=True)
class Card:
    """What the memory check measures on: the device's memory (bytes) and ``peak(run, batch)``,
    the allocator's peak (bytes; None: out of memory) of ``run``'s steps at ``batch``
    (:func:`step_peak` on CUDA; a stand-in in the tests, which have no GPU)."""

    total: int
    peak: Callable[[dict, int], int | None]


def card(device: torch.device, image_size: int) -> Card | None:
    """The card the jobs will train on (None on the CPU: no device memory to measure); each
    run's steps at its model's input side (``input_size``: its own, else ``image_size``,
    train.image_size)."""
    if device.type != "cuda":
        return None
    total = torch.cuda.get_device_properties(device).total_memory
    return Card(
        total,
        lambda run, batch: step_peak(run, batch, input_size(run["model"], image_size), device),
    )


def check_memory(
    runs: list[dict], image_size: int, device: torch.device, measured: Card | None
) -> Check:
    """``runs`` of one model, mode and per-GPU batch (their spaces share the result), measured
    on ``measured`` (:func:`card`; None: the steps run on the CPU, nothing measured), at the
    model's input side (``input_size`` of train.image_size ``image_size``)."""
    run = runs[0]
    side = input_size(run["model"], image_size)
    names = [r["space"] for r in runs]
    tl = "; TL features" if run["mode"] == "features" else ""
    name = f"memory {run['model']} ({', '.join(names)}{tl})"
    spaces = {"model": run["model"], "mode": run["mode"], "spaces": names, "image_size": side}
    if measured is None:
        step_peak(run, run["per_gpu"], side, device)
        detail = f"{run['per_gpu']} per GPU ran on the CPU; device memory not measured"
        return Check(name, "info", detail, {"per_gpu": run["per_gpu"], **spaces})
    check = memory_verdict(name, run, measured.total, lambda b: measured.peak(run, b))
    check.values.update(spaces)
    return check


def memory_verdict(name: str, run: dict, total: int, peak_of) -> Check:
    """The peak at ``run``'s per-GPU batch (its share of the space's batch) by ``peak_of(batch)``
    (peak bytes, None: out of memory), and the largest batch measured to fit in
    :data:`FIT_FRACTION` of ``total`` bytes: the share itself when it fits, else the search's
    (halving, then bisecting up). ``largest_fit`` is what the training jobs of this site take
    as their largest micro-batch (``preflight_plan.measured_batch``): a whole batch where it
    fits, micro-batches with gradient accumulation (a warning: BatchNorm then normalises over
    the micro-batch) where it does not. Fails when not one image fits, and for a TL feature
    pass whose evaluation batch does not fit (it is not cut)."""
    batch = run["per_gpu"]
    limit = FIT_FRACTION * total

    def fits(b: int) -> int | None:  # the peak of a batch that fits
        p = peak_of(b)
        return p if p is not None and p <= limit else None

    peak = peak_of(batch)
    values = {"per_gpu": batch, "peak_gib": None if peak is None else round(peak / GIB, 2)}
    values |= {"device_gib": round(total / GIB, 2), "budget_gib": round(limit / GIB, 2)}
    if peak is not None and peak <= limit:
        values |= {"largest_fit": batch, "micro_batches": _micro_batches(run, batch)}
        detail = f"{batch} per GPU: {peak / GIB:.1f} of {total / GIB:.1f} GiB, the batch whole"
        return Check(name, "pass", detail, values)
    fit, fit_peak, over = batch // 2, None, batch
    while fit >= 1 and (fit_peak := fits(fit)) is None:  # halve down to a batch that fits...
        over, fit = fit, fit // 2
    for _ in range(SEARCH_STEPS if fit else 0):  # ...then bisect up towards the one that did not
        if over - fit <= 1:
            break
        mid = (fit + over) // 2
        if (p := fits(mid)) is not None:
            fit, fit_peak = mid, p
        else:
            over = mid
    values |= {"largest_fit": fit or None, "micro_batches": _micro_batches(run, fit)}
    used = "out of device memory" if peak is None else f"{peak / GIB:.1f} GiB"
    head = f"{run['model']} at {batch} images per GPU: {used} of {total / GIB:.1f} GiB"
    if not fit:
        return Check(name, "fail", f"{head}; not even one image fits", values)
    if run["mode"] == "features":
        key = f"set train.eval_batch_size: {fit}"
        return Check(name, "fail", f"{head}; {key}: measured {fit_peak / GIB:.1f} GiB", values)
    k = values["micro_batches"]
    detail = (
        f"{head}; {fit} fit ({fit_peak / GIB:.1f} GiB): this site's jobs train the batch as {k} "
        f"micro-batches with gradient accumulation (the same optimizer step; BatchNorm "
        f"normalises over at most {fit} images); a card with more memory keeps it whole"
    )
    return Check(name, "warn", detail, values)


# ---- host ----------------------------------------------------------------------------------
def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            value = Path(path).read_text().strip()
            if value != "max" and int(value) < 1 << 60:
                return int(value)
    return None


def check_host(settings: PreflightSettings, workers: int) -> Check:
    """/dev/shm and this job's memory limit against the loader rings of the node's training
    processes. ``resources.train_trial.mem_mb`` is not held against the rings: every training
    job asks for it plus its rings (``plan.process_mem_mb``), so rings larger than it are
    paid for, not a fault."""
    train = max((r["per_gpu"] for r in settings.runs if r["mode"] == "train"), default=0)
    stored = max((r["stored_size"] for r in settings.runs), default=0)
    ring = rings.ring_bytes(workers, train, settings.eval_batch_size, stored)
    shm_total = shutil.disk_usage("/dev/shm").total if Path("/dev/shm").is_dir() else 0
    cgroup = _cgroup_limit()
    values = {
        "ring_gb_per_process": round(ring / 1e9, 2),
        "shm_gb": round(shm_total / 1e9, 2),
        "mem_mb": settings.mem_mb,
        "cgroup_gb": None if cgroup is None else round(cgroup / 1e9, 2),
    }
    detail = (
        f"loader rings {ring / 1e9:.2f} GB per process ({workers} workers, batch {train}+"
        f"{settings.eval_batch_size}, {stored} px), x{settings.gpus_per_node} per node; "
        f"/dev/shm {shm_total / 1e9:.1f} GB; mem_mb {settings.mem_mb}"
    )
    if ring == 0:
        return Check("host", "pass", f"{detail} (no ring: in-memory splits or no workers)", values)
    problems = []
    if ring * settings.gpus_per_node > shm_total:
        problems.append(
            "/dev/shm is smaller than the rings (ask the site for a larger one, or "
            "lower train.num_workers)"
        )
    if cgroup is not None and cgroup < ring:
        problems.append("this job's cgroup memory limit is below the rings' need")
    if problems:
        return Check("host", "fail", f"{detail}: {'; '.join(problems)}", values)
    return Check(
        "host", "pass", f"{detail} (each training process asks mem_mb + its rings)", values
    )


# ---- precision -----------------------------------------------------------------------------
def compare_precision(
    model: str | Callable[[], torch.nn.Module],
    image_size: int,
    normalisation: dict,
    device: torch.device,
    batch: int = preflight_precision.BATCH,
) -> dict:
    """bf16 autocast against float32 (``imagenot.train.preflight_precision``: random layers
    off, the passes seeded apart) for a registered ``model`` (or a builder of one), on that
    module's ``STEPS`` training batches and one evaluation batch of ``batch`` images; autocast
    on ``device``'s type (CUDA in a preflight, the CPU's bf16 in the tests)."""
    build = model if callable(model) else (lambda: build_model(model, NUM_CLASSES))
    batches = [_batch(batch, image_size, device, s) for s in range(preflight_precision.STEPS + 1)]
    batches = [(preprocess(x, image_size, normalisation, layout(device)), y) for x, y in batches]
    try:
        return preflight_precision.compare(build, batches, device)
    finally:
        preflight_feed.release()


def check_precision(
    model_name: str, image_size: int, normalisation: dict, device: torch.device
) -> Check:
    name = f"precision {model_name}"
    if device.type != "cuda":
        return Check(name, "skip", "bf16 autocast runs on CUDA only; CPU jobs train in float32")
    values = compare_precision(model_name, image_size, normalisation, device)
    return Check(name, *preflight_precision.verdict(values), values)


# ---- the run -------------------------------------------------------------------------------
def run_checks(
    settings: PreflightSettings, options: Options, on_check: Callable[[Check], None] | None = None
) -> dict:
    """Every check of ``settings`` (module docstring); the report as a dict. A site's gate
    (``settings.checked_models`` empty: ``preflight_plan``) checks CUDA alone; a model's gate, or
    a run by hand, the host and each model's memory, feed and precision as well, one model after
    the other (its memory, feed and precision before the next model's), each check handed to
    ``on_check`` as it finishes (``imagenot preflight --progress``: a run stopped part-way keeps
    the models it finished)."""
    checks: list[Check] = []

    def add(check: Check) -> None:
        checks.append(check)
        if on_check is not None:
            on_check(check)

    cuda, device = check_cuda(settings)
    add(cuda)
    models = settings.checked_models
    if not models:
        return _report(settings, checks)
    held = settings.in_memory and options.workers is None  # in-memory splits: no loader
    workers = 0 if held else settings.num_workers if options.workers is None else options.workers
    add(check_host(settings, workers))
    if device is None:
        add(Check("models", "skip", "no working CUDA device: nothing to measure"))
        return _report(settings, checks)
    groups: dict[tuple, list[dict]] = {}
    feeds: dict[str, dict] = {}  # per model: its largest stored size, then largest batch
    for run in settings.runs:
        key = (run["model"], run["mode"], run["per_gpu"], run["stored_size"])
        groups.setdefault(key, []).append(run)
        if run["mode"] == "train":
            best = feeds.setdefault(run["model"], run)
            feeds[run["model"]] = max(best, run, key=lambda r: (r["stored_size"], r["per_gpu"]))
    measured = card(device, settings.image_size)
    with (
        tempfile.TemporaryDirectory(prefix="imagenot-preflight-") as tmp,
        preflight_feed.Samples(
            settings, options.feed_images, max(1, workers), device, options.datasets_root
        ) as samples,
    ):
        for model in models:
            for key, runs in groups.items():
                if key[0] == model:
                    add(check_memory(runs, settings.image_size, device, measured))
            run = feeds.get(model)
            if run is not None and held:
                reason = "train.in_memory: splits are held in memory, no loader"
                add(Check(f"feed {model}", "skip", reason))
            elif run is not None:
                fit = measured_fits(checks).get(model)
                if fit:  # fed at the micro-batch the jobs will train at
                    run = {**run, "per_gpu": min(run["per_gpu"], fit)}
                sources = len(samples.checks)
                data = samples.get(run["stored_size"])  # read where the jobs read
                for found in samples.checks[sources:]:  # a stored size's first read
                    add(found)
                feed = preflight_feed.check_feed(
                    run, settings, workers, data, device, options, Path(tmp), NUM_CLASSES
                )
                del data  # the images held on the device go before the next model's memory
                add(feed)
            side = input_size(model, settings.image_size)
            add(check_precision(model, side, settings.normalisation, device))
    return _report(settings, checks)


def measured_fits(checks: list[Check]) -> dict[str, int]:
    """Per model, the largest training batch its memory checks measured to fit (none where
    nothing was measured): ``preflight_plan.measured_batch`` reads the same from the report."""
    report = {"checks": [asdict(c) for c in checks]}
    models = {c.values["model"] for c in checks if c.name.startswith("memory ")}
    return {m: b for m in models if (b := measured_batch(report, m))}


def _report(settings: PreflightSettings, checks: list[Check]) -> dict:
    return {
        "site": settings.site,
        "passed": not any(c.status == "fail" for c in checks),
        "settings": asdict(settings),
        "checks": [asdict(c) for c in checks],
    }
