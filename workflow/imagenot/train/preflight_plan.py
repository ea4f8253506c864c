"""What the preflight checks and where it writes, from the config alone (no torch: the rules
import this when Snakemake parses them).

Why a preflight: the paper config starts several hundred GPU jobs at once, each retried. A
fault common to all of them (no CUDA device in the container, an env whose CUDA the node's
driver refuses, a model that does not fit at its batch, a feed that starves the GPU, a
``/dev/shm`` too small for the loader's ring) would otherwise be learnt from the hundredth
failed job. One short job on one GPU, with the training jobs' env and resources, checks each of
them first (``imagenot.train.preflight``); with ``resources.gpus > 0`` and
``resources.require_preflight`` (default true) every GPU rule takes its report as an input, so a
failed preflight submits no GPU work (docs/gpu.md, "First hour on a GPU").

The report is an ``ancient`` input of the GPU rules (rules/common.smk ``preflight_gate``): a
preflight rerun (new config, new env) gates the jobs still to run, but never makes finished
training jobs out of date.
"""

from __future__ import annotations

import re

from imagenot.acquire.sizes import stored_size
from imagenot.paths import RESULTS
from imagenot.train import experiments

PREFLIGHT = f"{RESULTS}/preflight"
LOCAL = "local"


def site_name(site: dict | None) -> str:
    """The report's name: ``local`` without a site profile, else the site's GPU partition and
    GPU model (one preflight per kind of GPU node the jobs may land on)."""
    if not site:
        return LOCAL
    name = "-".join(p for p in (site["gpu_partition"], site["gpu_model"]) if p)
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or LOCAL


def report_file(site: dict | None, ext: str) -> str:
    """``results/preflight/<site>.json`` (the pass the GPU rules wait for) or ``.md``."""
    return f"{PREFLIGHT}/{site_name(site)}.{ext}"


def failed_file(path: str) -> str:
    """Where a failed preflight leaves its report (``<site>.failed.md``): not a rule output,
    so Snakemake does not delete it with the failed job's outputs."""
    stem, _, ext = path.rpartition(".")
    return f"{stem}.failed.{ext}"


def gated(config: dict) -> bool:
    """Whether GPU rules wait for a passed preflight: GPUs planned and the gate not lifted."""
    return config["resources"]["gpus"] > 0 and config["resources"]["require_preflight"]


def gate_inputs(config: dict, site: dict | None) -> list[str]:
    """The preflight report a GPU rule takes as an input, or nothing when not :func:`gated`."""
    return [report_file(site, "json")] if gated(config) else []


def runs(config: dict) -> list[dict]:
    """One entry per model and space the config trains (published-weights experiments train
    nothing): the global batch and what one GPU holds of it (:func:`experiments.per_gpu_batch`, the
    model's cap applied); ``mode`` ``features`` for a TL space, whose GPU work is the backbone's
    forward pass at train.eval_batch_size (the head is fitted on the CPU), else ``train``;
    ``stored_size`` the largest stored side among the space's datasets."""
    world = experiments.gpus(config) or 1
    out: dict[tuple[str, str], dict] = {}
    for exp in config["train"]["experiments"]:
        if experiments.is_published(exp):
            continue
        features = experiments.is_tl(exp["protocol"])
        size = stored_size(config, exp["dataset"])
        for model in config["train"]["models"]:
            key = (model, exp["space"])
            if key in out:
                out[key]["stored_size"] = max(out[key]["stored_size"], size)
                continue
            if features:
                batch = per_gpu = config["train"]["eval_batch_size"]
            else:
                batch = experiments.model_settings(config, exp["dataset"], exp["protocol"], model)[
                    "batch_size"
                ]
                per_gpu = experiments.per_gpu_batch(
                    batch, world, experiments.max_batch_per_gpu(config, model)
                )
            out[key] = {
                "model": model,
                "space": exp["space"],
                "mode": "features" if features else "train",
                "batch_size": batch,
                "per_gpu": per_gpu,
                "stored_size": size,
                # the input statistics of its first experiment (the cost is the same whatever
                # they are; published weights bring their own: experiments.normalisation)
                "normalisation": experiments.normalisation(config, exp["protocol"], model),
            }
    return list(out.values())


def job_mem_mb(config: dict) -> int:
    """The memory one training process gets besides its batch rings:
    ``resources.train_trial.mem_mb`` (a training slot asks it per GPU of its node, plus the
    rings, ``plan.slot_mem_mb``). Read here, not through the plan, so that the settings below
    the plan need not import it."""
    return config["resources"]["train_trial"]["mem_mb"]


def dataset_dirs(config: dict) -> dict[str, str]:
    """Where the training jobs read each dataset they train on (``paths.DATASET``, relative to
    the workflow's directory, where the preflight job runs), by name: the feed check measures a
    sample read there (``imagenot.train.preflight_feed``)."""
    from imagenot.paths import DATASET

    names = [
        e["dataset"] for e in config["train"]["experiments"] if not experiments.is_published(e)
    ]
    return {name: DATASET.format(dataset=name) for name in dict.fromkeys(names)}
