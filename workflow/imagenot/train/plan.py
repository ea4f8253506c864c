"""The train stage's plan: the files its rules read and write, and their wildcards' constraints
(pure functions of the workflow config).

The rule file rules/train.smk calls these; Snakemake files themselves define no functions.
This module holds the file lists of the DAG: a run's dataset inputs, the halving slots and
decisions of the trials, the final runs, the preregistration record and the stage's targets.
Beside it, each in its module: the config's cross-key checks (:mod:`imagenot.train.checks`,
run as this stage's ``check``), what a training job asks of the scheduler
(:mod:`imagenot.train.resources`) and the launcher of its shell line
(:mod:`imagenot.train.launch`). What the config says about one experiment (its space, seeds,
starting weights, GPUs and nodes) lives below this module and the settings objects, in
:mod:`imagenot.train.experiments`; the rules read those facts here too (``train_plan.nodes``).
Layout: ``results/train/{dataset}/{protocol}/{model}/`` holds ``trials.parquet``,
``trial-{trial}/`` (``rung-{k}.json`` per halving rung, ``result.json``, ``metrics.csv``),
``halving/rung-{k}.json``, ``selection.json`` and ``final/seed-{seed}/``.
"""

from __future__ import annotations

import re
from pathlib import Path

from imagenot.train.checks import check
from imagenot.train.experiments import (
    TORCHVISION,
    features_dir,  # noqa: F401 (the rules' name for a TL run's features folder)
    init_record,  # noqa: F401 (the rules' name for an FT/TL run's starting weights' record)
    init_weights,
    is_published,
    is_tl,
    published_weights,
    run_dir,  # noqa: F401 (tests' name for an experiment x model's folder)
    seeds,
    source,
    space,
)

# the experiment facts the rules read as train_plan.<name> that this module does not use itself
from imagenot.train.experiments import gpus_per_node as gpus_per_node
from imagenot.train.experiments import nodes as nodes
from imagenot.train.paths import (
    DECISION,
    FEATURES,
    FINAL_DIR,
    FINAL_RESULT,
    PREREGISTRATION,
    PREREGISTRATION_TABLE,
    SLOT,
    TRAIN,
    TRIALS,
)
from imagenot.train.prereg import check_planned
from imagenot.train.registry import weights_filename
from imagenot.train.search import promoted_count, rungs
from imagenot.train.settings import DrawSettings


def published_pattern(config: dict) -> str:
    """Regex of the datasets whose st runs are published weights (rule train_published's
    wildcard constraint; ``ruleorder`` prefers it to train_final there)."""
    names = sorted({e["dataset"] for e in config["train"]["experiments"] if is_published(e)})
    return "|".join(names) or "(?!)"


def protocol_regex(config: dict) -> str:
    """The one ``protocol`` wildcard constraint of the workflow (rules/common.smk): the
    protocols of the configured train.experiments (``st``, ``ft-SOURCE``, ``tl-SOURCE``), so no
    rule matches a protocol the config does not train. Never matches without experiments."""
    return _protocols_regex(e["protocol"] for e in config["train"]["experiments"])


def _protocols_regex(protocols) -> str:
    """An alternation of the given protocols, escaped; a regex matching nothing for none."""
    return "|".join(map(re.escape, sorted(set(protocols)))) or "(?!)"


def experiments(config: dict) -> list[dict]:
    """The configured experiments (validated)."""
    check(config)
    return config["train"]["experiments"]


def tl_protocol_regex(config: dict) -> str:
    """The configured TL protocols (constraint of the feature and head-fitting rules)."""
    return _protocols_regex(
        e["protocol"] for e in config["train"]["experiments"] if is_tl(e["protocol"])
    )


# What a head fit reads (a trial or a final run): it selects on validation accuracy and never
# sees the test split, which the evaluation scores from images through the whole model.
FEATURE_SPLITS = ("train", "val")


def feature_files(dataset: str, protocol: str, model: str) -> list[str]:
    """The features files of a TL experiment's model, one per split of ``FEATURE_SPLITS``."""
    run = {"dataset": dataset, "protocol": protocol, "model": model}
    return [FEATURES.format(**run, split=split) for split in FEATURE_SPLITS]


# Successive halving as a static DAG of *slots*: stage k (k < number of rungs) trains to the
# k-th rung, the last stage to the end of training. Stage 0 has one slot per trial; each later
# stage has the ceil(n / eta) slots that the previous rung promotes into, and slot s of it
# trains the s-th promoted trial (read from halving/rung-{k-1}.json at run time). A trial that
# is not promoted therefore has no job at all: no GPU is requested to copy a result forward.


def stage_ids(config: dict, dataset: str, protocol: str) -> list[int]:
    """The training stages of a trial: one per halving rung, then the end."""
    return list(range(len(rungs(space(config, dataset, protocol))) + 1))


