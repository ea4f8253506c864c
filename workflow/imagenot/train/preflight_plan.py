"""What the preflight checks and where it writes, from the config alone (no torch: the rules
import this when Snakemake parses them).

Why a preflight: the paper config starts several hundred GPU jobs at once, each retried. A
fault common to all of them (no CUDA device in the container, an env whose CUDA the node's
driver refuses, a model that does not fit at its batch, a feed that starves the GPU, a
``/dev/shm`` too small for the loader's ring) would otherwise be learnt from the hundredth
failed job. Short jobs on one GPU, with the training jobs' env and resources, check each of
them first (``imagenot.train.preflight``); with ``resources.gpus > 0`` and
``resources.require_preflight`` (default true) every GPU rule takes their reports as inputs, so
a failed check submits no GPU work it concerns (docs/gpu.md, "First hour on a GPU").

Two gates, so that a failed check holds only the jobs it concerns: the site's
(``preflight``: CUDA on the node, env against driver), which every GPU rule waits for, caption
and image embedding included; and one per model (``preflight_model``: the host's loader rings,
the model's memory per space, its feed, bf16 against float32), which only that model's jobs wait
for (:data:`MODEL_RULES`). A model whose precision fails holds its own training and evaluation,
not the other models' nor the embeddings.

The model's report is also where its jobs take their per-GPU batch from: the largest batch the
preflight measured to fit this site's card (:func:`measured_batch`; the training jobs' command
gets the report by ``--preflight``, :func:`batch_option`), so a card with less memory trains in
micro-batches and one with enough trains the batch whole, with no per-model cap in the config.

The reports are ``ancient`` inputs of the GPU rules (rules/common.smk ``preflight_gate``): a
preflight rerun (new config, new env) gates the jobs still to run, but never makes finished
training jobs out of date.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

from imagenot.acquire.sizes import stored_size
from imagenot.core.paths import RESULTS
from imagenot.train import experiments

PREFLIGHT = f"{RESULTS}/preflight"
LOCAL = "local"


@dataclass
class Check:
    """One check of the preflight's report (``imagenot.train.preflight``)."""

    name: str
    status: str  # pass, warn, fail, skip, info
    detail: str
    values: dict = field(default_factory=dict)


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


def model_report_file(site: dict | None, model: str, ext: str) -> str:
    """``results/preflight/<site>/<model>.json`` (the pass a model's GPU jobs wait for, which
    holds its measured batch) or ``.md``; ``model`` may be the rules' ``{model}`` wildcard."""
    return f"{PREFLIGHT}/{site_name(site)}/{model}.{ext}"


# The GPU rules that wait for their model's gate besides the site's (rules/*.smk: their
# `preflight_gate(per_model=True)`, tests/test_preflight.py); the other GPU rules (caption and
# image embedding) wait for the site's alone.
MODEL_RULES = ("train_trial", "train_final", "train_features", "evaluate_robustness")


def gated(config: dict) -> bool:
    """Whether GPU rules wait for a passed preflight: GPUs planned and the gate not lifted."""
    return config["resources"]["gpus"] > 0 and config["resources"]["require_preflight"]


def gate_inputs(config: dict, site: dict | None, per_model: bool) -> list[str]:
    """The preflight reports a GPU rule takes as inputs, or nothing when not :func:`gated`: the
    site's, and with ``per_model`` its model's (the ``{model}`` wildcard of the rule)."""
    if not gated(config):
        return []
    gate = [report_file(site, "json")]
    return [*gate, model_report_file(site, "{model}", "json")] if per_model else gate


def waiting(failed: list[str], models: list[str]) -> str:
    """Which GPU jobs a failed preflight holds, for its message, from the names of its failed
    checks (``cuda``, ``host``, ``memory M (spaces)``, ``feed M (...)``, ``precision M``) and
    the ``models`` it checked: a model's gate (one model) holds that model's jobs
    (:data:`MODEL_RULES`); the site's (no model) every GPU job; a run of several models by hand
    every GPU job for CUDA, every model's for the host's rings, else the failed models'."""
    if len(models) == 1:
        held = list(models)
    elif "cuda" in failed or not models:
        return (
            "every GPU job waits until it passes (training, evaluation, caption and image "
            "embedding)"
        )
    else:
        named = [n.split()[1] for n in failed if n.split()[0] in ("memory", "feed", "precision")]
        held = list(dict.fromkeys(list(models) if "host" in failed else named))
    return (
        f"the GPU jobs of {', '.join(held)} ({', '.join(MODEL_RULES)}) wait until it passes; "
        "the other models' jobs and caption and image embedding do not wait for it"
    )


