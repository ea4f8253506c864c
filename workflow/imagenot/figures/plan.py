"""Config lookups for the analyse and figures rules (pure functions of the workflow config).

The rule file rules/figures.smk calls these; Snakemake files themselves define no functions.
Which figures exist follows from the config alone: the final runs of the train stage
(``imagenot.train.plan.final_runs``) say which datasets, protocols and models will have
evaluation results, never the files on disk.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from imagenot.analyse import PUBLISHED_DATASET
from imagenot.figures.registry import WORKFLOW_FIGURES, WORKFLOW_TABLES

RESULTS = "results"
ACCURACY = f"{RESULTS}/analyse/accuracy.csv"
PER_IMAGE = f"{RESULTS}/analyse/per_image.parquet"
RANKINGS = f"{RESULTS}/analyse/rankings_{{variant}}.json"
VARIANTS = ("standard", "robust")
FIGURES = f"{RESULTS}/figures"
TABLES = f"{RESULTS}/tables"
# Package files used as rule inputs, as absolute paths: valid whatever the working directory.
_PACKAGE = Path(__file__).resolve().parents[1]
PUBLISHED_ACCURACY = str(_PACKAGE / "resources" / "torchvision_imagenet_accuracy.csv")
PROTOCOL_REGEX = "st|(ft|tl)-[a-z0-9_]+"
FIGURE_KINDS = WORKFLOW_FIGURES  # the registries themselves: a kind registered later counts
TABLE_NAMES = WORKFLOW_TABLES

_CODE_DIR = str(_PACKAGE / "figures")


def code(kind: str) -> str:
    """Plotting module of a figure kind (a rule input: editing it rebuilds only its figures): a
    module of ``imagenot.figures`` by its bare name, or a plugin's ``"module:draw"`` (located
    without importing it)."""
    entry = WORKFLOW_FIGURES.entry(kind)
    if ":" not in entry:
        return f"{_CODE_DIR}/{entry}.py"
    import importlib.util

    module = entry.partition(":")[0]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise ValueError(f"figure {kind!r}: plotting module {module!r} not found")
    return spec.origin


def tables_code() -> str:
    return f"{_CODE_DIR}/tables.py"


def table_regex() -> str:
    return "|".join(TABLE_NAMES)


def _runs(config: dict) -> list[dict]:
    from imagenot.train import plan as train_plan

    return train_plan.final_runs(config)


def dataset_order(config: dict, runs: list[dict] | None = None) -> list[str]:
    """Datasets in drawing order: reference, contrast, the others in config order."""
    a = config["analyse"]
    names = list(config.get("datasets", {}))
    if runs is not None:
        names += [r["dataset"] for r in runs if r["dataset"] not in names]
    first = [d for d in (a["reference_dataset"], a["contrast_dataset"]) if d in names]
    return list(dict.fromkeys(first + names))


def check(config: dict) -> None:
    """``analyse.reference_dataset`` names a configured dataset (or the published accuracies): a
    typo must not silently switch the reference of every statistic."""
    ref = config["analyse"]["reference_dataset"]
    names = list(config.get("datasets", {}))
    if ref not in names and ref != PUBLISHED_DATASET:
        raise ValueError(
            f"config key analyse.reference_dataset: {ref!r} is not a configured dataset "
            f"({', '.join(names)}) nor {PUBLISHED_DATASET!r} (torchvision's published accuracies)"
        )


def reference(config: dict, runs: list[dict] | None = None) -> str:
    """The rankings reference: ``analyse.reference_dataset`` when some standard (ST) run trains
    on it, else the published torchvision ImageNet accuracies."""
    runs = _runs(config) if runs is None else runs
    ref = config["analyse"]["reference_dataset"]
    if any(r["dataset"] == ref and r["protocol"] == "st" for r in runs):
        return ref
    return PUBLISHED_DATASET


def st_datasets(config: dict, runs: list[dict]) -> list[str]:
    trained = {r["dataset"] for r in runs if r["protocol"] == "st"}
    return [d for d in dataset_order(config, runs) if d in trained]


def transfer_protocols(config: dict, runs: list[dict]) -> list[str]:
    down = config["analyse"]["downstream_dataset"]
    protos = [r["protocol"] for r in runs if r["dataset"] == down and r["protocol"] != "st"]
    return list(dict.fromkeys(sorted(protos)))


def _accuracy_vs_imagenet(config: dict, runs: list[dict]) -> list[str]:
    pairs = dict.fromkeys((r["dataset"], r["protocol"]) for r in runs)
    if config["analyse"]["imagenet_axis"] == "reference":  # the reference against itself
        pairs.pop((reference(config, runs), "st"), None)
    return [f"accuracy_vs_imagenet_{d}_{p}" for d, p in pairs]


# Figure kind -> the figures of that kind that the config's runs can feed. A registered kind not
# listed here is drawn once, as ``results/figures/<kind>.pdf``: these are planning rules for
# kinds drawn per dataset or only when their data exists, not a list of the kinds.
_PLANNERS = {
    "rankings_st": lambda config, runs: ["rankings_st"] if st_datasets(config, runs) else [],
    "rankings_transfer": lambda config, runs: (
        ["rankings_transfer"] if transfer_protocols(config, runs) else []
    ),
    "relative_progress": lambda config, runs: (
        ["relative_progress"]
        if any(r["model"] == config["analyse"]["baseline_model"] for r in runs)
        else []
    ),
    "accuracy_vs_imagenet": _accuracy_vs_imagenet,
    "per_transform": lambda config, runs: [f"per_transform_{d}" for d in st_datasets(config, runs)],
}


def figure_names(config: dict, runs: list[dict]) -> list[str]:
    """Names of the figures the config asks for and its runs can feed, in registry order."""
    if not runs:
        return []
    kinds = config["analyse"]["figures"]
    names = []
    for kind in WORKFLOW_FIGURES:
        if kind in kinds:
            names += _PLANNERS.get(kind, lambda config, runs, kind=kind: [kind])(config, runs)
    return names


def outputs(config: dict, runs: list[dict]) -> list[str]:
    """Every output of the analyse and figures stages for these final runs."""
    if not runs:
        return []
    out = [ACCURACY] + [RANKINGS.format(variant=v) for v in VARIANTS]
    for name in figure_names(config, runs):
        out += [f"{FIGURES}/{name}.pdf", f"{FIGURES}/{name}.png"]
    for name in config["analyse"]["tables"]:
        out += [f"{TABLES}/{name}.csv", f"{TABLES}/{name}.md"]
    return out


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all`` (none until the config has final runs)."""
    return outputs(config, _runs(config))


