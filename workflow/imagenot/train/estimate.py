"""Training's GPU time, estimated: when trials stop (early stopping, three ways), the GPU-hours
of every trained experiment and model, its chain of jobs for the schedule
(:mod:`imagenot.plan.schedule`), the wall time on a number of GPUs, the longest single job, and what
a run in the working directory has already done and measured (its records re-estimate the rest).

Pure functions of the config, a throughput table (images/s per GPU and model) and the run's
records; ``imagenot plan`` (:mod:`imagenot.plan.costs`, :mod:`imagenot.plan.plan_cli`) prints them, each
figure with its source. The bound (no trial stops early) is :mod:`imagenot.train.budget`'s.
"""

from __future__ import annotations

import math
from pathlib import Path

from imagenot.acquire.sizes import dataset_bytes, dataset_images, originals_bytes
from imagenot.plan.schedule import Chain, Stage, critical_chain, simulate
from imagenot.train import budget, experiments, plan, search
from imagenot.train.budget import DDP_EFFICIENCY
from imagenot.train.paths import RUN

# Early stopping: when a trial of a space that does not end at its schedule's horizon stops,
# before any of the run's own trials has (then the run's median replaces it). The expected
# epoch of the best validation accuracy, per protocol kind, and its source; a trial stops
# ``patience`` epochs after it.
EXPECTED_BEST_EPOCH = {
    "st": (
        182,
        "CIFAR-10 from scratch: He et al. 2016 (Deep Residual Learning, section 4.2) train "
        "64k iterations of batch 128 over 45k images, 182 epochs",
    ),
    "ft": (
        102,
        "fine-tuning ImageNet models on CIFAR-10: Kornblith et al. 2019 (Do Better ImageNet "
        "Models Transfer Better?) fine-tune 20,000 steps of batch 256 over 50,000 images, "
        "102 epochs",
    ),
}
# A forward pass costs about a third of a training step (the backward pass about twice the
# forward's FLOPs, Kaplan et al. 2020 section 2.1): evaluation, validation and the TL features
# pass run at this many times the training images/s (an estimate)
FORWARD_SPEEDUP = 3
SCENARIOS = ("low", "expected", "bound")


def assumptions(config: dict) -> list[str]:
    """What the training estimate assumes, one line each, as the plan prints them."""
    return [
        "early stopping: each experiment's trials stop at the epoch its stop_epochs line gives "
        "(low: the first chance, patience + 1; expected: the source named; bound: the space's "
        "training epochs, no trial stops early); a trial that stops before a rung is not "
        "promoted",
        "images per epoch: the dataset's training split as the config sizes it, and its "
        f"validation split scored at {FORWARD_SPEEDUP}x the training rate",
        f"TL: one features pass over the train and val splits at {FORWARD_SPEEDUP}x the "
        "training rate",
        f"train.gpus_per_job > 1: data-parallel, keeping {DDP_EFFICIENCY:.0%} of linear "
        "speed-up per doubling of the GPUs (an assumption)",
        "throughput at 224 px, scaled by pixels to each model's input side (train.image_size, "
        f"{config['train']['image_size']} px, or its registry entry's own)",
    ]


def stop_epochs(config: dict, dataset: str, protocol: str, measured: dict | None = None) -> dict:
    """Where a trial of the experiment stops, three ways: ``low`` (every trial stops at its
    first chance, ``patience`` + 1 epochs: the loop's rule, a floor), ``expected`` (the
    schedule's horizon where it ends every run, else :data:`EXPECTED_BEST_EPOCH` +
    ``patience``; or the run's own median, ``measured``: ``{"epochs", "trials"}``) and
    ``bound`` (the space's training epochs: no trial stops early). ``source`` says why."""

    sp = experiments.space(config, dataset, protocol)
    n, patience = search.training_epochs(sp), sp["patience"]
    low = min(n, patience + 1)
    if measured:
        expected = min(n, max(low, round(measured["epochs"])))
        source = (
            f"measured: the median stop epoch of the {measured['trials']} trial(s) of this run "
            "that early stopping ended (results/train)"
        )
    elif search.ends_at_horizon(sp["hyperparameters"]):
        expected = n
        source = (
            f"the schedule ends at its horizon ({n} epochs; cosine to 0): accuracy assumed to "
            "rise to its end, as torchvision's recipes report their last epoch"
        )
    else:
        best, why = EXPECTED_BEST_EPOCH["st" if protocol == "st" else "ft"]  # ft and tl alike
        expected = min(n, best + patience)
        source = f"best epoch {best} + patience {patience}, capped at {n}: {why}"
    return {"low": low, "expected": expected, "bound": n, "source": source}