def slot_counts(config: dict, dataset: str, protocol: str) -> list[int]:
    """Jobs per stage: the budget, then ceil(n / eta) after each rung (search.promote's count)."""
    sp = space(config, dataset, protocol)
    counts = [sp["budget"]]
    for _ in rungs(sp):
        counts.append(promoted_count(counts[-1], sp["halving"]["eta"]))
    return counts


def slot_ids(config: dict, dataset: str, protocol: str, stage) -> list[int]:
    return list(range(slot_counts(config, dataset, protocol)[int(stage)]))


def slot_file(dataset: str, protocol: str, model: str, stage, slot) -> str:
    return SLOT.format(dataset=dataset, protocol=protocol, model=model, stage=stage, slot=slot)


def previous_decision(config: dict, dataset: str, protocol: str, model: str, stage) -> list[str]:
    """The halving decision a stage's slots read their trial from ([] for stage 0)."""
    run = {"dataset": dataset, "protocol": protocol, "model": model}
    return [DECISION.format(**run, rung=int(stage) - 1)] if int(stage) > 0 else []


def stage_results(config: dict, dataset: str, protocol: str, model: str, stage) -> list[str]:
    """The slot results of one stage (a halving rung's inputs)."""
    return [
        slot_file(dataset, protocol, model, stage, s)
        for s in slot_ids(config, dataset, protocol, stage)
    ]


def all_results(config: dict, dataset: str, protocol: str, model: str) -> list[str]:
    """Every stage's slot results (selection's inputs: each trial's latest result is there)."""
    return [
        f
        for stage in stage_ids(config, dataset, protocol)
        for f in stage_results(config, dataset, protocol, model, stage)
    ]


def final_runs(config: dict) -> list[dict]:
    """Every final (retrained-best) run the workflow makes: dicts with keys ``dataset``,
    ``protocol``, ``model``, ``seed``; their outputs are
    ``results/train/{dataset}/{protocol}/{model}/final/seed-{seed}/model.safetensors``."""
    return [
        {"dataset": e["dataset"], "protocol": e["protocol"], "model": m, "seed": s}
        for e in experiments(config)
        for m in config["train"]["models"]
        for s in seeds(config, e)
    ]


def final_dir(run: dict) -> str:
    return FINAL_DIR.format(**run)


def _drawn(config: dict) -> list[tuple[str, str, str]]:
    """(dataset, protocol, model) of every trials-drawing job; published-weights experiments
    register nothing."""
    models = config["train"]["models"]
    trained = [e for e in experiments(config) if not is_published(e)]
    return sorted({(e["dataset"], e["protocol"], m) for e in trained for m in models})


def trials_tables(config: dict) -> list[str]:
    """Every trained experiment x model's trials table (each written after its
    preregistration check)."""
    return [TRIALS.format(dataset=d, protocol=p, model=m) for d, p, m in _drawn(config)]


def check_results(config: dict) -> None:
    """The config against the preregistration record in the working directory: a changed space,
    budget or model setting without its amendment stops the workflow before any job runs, as
    the trials-drawing job would (imagenot.train.prereg.check_planned says why), losing nothing.
    Nothing to check before the first run."""
    if not Path(PREREGISTRATION).is_file():
        return

    drawing = [DrawSettings.from_config(config, *run) for run in _drawn(config)]
    check_planned(Path(PREREGISTRATION), drawing, Path(TRAIN))


def check_data(config: dict) -> None:
    """The published weights on disk: ``train.weights_dir`` a folder holding every weights file
    the config's experiments start from or evaluate (FT/TL from ImageNet, ``weights:
    published``), unless this study's results of those experiments exist already."""
    from imagenot.core.io import folder_problem
    from imagenot.run.run_identity import owns_results

    train = config["train"]
    users = {
        (e["dataset"], e["protocol"])
        for e in experiments(config)
        if is_published(e) or source(e["protocol"]) == TORCHVISION
    }
    if not users or not train["weights_dir"]:
        return  # no weights needed, or the stage's check() names the missing key
    runs = [r for r in final_runs(config) if (r["dataset"], r["protocol"]) in users]
    if owns_results(config) and all(Path(FINAL_RESULT.format(**r)).is_file() for r in runs):
        return
    folder = train["weights_dir"]
    problem = folder_problem(folder)
    if problem:
        raise ValueError(f"config key train.weights_dir: {folder} {problem}")
    names = [weights_filename(w) for w in (published_weights(train, m) for m in train["models"])]
    missing = [n for n in names if n and not (Path(folder) / n).is_file()]
    if missing:
        raise ValueError(
            f"config key train.weights_dir: {len(missing)} of the {len(names)} published weights "
            f"files the experiments need are not in {folder}: {', '.join(missing)}"
        )


def published_weights_file(config: dict, model: str) -> str:
    """The local file of ``model``'s published ImageNet weights (train.weights_dir)."""
    return init_weights(config, "ft-torchvision", model)[0]


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``: every final run's result.json and the
    preregistration table of the report."""
    return [FINAL_RESULT.format(**run) for run in final_runs(config)] + [PREREGISTRATION_TABLE]
