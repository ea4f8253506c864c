"""Config lookups for the figures rules (pure functions of the workflow config).

The rule file rules/figures.smk calls these; Snakemake files themselves define no functions.
Which figures exist follows from the config alone: the final runs of the train stage
(``imagenot.train.plan.final_runs``) say which datasets, protocols and models will have
evaluation results, never the files on disk.
"""

from __future__ import annotations

import re
from pathlib import Path

from imagenot.analyse import PUBLISHED_DATASET
from imagenot.analyse.plan import ACCURACY, RANKINGS, VARIANTS
from imagenot.core.io import code_version
from imagenot.core.names import NAME_PATTERN
from imagenot.core.paths import FIGURES, TABLES
from imagenot.figures.registry import WORKFLOW_FIGURES, WORKFLOW_TABLES

# The stages' files (Snakemake patterns: the rules' outputs and inputs, docs/contracts.md).
FIGURE_PDF = f"{FIGURES}/{{figure}}.pdf"
FIGURE_PNG = f"{FIGURES}/{{figure}}.png"
TABLE_CSV = f"{TABLES}/{{table}}.csv"
TABLE_MD = f"{TABLES}/{{table}}.md"


def code(kind: str) -> str:
    """Plotting module of a figure kind (its digest is the figure rule's parameter: editing it
    rebuilds only its figures), located from its ``"module:draw"`` without importing it."""
    entry = WORKFLOW_FIGURES.entry(kind).code
    import importlib.util

    module = entry.partition(":")[0]
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise ValueError(f"figure {kind!r}: plotting module {module!r} not found")
    return spec.origin


def tables_code() -> str:
    """The tables module, as an absolute path (valid whatever the working directory; the rule
    records only its digest, code_version)."""
    return str(Path(__file__).resolve().with_name("tables.py"))


def table_regex() -> str:
    """The ``table`` wildcard: a registered table name (imagenot.figures.registry)."""
    return "|".join(map(re.escape, WORKFLOW_TABLES))


def figure_regex() -> str:
    """The ``figure`` wildcard of the one figure rule: a registered kind, optionally followed by
    what the file is drawn for. Anchored on the registry, so it never matches the diagnostics
    figures that share results/figures/."""
    kinds = sorted(WORKFLOW_FIGURES, key=len, reverse=True)
    return f"(?:{'|'.join(map(re.escape, kinds))})(?:_[a-z0-9][a-z0-9_-]*)?"


def figure_name(kind: str, dataset: str | None, protocol: str | None) -> str:
    """File name (without extension) of one figure: its kind, then what it is drawn for."""
    values = {"dataset": dataset, "protocol": protocol}
    return "_".join([kind, *(values[f] for f in WORKFLOW_FIGURES.entry(kind).drawn_for)])


def figure_request(name: str, protocol_regex: str) -> dict:
    """The kind, dataset and protocol of the figure file ``name`` (inverse of figure_name).

    ``protocol_regex`` is the workflow's one protocol constraint
    (imagenot.train.plan.protocol_regex); a protocol is always last, so a dataset name with
    underscores stays whole."""
    kinds = sorted(WORKFLOW_FIGURES, key=len, reverse=True)
    kind = next((k for k in kinds if name == k or name.startswith(f"{k}_")), None)
    if kind is None:
        raise ValueError(
            f"figure {name!r}: no registered figure kind ({', '.join(WORKFLOW_FIGURES)})"
        )
    fields = WORKFLOW_FIGURES.entry(kind).drawn_for  # in the order the name spells them
    rest = name[len(kind) + 1 :]
    group = {"dataset": NAME_PATTERN, "protocol": protocol_regex}
    match = re.fullmatch("_".join(f"(?P<{f}>{group[f]})" for f in fields), rest)
    if match is None:
        raise ValueError(
            f"figure {name!r}: kind {kind} is drawn for {', '.join(fields) or 'the whole run'}; "
            f"{rest!r} does not name that"
        )
    return {"kind": kind} | {f: match.groupdict().get(f) for f in ("dataset", "protocol")}


def dataset_order(config: dict, runs: list[dict] | None = None) -> list[str]:
    """Datasets in drawing order: reference, contrast, the others in config order."""
    a = config["analyse"]
    names = list(config["datasets"])
    if runs is not None:
        names += [r["dataset"] for r in runs if r["dataset"] not in names]
    first = [d for d in (a["reference_dataset"], a["contrast_dataset"]) if d in names]
    return list(dict.fromkeys(first + names))