def rankings_args(config: dict, variant: str) -> str:
    """Options of ``imagenot rankings`` for the run's rankings JSON."""
    a = config["analyse"]
    return shlex.join(
        [
            "--variant",
            variant,
            "--reference",
            reference(config),
            "--baseline",
            a["baseline_model"],
            "--axis",
            a["axis"],
            "--confidence",
            str(a["confidence"]),
            "--bootstrap-reps",
            str(a["bootstrap"]["reps"]),
            "--seed",
            str(a["bootstrap"]["seed"]),
            "--bootstrap-over",
            a["bootstrap"]["over"],
            "--interval",
            a["bootstrap"]["interval"],
            "--standard-transform",
            a["standard_transform"],
        ]
    )


def figure_args(config: dict) -> str:
    """Options shared by every ``imagenot figure`` and ``imagenot table`` call."""
    a = config["analyse"]
    opts = a["figure_options"]
    return shlex.join(
        [
            "--datasets",
            *dataset_order(config),
            "--reference",
            reference(config),
            "--downstream",
            a["downstream_dataset"],
            "--baseline",
            a["baseline_model"],
            "--standard-transform",
            a["standard_transform"],
            "--confidence",
            str(a["confidence"]),
            "--axis",
            a["axis"],
            "--imagenet-axis",
            a["imagenet_axis"],
            "--width",
            str(opts["width_in"]),
            "--font-size",
            str(opts["font_size"]),
            "--dpi",
            str(opts["dpi"]),
        ]
    )
