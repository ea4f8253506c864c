"""Config lookups for the audit stage's rules (pure functions of the workflow config).

The rule file rules/audit.smk calls these. An audited dataset ``{dataset}`` (a contrast dataset
built by the curation) is compared, split by split, with its **target sets**: the reference's
``audit.reference_splits``, every other configured dataset's ``audit.other_split``, and its own
later splits (train against val and test, val against test). Embeddings are the diagnostics'
files, one per dataset and split (:func:`imagenot.diagnostics.plan.embeddings_file`), computed
once and read by both stages.
"""

from __future__ import annotations

from imagenot.core import paths
from imagenot.diagnostics import plan as diagnostics_plan

AUDIT = f"{paths.RESULTS}/audit"
CALIBRATION = f"{AUDIT}/{{dataset}}/calibration.json"
MATCHES = f"{AUDIT}/{{dataset}}/matches/{{split}}-{{part}}.parquet"
THUMBNAILS = f"{AUDIT}/{{dataset}}/thumbnails_{{split}}.npz"
SUMMARY = f"{AUDIT}/{{dataset}}/audit.json"
PER_CLASS = f"{AUDIT}/{{dataset}}/near_duplicates.parquet"
FLAGGED = f"{AUDIT}/{{dataset}}/flagged.parquet"
CLOSEST = f"{AUDIT}/{{dataset}}/closest.parquet"
TABLE_CSV = f"{paths.TABLES}/audit_{{dataset}}.csv"
FIGURE_PDF = f"{paths.FIGURES}/audit_{{dataset}}.pdf"
FIGURE_PNG = f"{paths.FIGURES}/audit_{{dataset}}.png"
PART_PATTERN = "[0-9]+"


def settings(config: dict) -> dict:
    """The validated ``audit`` section (defaults filled by its schema)."""
    return config["audit"]


def audited_datasets(config: dict) -> list[str]:
    """Datasets audited, in config order: ``audit.datasets``, else every laion-kind dataset but
    the reference; none when the audit is off or no image encoder is available."""
    cfg = settings(config)
    if not cfg["enabled"] or not diagnostics_plan.encoder_available(config):
        return []
    datasets = config["datasets"]
    reference = diagnostics_plan.reference_dataset(config)
    chosen = cfg["datasets"]
    return [
        name
        for name, spec in datasets.items()
        if spec["kind"] == "laion" and (name in chosen if chosen is not None else name != reference)
    ]


def check(config: dict) -> None:
    """``audit.datasets`` names configured laion-kind datasets (the audit compares what the
    curation built)."""
    chosen = settings(config)["datasets"] or []
    datasets = config["datasets"]
    for name in chosen:
        if name not in datasets:
            raise ValueError(f"config key audit.datasets: {name!r} is not a configured dataset")
        if datasets[name]["kind"] != "laion":
            raise ValueError(
                f"config key audit.datasets: {name!r} is of kind {datasets[name]['kind']}; the "
                "audit compares datasets built by the curation (kind laion)"
            )


def target_sets(config: dict, dataset: str, split: str) -> list[tuple[str, str]]:
    """(target dataset, target split) the images of ``split`` of ``dataset`` are compared with,
    in a fixed order: the reference's, every other dataset's, then the dataset's own later
    splits."""
    cfg = settings(config)
    reference = diagnostics_plan.reference_dataset(config)
    out: list[tuple[str, str]] = []
    if reference and reference != dataset:
        out += [(reference, s) for s in cfg["reference_splits"]]
    out += [
        (name, cfg["other_split"])
        for name in config["datasets"]
        if name not in (dataset, reference)
    ]
    later = paths.SPLITS.index(split)
    out += [(dataset, s) for s in paths.SPLITS if paths.SPLITS.index(s) > later]
    return out


def target_labels(config: dict, dataset: str, split: str) -> list[str]:
    """``{target}/{split}`` of each target set, in :func:`target_sets` order (the search's
    settings; the names of its input files' sets)."""
    return [f"{t}/{s}" for t, s in target_sets(config, dataset, split)]


def query_embeddings(dataset: str, split: str) -> str:
    return diagnostics_plan.embeddings_file(dataset, split)


def target_embeddings(config: dict, dataset: str, split: str) -> list[str]:
    """The embeddings files of the target sets of one query split, in :func:`target_sets`
    order."""
    return [diagnostics_plan.embeddings_file(t, s) for t, s in target_sets(config, dataset, split)]


def search_manifests(config: dict, dataset: str, split: str) -> list[str]:
    """The manifests whose images the search of one query split verifies: the audited
    dataset's, then each target set's dataset's, in :func:`target_sets` order (none without
    ``audit.verification.enabled``)."""
    if not settings(config)["verification"]["enabled"]:
        return []
    sets = [dataset] + [t for t, _ in target_sets(config, dataset, split)]
    return [paths.MANIFEST.format(dataset=d) for d in sets]


def thumbnails_used(config: dict) -> bool:
    """Whether the search reads thumbnails: ``audit.verification.enabled`` with
    ``pixel_candidates`` above 0."""
    v = settings(config)["verification"]
    return bool(v["enabled"] and v["pixel_candidates"] > 0)


def search_thumbnails(config: dict, dataset: str, split: str) -> list[str]:
    """The thumbnails files (rule ``audit_thumbnails``, one per dataset and split) the search of
    one query split reads: the split's own, then each target set's, in :func:`target_sets`
    order (none unless :func:`thumbnails_used`)."""
    if not thumbnails_used(config):
        return []
    sets = [(dataset, split), *target_sets(config, dataset, split)]
    return [THUMBNAILS.format(dataset=d, split=s) for d, s in sets]


def parts(config: dict) -> list[str]:
    return [str(i) for i in range(settings(config)["query_parts"])]


def matches_files(config: dict, dataset: str) -> list[str]:
    """Every search job's output of one audited dataset: each split, each part."""
    return [
        MATCHES.format(dataset=dataset, split=split, part=part)
        for split in paths.SPLITS
        for part in parts(config)
    ]


def involved_datasets(config: dict, dataset: str) -> list[str]:
    """The datasets the audit of ``dataset`` reads images of (for its figure): itself, then
    every target set's dataset, in order, once each."""
    names = [dataset]
    for split in paths.SPLITS:
        for target, _ in target_sets(config, dataset, split):
            if target not in names:
                names.append(target)
    return names


def manifests(config: dict, dataset: str) -> list[str]:
    return [paths.MANIFEST.format(dataset=d) for d in involved_datasets(config, dataset)]


def class_files(config: dict, dataset: str) -> list[str]:
    return [paths.CLASSES.format(dataset=d) for d in involved_datasets(config, dataset)]


def summary_file(dataset: str) -> str:
    return SUMMARY.format(dataset=dataset)


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``: per audited dataset, its table, summary,
    flagged pairs and figure."""
    out = []
    for dataset in audited_datasets(config):
        out += [
            TABLE_CSV.format(dataset=dataset),
            SUMMARY.format(dataset=dataset),
            FLAGGED.format(dataset=dataset),
            FIGURE_PDF.format(dataset=dataset),
            FIGURE_PNG.format(dataset=dataset),
        ]
    return out