def check(config: dict) -> None:
    """``analyse.reference_dataset`` names a configured dataset (or the published accuracies): a
    typo must not silently switch the reference of every statistic."""
    ref = config["analyse"]["reference_dataset"]
    names = list(config["datasets"])
    if ref not in names and ref != PUBLISHED_DATASET:
        raise ValueError(
            f"config key analyse.reference_dataset: {ref!r} is not a configured dataset "
            f"({', '.join(names)}) nor {PUBLISHED_DATASET!r} (torchvision's published accuracies)"
        )


def kind_names(config: dict, runs: list[dict], kind: str) -> list[str]:
    """The files of one figure kind that these runs can feed (its FigureKind says for what and
    when): none without feeding runs; else one, one per dataset in drawing order, or one per
    (dataset, protocol) pair in run order."""
    entry, a = WORKFLOW_FIGURES.entry(kind), config["analyse"]
    feeds = {  # the runs that feed a kind drawn when (imagenot.figures.registry.WHEN)
        "always": lambda r: True,
        "st_runs": lambda r: r["protocol"] == "st",
        "transfer_runs": lambda r: (
            r["dataset"] == a["downstream_dataset"] and r["protocol"] != "st"
        ),
        "baseline_run": lambda r: r["model"] == a["baseline_model"],
    }[entry.when]
    fed = [r for r in runs if feeds(r)]
    if not fed:
        return []
    if entry.drawn_for == ():
        return [kind]
    if entry.drawn_for == ("dataset",):
        have = {r["dataset"] for r in fed}
        return [figure_name(kind, d, None) for d in dataset_order(config, fed) if d in have]
    pairs = dict.fromkeys((r["dataset"], r["protocol"]) for r in fed)
    if entry.against_imagenet and a["imagenet_axis"] == "reference":
        from imagenot.analyse.settings import reference

        pairs.pop((reference(config, runs), "st"), None)  # the reference against itself
    return [figure_name(kind, d, p) for d, p in pairs]


def figure_names(config: dict, runs: list[dict]) -> list[str]:
    """Names of the figures the config asks for and its runs can feed, in registry order."""
    if not runs:
        return []
    kinds = config["analyse"]["figures"]
    return [
        name
        for kind in WORKFLOW_FIGURES
        if kind in kinds
        for name in kind_names(config, runs, kind)
    ]


def published_datasets(config: dict) -> list[str]:
    """The datasets whose st runs are published weights (``weights: published``), in config
    order: the ``published_check`` table compares their measured top-1 with the published."""
    experiments = config["train"]["experiments"]
    return list(dict.fromkeys(e["dataset"] for e in experiments if e["weights"] == "published"))


def table_names(config: dict) -> list[str]:
    """The tables the config asks for that it can feed: ``published_check`` only with runs of
    published weights."""
    published = bool(published_datasets(config))
    return [n for n in config["analyse"]["tables"] if n != "published_check" or published]


def outputs(config: dict, runs: list[dict]) -> list[str]:
    """Every output of the analyse and figures stages for these final runs."""
    if not runs:
        return []
    out = [ACCURACY] + [RANKINGS.format(variant=v) for v in VARIANTS]
    for name in figure_names(config, runs):
        out += [FIGURE_PDF.format(figure=name), FIGURE_PNG.format(figure=name)]
    for name in table_names(config):
        out += [TABLE_CSV.format(table=name), TABLE_MD.format(table=name)]
    return out


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all`` (none until the config has final runs)."""
    from imagenot.train.plan import final_runs

    return outputs(config, final_runs(config))


def figure_params(config: dict, name: str) -> dict:
    """Kind, dataset and protocol of the figure file ``name`` under this config's protocols
    (rule param: the report caption, report/figure.rst, reads it; and FigureSettings)."""
    from imagenot.train.plan import protocol_regex

    return figure_request(name, protocol_regex(config))


def figure_code_version(config: dict, name: str) -> str:
    """:func:`code_version` of the plotting module of the figure file ``name``: the figure
    rule's parameter (editing one kind's module reruns that kind's figures alone)."""
    return code_version(code(figure_params(config, name)["kind"]))


def figure_subcategory(config: dict, name: str) -> str:
    """Report subcategory of a figure: its plotting module, as words (``rankings_st`` and
    ``rankings_transfer`` share "Rankings"; a plugin's ``module:draw`` by its module's last
    part)."""
    entry = WORKFLOW_FIGURES.entry(figure_params(config, name)["kind"]).code
    module = entry.partition(":")[0].rsplit(".", 1)[-1]
    return module.replace("_", " ").capitalize()
