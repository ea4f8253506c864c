"""Config lookups for the curate stage's rules (pure functions of the workflow config).

The rule file rules/curate.smk calls these; Snakemake files themselves define no functions.
Each rule's settings object is built by its class's ``from_config`` (:mod:`imagenot.curate.
settings`); this module keeps the file lists, the job enumeration and the cross-key checks.
"""

from __future__ import annotations

from imagenot.core.paths import shipped
from imagenot.curate.paths import (
    AUDIT,
    CALIBRATION,
    CALIBRATION_FIGURE,
    CALIBRATION_PDF,
    CALIBRATION_SUMMARY,
    CLASS_TABLE,
    FUNNEL,
    SELECTION,
)


def laion_datasets(config: dict) -> list[str]:
    """Datasets built from LAION metadata, in config order."""
    return [n for n, spec in config["datasets"].items() if spec["kind"] == "laion"]


def curated_datasets(config: dict) -> list[str]:
    """The LAION-built datasets this stage curates: the ones some rule of the config reads
    (:func:`imagenot.plan.split_readers.curated_datasets`); a configured one nothing reads is not
    curated (its jobs are no target, and ``imagenot plan`` counts none of them)."""
    from imagenot.plan.split_readers import curated_datasets as read

    return read(config)


def shard_files(config: dict) -> list[str]:
    """File names of the LAION shards: an explicit list, else names generated from the pattern.
    Whatever writes them (LAION's release, the demo or scale world) reads the same names here."""
    laion = config["laion"]
    if laion["shards"]:
        return list(laion["shards"])
    return [laion["shard_pattern"].format(i=i) for i in range(laion["n_shards"])]


def shard_ids(config: dict) -> list[str]:
    """Short ids of the configured shards, in shard-list order: a shard's position in the list,
    five digits. Keys and paths use them, so no file name character (the dots of
    ``.snappy.parquet``, long hashes) reaches them."""
    return [f"{i:05d}" for i in range(len(shard_files(config)))]


SHARD_ID_PATTERN = "[0-9][0-9][0-9][0-9][0-9]+"


def shard_path(config: dict, shard: str) -> str:
    """The file of the shard with short id ``shard`` (its position in the shard list)."""
    return f"{config['laion']['dir'].rstrip('/')}/{shard_files(config)[int(shard)]}"


def check_fields(template: str, key: str, required: str, allowed: set[str]) -> None:
    """``template`` (config key ``key``) is a format string that holds the field ``required``
    and no field outside ``allowed``; ValueError naming the key (and the unknown fields)."""
    import string

    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise ValueError(f"config key {key}: {template!r}: {exc}") from None
    if (unknown := sorted(fields - allowed)) or required not in fields:
        raise ValueError(
            f"config key {key} {template!r}: needs the field {{{required}}}, may use only "
            f"{' and '.join(f'{{{f}}}' for f in sorted(allowed))} "
            f"(unknown: {', '.join(f or '{}' for f in unknown) or 'none'})"
        )


def check_shard_pattern(pattern: str) -> None:
    """``laion.shard_pattern`` is a format string whose only field is ``i`` (any format spec an
    int takes) and whose names are file names: an unknown field, a positional ``{}``, an index or
    a spec ``int`` refuses would otherwise fail in planning with a bare KeyError."""
    key = "config key laion.shard_pattern"
    check_fields(pattern, "laion.shard_pattern", "i", {"i"})
    try:
        name = pattern.format(i=0)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{key}: {pattern!r}: {exc}") from None
    if "/" in name or "\\" in name or name in ("", ".", ".."):
        raise ValueError(f"{key}: {pattern!r} gives {name!r}, not a file name inside laion.dir")


def check_shards(config: dict) -> None:
    """Cross-key checks of the LAION shard list: a usable pattern (:func:`check_shard_pattern`)
    and distinct file names (a pattern without ``{i}`` would name every shard alike)."""
    if not config["laion"]["shards"]:
        check_shard_pattern(config["laion"]["shard_pattern"])
    files = shard_files(config)
    if len(set(files)) != len(files):
        dup = next(f for f in files if files.count(f) > 1)
        raise ValueError(
            f"config key laion.shards/laion.shard_pattern: shard file name {dup!r} occurs more "
            "than once (a shard_pattern needs the field {i})"
        )


def per_shard(config: dict, pattern: str, **wildcards: str) -> list[str]:
    """``pattern`` (a :mod:`imagenot.curate.paths` file with a ``{shard}`` wildcard, and the
    other ``wildcards`` it names) for every configured shard, in shard-list order: a rule's
    per-shard inputs (match counts and stats, one dataset's captions, caption stats and scores)."""
    return [pattern.format(shard=s, **wildcards) for s in shard_ids(config)]