def job_gpus(config: dict, model: str | None = None) -> int:
    """GPUs of one training job of ``model`` (``train.gpus_per_job`` or the model's
    ``train.gpus_per_job_overrides`` entry, over its nodes; 1 for CPU jobs)."""

    return max(1, experiments.gpus(config, model))


def epoch_images(sizes: dict) -> float:
    """Training-equivalent images of one epoch: the training split, and the validation split
    scored after it at :data:`FORWARD_SPEEDUP` times the rate."""
    return sizes["train"] + sizes["val"] / FORWARD_SPEEDUP


def run_records(config: dict, root: Path | str = ".") -> dict[tuple[str, str, str], dict]:
    """What the run in working directory ``root`` has measured of each trained experiment and
    model of ``config`` (:func:`imagenot.plan.measured.read_runs` of its ``results/train``
    folders)."""
    from imagenot.plan.measured import read_runs

    runs = {
        (d, p, m): Path(root, RUN.format(dataset=d, protocol=p, model=m))
        for d, p, m in plan._drawn(config)
    }
    return read_runs(runs)


def measured_stops(records: dict) -> dict[tuple[str, str], dict]:
    """Per (dataset, protocol): the median epoch at which early stopping ended the run's
    trials and final runs (:func:`run_records`) and how many, across models."""
    import statistics

    ended: dict[tuple[str, str], list[int]] = {}
    for (d, p, _), rec in records.items():
        for r in rec["slots"] + rec["finals"]:
            if r.get("stopped_by") == "early_stopping":
                ended.setdefault((d, p), []).append(r["epochs"])
    return {k: {"epochs": statistics.median(v), "trials": len(v)} for k, v in ended.items()}


def training_rows(config: dict, throughput: dict, records: dict | None = None) -> list[dict]:
    """Estimated GPU-hours per trained experiment and model, three ways (``low``,
    ``expected``, ``bound``: :func:`stop_epochs`), at the model's GPUs per job (:func:`job_gpus`)
    (data-parallel at :data:`DDP_EFFICIENCY` of linear), with its chain's stages
    (:class:`imagenot.plan.schedule.Chain`: the halving stages' slots, then the final seeds after
    the first, which reuses the selected trial's weights). A TL experiment's GPU work is one
    features pass over the train and val splits (``plan.FEATURE_SPLITS``) at
    :data:`FORWARD_SPEEDUP` times the training rate. ``records`` (the run's own,
    :func:`run_records`): its stop epochs replace the assumption, its jobs
    done are left out of what is left (``done_gpu_hours``, ``left``)."""

    records = records or {}
    stops_measured = measured_stops(records)
    rows = []
    for d, p, sizes, model, rate in _trained(config, throughput):
        sp = experiments.space(config, d, p)
        counts = plan.slot_counts(config, d, p)
        stops = stop_epochs(config, d, p, stops_measured.get((d, p)))
        extra_seeds = len(sp["seeds"]) - 1
        # the model's GPUs per job; a TL features pass is one process on one GPU
        gpus = 1 if plan.is_tl(p) else job_gpus(config, model)
        done = _done_jobs(records.get((d, p, model)), sp, len(counts))
        n = epoch_images(sizes)
        row = {"experiment": f"{d}/{p}", "model": model, "gpus": gpus, "stop_epochs": stops}
        row["images_per_epoch"] = round(n)
        for scenario in SCENARIOS:
            if plan.is_tl(p):
                features = sum(sizes[split] for split in plan.FEATURE_SPLITS) / FORWARD_SPEEDUP
                stages, epochs = [Stage(1, budget.hours(1, features, rate, gpus))], 1
            else:  # the halving stages' slots (none after the stop), then the extra seeds
                per_job = [*budget.stage_epochs(sp, stops[scenario]), stops[scenario]]
                jobs = [*counts, extra_seeds]
                stages = [
                    Stage(c if e or k == len(counts) else 0, budget.hours(e, n, rate, gpus))
                    for k, (c, e) in enumerate(zip(jobs, per_job, strict=True))
                ]
                epochs = sum(c * e for c, e in zip(jobs, per_job, strict=True))
            chain = Chain(f"{d}/{p}", model, gpus, tuple(stages))
            key = "" if scenario == "expected" else f"_{scenario}"
            row[f"epochs{key}"] = epochs
            row[f"gpu_hours{key}"] = round(chain.gpu_hours(), 2)
            row[f"chain_hours{key}"] = round(chain.hours(), 2)
            if scenario == "expected":
                done = done if len(done) == len(stages) else [0] * len(stages)
                left = tuple(
                    Stage(max(0, s.jobs - k), s.hours) for s, k in zip(stages, done, strict=True)
                )
                row["chain"] = Chain(f"{d}/{p}", model, gpus, left)
                spent = [gpus * s.hours * min(k, s.jobs) for s, k in zip(stages, done, strict=True)]
                row["done_gpu_hours"] = round(sum(spent), 2)
        rows.append(row)
    return rows