def batch_option(gate: list[str]) -> list[str]:
    """A training rule's ``--preflight`` value from its gate inputs ``gate`` (the rule's
    ``input.preflight``, :func:`gate_inputs` with ``per_model``: the site's report, then the
    model's): the model's report, whose measured batch the job trains at; nothing ungated (the
    flag alone, read as none)."""
    return gate[1:2]


def measured_batch(report: dict, model: str) -> int | None:
    """The largest batch per GPU that ``report``'s memory checks measured to fit for training
    ``model`` on its card (the largest over its spaces: a batch that fits at one space fits
    at all), or None where nothing was measured (a CPU preflight). A training job cuts a
    larger share of its batch into micro-batches of at most this."""
    fits = [
        c["values"]["largest_fit"]
        for c in report["checks"]
        if c["name"].startswith("memory ")
        and c["values"]["model"] == model
        and c["values"]["mode"] == "train"
        and c["values"].get("largest_fit")
    ]
    return max(fits, default=None)


def runs(config: dict) -> list[dict]:
    """One entry per model and space the config trains (published-weights experiments train
    nothing): the global batch, the GPUs of a job (``world``) and what one GPU holds of it
    (:func:`experiments.per_gpu_batch` under ``train.max_batch_per_gpu``, null: its whole
    share; the preflight measures whether it fits); ``mode`` ``features`` for a TL space,
    whose GPU work is the backbone's forward pass at train.eval_batch_size (the head is fitted
    on the CPU), else ``train``; ``stored_size`` the largest stored side among the space's
    datasets."""
    out: dict[tuple[str, str], dict] = {}
    for exp in config["train"]["experiments"]:
        if experiments.is_published(exp):
            continue
        features = experiments.is_tl(exp["protocol"])
        size = stored_size(config, exp["dataset"])
        for model in config["train"]["models"]:
            key = (model, exp["space"])
            world = experiments.gpus(config, model) or 1  # the model's GPUs per job
            if key in out:
                out[key]["stored_size"] = max(out[key]["stored_size"], size)
                continue
            own = experiments.model_settings(config, exp["dataset"], exp["protocol"], model)
            batch = config["train"]["eval_batch_size"] if features else own["batch_size"]
            cap = config["train"]["max_batch_per_gpu"]
            per_gpu = batch if features else experiments.per_gpu_batch(batch, world, cap)
            out[key] = {
                "model": model,
                "space": exp["space"],
                "mode": "features" if features else "train",
                "batch_size": batch,
                "world": world,
                "per_gpu": per_gpu,
                "stored_size": size,
                # the input statistics of its first experiment (the cost is the same whatever
                # they are; published weights bring their own: experiments.normalisation)
                "normalisation": experiments.normalisation(config, exp["protocol"], model),
            }
    return list(out.values())


def measured_job(job, report: str | Path):
    """``job`` (a training job's ``JobSettings``) with its largest micro-batch per GPU
    (``max_batch_per_gpu``, a transient field: no part of the job's identity) the largest
    batch ``report``, its model's preflight on this site, measured to fit, or
    ``train.max_batch_per_gpu`` where lower; unchanged for a head fit over stored features and
    where the report measured nothing (a CPU preflight)."""
    from imagenot.core.io import read_json

    fit = None if job.features else measured_batch(read_json(Path(report)), job.model)
    if fit is None:
        return job
    ceiling = job.max_batch_per_gpu
    return dataclasses.replace(job, max_batch_per_gpu=fit if ceiling is None else min(fit, ceiling))


def dataset_dirs(config: dict) -> dict[str, str]:
    """Where the training jobs read each dataset they train on (``paths.DATASET``, relative to
    the workflow's directory, where the preflight job runs), by name: the feed check measures a
    sample read there (``imagenot.train.preflight_feed``)."""
    from imagenot.core.paths import DATASET

    names = [
        e["dataset"] for e in config["train"]["experiments"] if not experiments.is_published(e)
    ]
    return {name: DATASET.format(dataset=name) for name in dict.fromkeys(names)}