def class_list_input(config: dict, dataset: str) -> list[str]:
    """The class list file as a rule input (published-list mode), else nothing: a relative path
    missing from the working directory is the clone's file (:func:`imagenot.core.paths.shipped`)."""
    from imagenot.curate.settings import CLASS_MODES, class_mode

    mode = class_mode(config["datasets"][dataset]["classes"])

    return [] if mode in CLASS_MODES else [shipped(mode)]


def dataset_outputs(dataset: str) -> list[str]:
    """The contract outputs of one LAION-built dataset."""
    return [
        pattern.format(dataset=dataset) for pattern in (CLASS_TABLE, SELECTION, AUDIT, FUNNEL)
    ] + calibration_outputs(dataset)


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``: those of each dataset it curates
    (:func:`curated_datasets`)."""
    return [path for dataset in curated_datasets(config) for path in dataset_outputs(dataset)]


QUERY_FIELDS = {"name", "gloss"}


def check(config: dict) -> None:
    """Cross-key checks the schema cannot express; raise ConfigError naming the key (a test-only
    encoder backend needs ``curate.encoder.allow_test_only``)."""
    from imagenot.curate.encoders import check_encoder_config

    check_encoder_config(config["curate"]["encoder"])
    from imagenot.core.wordnet import config_wordnet_dir

    config_wordnet_dir(config)  # every config prepares WordNet (rule all asks for it)
    check_shards(config)
    # the class query carries the gloss: a bare word scores every caption that names it alike
    check_fields(config["curate"]["query_template"], "curate.query_template", "gloss", QUERY_FIELDS)
    for dataset in laion_datasets(config):
        check_class_list(config, dataset)


def check_data(config: dict) -> None:
    """The LAION parts on disk: ``laion.dir`` a folder holding every part the config names,
    when a LAION copy (not the demo or scale world) feeds a dataset this stage curates
    (:func:`curated_datasets`) that this study has not built yet (its manifest under results/:
    then the parts may be gone)."""
    from pathlib import Path

    from imagenot.core.io import folder_problem
    from imagenot.core.paths import MANIFEST
    from imagenot.run.run_identity import owns_results, world

    names = curated_datasets(config)
    if not names or world(config) != "laion":
        return
    if owns_results(config) and all(Path(MANIFEST.format(dataset=n)).is_file() for n in names):
        return
    folder = config["laion"]["dir"]
    problem = folder_problem(folder)
    if problem:
        raise ValueError(f"config key laion.dir: {folder} {problem}")
    try:
        files = shard_files(config)
    except (KeyError, IndexError, ValueError):
        return  # a bad pattern: check_shards says so
    missing = [name for name in files if not (Path(folder) / name).is_file()]
    if missing:
        raise ValueError(
            f"config key laion.dir: {len(missing)} of the {len(files)} LAION parts that "
            f"laion.shards/laion.shard_pattern name are not in {folder} (first: {missing[0]})"
        )


def check_class_list(config: dict, dataset: str) -> None:
    """Published-list mode: the list file reads as wnids of WordNet 3.0 noun synsets
    (:func:`imagenot.core.class_list.config_class_list`), and (unless allowed) holds no
    ImageNet class, since a contrast dataset must not share ImageNet's classes."""
    classes = config["datasets"][dataset]["classes"]
    if not isinstance(classes, dict):
        return
    from imagenot.core.class_list import config_class_list
    from imagenot.core.wordnet import imagenet_wnids

    key = f"datasets.{dataset}.classes.from_file"
    listed = config_class_list(config, key, classes["from_file"])
    shared = sorted(set(listed) & set(imagenet_wnids()))
    if shared and not classes["allow_imagenet_classes"]:
        raise ValueError(
            f"{shipped(classes['from_file'])}: {len(shared)} ImageNet class(es) in the class list "
            f"of dataset {dataset!r} ({', '.join(shared[:5])}{', ...' if len(shared) > 5 else ''}"
            f"); remove them or set datasets.{dataset}.classes.allow_imagenet_classes: true"
        )


CALIBRATION_FILES = (CALIBRATION, CALIBRATION_SUMMARY, CALIBRATION_FIGURE, CALIBRATION_PDF)


def calibration_outputs(dataset: str) -> list[str]:
    """Threshold calibration of one dataset: per-threshold table, summary, figure."""
    return [pattern.format(dataset=dataset) for pattern in CALIBRATION_FILES]