def _trained(config: dict, throughput: dict):
    """(dataset, protocol, images per split, model, images/s per GPU at the model's input side:
    the throughput table's 224 px rate scaled by pixels) of every trained experiment and model
    whose dataset's size and model's throughput are known."""

    for exp in plan.experiments(config):
        sizes = None if plan.is_published(exp) else dataset_images(config, exp["dataset"])
        if sizes is None:
            continue
        for model in (m for m in config["train"]["models"] if m in throughput):
            rate = throughput[model] * (224 / experiments.image_size(config, model)) ** 2
            yield exp["dataset"], exp["protocol"], sizes, model, rate


def _done_jobs(rec: dict | None, space: dict, n_stages: int) -> list[int]:
    """Jobs finished per stage of a chain (the halving stages, then the final seeds after the
    first) from the run's records of one experiment x model."""
    done = [0] * (n_stages + 1)
    if not rec:
        return done
    for r in rec["slots"]:
        if 0 <= r["stage"] < n_stages:
            done[r["stage"]] += 1
    first = space["seeds"][0]
    done[-1] = sum(1 for r in rec["finals"] if r["seed"] != first)
    return done


def chains(rows: list[dict]) -> list:
    """The chains of what is left to train (:class:`imagenot.plan.schedule.Chain`), one per row."""
    return [r["chain"] for r in rows]


def wall_time(rows: list[dict], gpus: int) -> dict:
    """Training's wall time on ``gpus`` GPUs (what is left of it): the schedule of its jobs,
    critical chain first (:func:`imagenot.plan.schedule.simulate`), with the share of the reserved
    GPU-hours the jobs use, beside its two lower bounds: the longest chain and the GPU-hours
    over every GPU. More GPUs never lengthen the bounds; the schedule follows them."""

    if gpus < 1:
        raise ValueError(f"--gpus must be at least 1, got {gpus}")
    todo = chains(rows)
    total = sum(c.gpu_hours() for c in todo)
    longest = critical_chain(todo)
    chain = longest.hours() if longest else 0.0
    widest = max((c.gpus for c in todo), default=1)
    sim = simulate(todo, gpus) if gpus >= widest else None
    return {
        "gpus": gpus,
        "longest_chain": f"{longest.name} {longest.model}" if longest else None,
        "longest_chain_hours": round(chain, 1),
        "gpu_hours_over_gpus": round(total / gpus, 1),
        "bound_hours": round(max(chain, total / gpus), 1),
        **{k: sim[k] if sim else None for k in ("hours", "used", "reserved_gpu_hours")},
    }


def wall_time_by_gpus(rows: list[dict], gpus: int) -> dict:
    """The wall time as a function of the GPUs: at 1, 2, 4, ... GPUs up to past ``gpus`` and
    the knee, and the knee itself: the fewest GPUs at which the longest chain (the critical
    path) bounds the wall time, past which more GPUs shorten nothing. None without rows."""
    todo = chains(rows)
    if not todo:
        return {"knee_gpus": None, "points": []}
    total = sum(c.gpu_hours() for c in todo)
    chain = max(c.hours() for c in todo)
    knee = max(1, math.ceil(total / chain)) if chain > 0 else 1
    counts, n = {gpus, knee}, 1
    while n <= max(gpus, knee) * 2:
        counts.add(n)
        n *= 2
    points = []
    for g in sorted(counts):
        w = wall_time(rows, g)
        points.append({"gpus": g, "hours": w["hours"], "used": w["used"]})
    return {"knee_gpus": knee, "knee_hours": round(chain, 1), "points": points}


def longest_job(config: dict, throughput: dict) -> dict | None:
    """The longest single training job, estimated (no early stopping): per trained experiment
    and model, a trial's longest halving stage (one job: the stage's epochs after the rung
    before) and a final seed's training (a job of its own when the space has several seeds),
    at the model's GPUs per job (:func:`job_gpus`). It decides the partition: a time limit at
    least this long runs it in one go. None when nothing is estimated."""

    found = []
    for d, p, sizes, model, rate in _trained(config, throughput):
        if plan.is_tl(p):
            continue  # TL: a features pass (short) and head fits on CPU cores
        space = experiments.space(config, d, p)
        jobs = [("trial stage", max(budget.stage_epochs(space)))]
        if len(space["seeds"]) > 1:
            jobs.append(("final seed", search.training_epochs(space)))
        gpus = job_gpus(config, model)
        run = {"experiment": f"{d}/{p}", "model": model}
        for what, epochs in jobs:
            hours = budget.hours(epochs, epoch_images(sizes), rate, gpus)
            found.append({**run, "job": what, "epochs": epochs, "gpus": gpus, "hours": hours})
    return _longest(found)


def _longest(jobs: list[dict]) -> dict | None:
    """The first of ``jobs`` with the most ``hours`` (rounded to 0.1 h), None without jobs."""
    best = max(jobs, key=lambda j: j["hours"], default=None)
    return best and {**best, "hours": round(best["hours"], 1)}


def longest_expected_job(rows: list[dict]) -> dict | None:
    """The longest single training job left under the expected stop epochs (:func:`stop_epochs`):
    per row, each halving stage's slot and a final seed (a TL row: its features pass)."""
    found = []
    for r in rows:
        stages = r["chain"].stages
        for k, s in enumerate(stages):
            last = "final seed" if k == len(stages) - 1 else f"trial stage {k}"
            what = "features pass" if len(stages) == 1 else last
            job = {"experiment": r["experiment"], "model": r["model"], "job": what}
            found += [{**job, "gpus": r["chain"].gpus, "hours": s.hours}] if s.jobs else []
    return _longest(found)


def gpu_memory(config: dict, throughput_memory: list[dict] | None) -> dict:
    """GPU memory (device memory, not the host's) of the training job that needs the most:
    from a preflight report's memory checks when given (measured), else per model the peak
    :data:`imagenot.plan.measured.H200_MEMORY` measured on an H200, at the largest per-GPU batch of
    the model's jobs (scaled in proportion to the images where that batch is larger than the
    measured one: an estimate, since the weights and optimizer state do not grow)."""
    from imagenot.plan.measured import H200_MEMORY, H200_SOURCE

    if throughput_memory:
        measured = [m for m in throughput_memory if m["peak_gib"] is not None]
        largest = max(measured, key=lambda m: m["peak_gib"], default=None)
        return {"source": "measured", "largest": largest}
    cap = config["train"]["max_batch_per_gpu"]
    rows = []
    for model in config["train"]["models"]:
        if model not in H200_MEMORY:
            continue
        per_gpu, world = 0, job_gpus(config, model)
        for exp in plan.experiments(config):
            if plan.is_published(exp) or plan.is_tl(exp["protocol"]):
                continue  # TL: heads fit over stored features, on CPU cores
            settings = experiments.model_settings(config, exp["dataset"], exp["protocol"], model)
            per_gpu = max(per_gpu, experiments.per_gpu_batch(settings["batch_size"], world, cap))
        at, peak = H200_MEMORY[model]
        if not per_gpu:
            continue
        estimate = peak * per_gpu / at if per_gpu > at else peak
        kind = "measured" if per_gpu <= at else "estimate (scaled from the measured)"
        row = {"model": model, "per_gpu": per_gpu, "peak_gib": round(estimate, 1)}
        rows.append({**row, "measured_at": at, "measured_gib": peak, "kind": kind})
    largest = max(rows, key=lambda r: r["peak_gib"], default=None)
    return {"source": H200_SOURCE, "largest": largest, "models": rows}


def node_local_disk(config: dict) -> dict:
    """Node-local disk ($TMPDIR) the training jobs need: with ``train.stage_to_local`` each
    node keeps one copy of every dataset its jobs train on (named by the dataset's fingerprint;
    the whole folder, kept originals included), so up to every trained dataset; without it,
    none (datasets are read in place)."""

    trained = [e["dataset"] for e in plan.experiments(config) if not plan.is_published(e)]
    sizes = {d: _with_originals(config, d) for d in dict.fromkeys(trained)}
    known = [b for b in sizes.values() if b is not None]
    return {
        "stage_to_local": bool(config["train"]["stage_to_local"]),
        "largest_dataset_bytes": max(known, default=None),
        "all_trained_bytes": sum(known) if known else None,
        "datasets": sizes,
    }


def _with_originals(config: dict, dataset: str) -> int | None:
    """The bytes a node's copy of ``dataset`` holds: the stored images and the kept originals
    (the copy is of the whole dataset folder: its stored splits, each at its side)."""
    from imagenot.plan.split_readers import split_sizes

    sides = split_sizes(config, dataset)
    stored = dataset_bytes(config, dataset, tuple(sides), sides)[0]
    kept = originals_bytes(config, dataset)[0]
    return None if stored is None or kept is None else stored + kept
