"""Which rules read each split of each configured dataset: what is stored is what is read.

A dataset no rule of the config reads is not built (:func:`read_datasets`, the acquire stage's
targets; a LAION-built one is not curated either, :func:`curated_datasets`); a dataset on disk is materialised with the splits some rule reads, and no other
(:func:`materialise_settings`, the range rule's settings; ``MaterialiseSettings.splits``,
:func:`imagenot.acquire.materialise.materialise_range`), its range jobs ask for the disk of
those splits, and ``imagenot plan``'s storage table names each split's readers
(:func:`imagenot.plan.costs.storage`). Above the stages (it reads their plans), beside ``stages``.
The readers are derived from the stages' plan functions, so that a stage reading one more split
(an audit target, a trained experiment) makes it stored:

- a trained experiment's dataset: train and val (its trials and finals; a TL experiment's
  features too, ``imagenot.train.plan.FEATURE_SPLITS``), and test (its evaluation);
- a dataset published weights are evaluated on: test (the evaluation);
- the image-similarity diagnostics: ``diagnostics.image_similarity.split`` of each compared
  dataset, embedded by ``diagnostics_embed_images``;
- the audit: every split of each audited dataset, the target sets of each
  (``imagenot.audit.plan.target_sets``: the reference's ``audit.reference_splits``, the other
  datasets' ``audit.other_split``), embedded by ``diagnostics_embed_images``, and the
  calibration split (``audit.calibration.split``); with ``audit.remove_flagged``, the target
  sets of each audited dataset's download pool (``imagenot.audit.pool_plan.target_sets``) and
  the reference's calibration split (the pool's threshold).

Each stored split of a dataset on disk is stored at the side its readers need, and no larger
(:func:`split_size`): the dataset's own ``image_size`` where a rule decodes the stored image for
a model (training, evaluation: published weights' own resize reads it), the image encoder's
input (``diagnostics.encoder.clip_image_size``) where only the embeddings read it. A dataset
built from downloads stores every split at ``acquire.image_size`` (its download writes them).

Kept free of heavy imports: the rules' parse and the plan read it.
"""

from __future__ import annotations

from itertools import product

from imagenot.core.paths import SPLITS

EVALUATE = "evaluate_robustness"
EMBED = "diagnostics_embed_images"
CALIBRATE = "audit_calibrate"


def split_readers(config: dict) -> dict[str, dict[str, tuple[str, ...]]]:
    """``dataset -> split -> rules reading it`` for every configured dataset and split (an
    empty tuple: nothing reads it); a rule that reads a split through another's output is named
    with it (``"diagnostics_embed_images (audit_search)"``)."""
    from imagenot.audit import plan as audit_plan
    from imagenot.audit import pool_plan
    from imagenot.diagnostics import plan as diagnostics_plan
    from imagenot.train import plan as train_plan

    reads: dict[str, dict[str, list[str]]] = {
        name: {split: [] for split in SPLITS} for name in config["datasets"]
    }

    def add(dataset: str, split: str, rule: str) -> None:
        if dataset in reads and rule not in reads[dataset][split]:
            reads[dataset][split].append(rule)

    for e in config["train"]["experiments"]:  # as validated (the train plan's checks apart)
        dataset = e["dataset"]
        if not train_plan.is_published(e):
            tl = train_plan.is_tl(e["protocol"])
            trains = (
                ("train_head_trial", "train_head_final") if tl else ("train_trial", "train_final")
            )
            for rule, split in product(trains, ("train", "val")):
                add(dataset, split, rule)
            if tl:
                for split in train_plan.FEATURE_SPLITS:
                    add(dataset, split, "train_features")
        add(dataset, "test", EVALUATE)
    similarity = diagnostics_plan.settings(config)["image_similarity"]["split"]
    for dataset in diagnostics_plan.image_datasets(config):
        add(dataset, similarity, f"{EMBED} (diagnostics_image_similarity)")
    audit = audit_plan.settings(config)
    for dataset in audit_plan.audited_datasets(config):
        add(dataset, audit["calibration"]["split"], CALIBRATE)
        for split in SPLITS:
            add(dataset, split, f"{EMBED} (audit_search)")
            for target, target_split in audit_plan.target_sets(config, dataset, split):
                add(target, target_split, f"{EMBED} (audit_search)")
    for dataset in pool_plan.removing(config):  # the pool's threshold: the reference's images
        reference = diagnostics_plan.reference_dataset(config)
        add(reference, audit["calibration"]["split"], CALIBRATE)
        for target, target_split in pool_plan.target_sets(config, dataset):
            add(target, target_split, f"{EMBED} (audit_pool)")
    return {
        name: {split: tuple(rules) for split, rules in splits.items()}
        for name, splits in reads.items()
    }


def read_splits(config: dict, dataset: str) -> tuple[str, ...]:
    """The splits of ``dataset`` some rule reads, in ``SPLITS`` order."""
    return tuple(split for split, rules in split_readers(config)[dataset].items() if rules)


def read_datasets(config: dict) -> list[str]:
    """The configured datasets some rule of the config reads (a split of each), in config
    order: the ones the acquire stage builds (``imagenot.acquire.plan.targets``) and
    ``imagenot plan``'s storage table shows; a dataset nothing reads is neither built nor
    stored."""
    return [name for name, splits in split_readers(config).items() if any(splits.values())]


def curated_datasets(config: dict) -> list[str]:
    """The LAION-built datasets the curate stage builds (``imagenot.curate.plan.targets``), in
    config order: the ones some rule reads, their images (:func:`read_datasets`) or their
    curation's outputs (the caption diagnostics, ``imagenot.diagnostics.plan.caption_datasets``).
    A LAION-built dataset nothing reads is neither curated nor downloaded."""
    from imagenot.diagnostics import plan as diagnostics_plan

    read = {*read_datasets(config), *diagnostics_plan.caption_datasets(config)}
    return [n for n, spec in config["datasets"].items() if spec["kind"] == "laion" and n in read]


def stored_splits(config: dict, dataset: str) -> tuple[str, ...]:
    """The splits ``dataset`` stores: none where nothing reads it (no target builds it,
    :func:`read_datasets`); a dataset on disk the ones some rule reads; one built from
    downloads all three (its build, rule ``acquire_split``, draws and writes them together)."""
    from imagenot.acquire.kinds import DATASET_KINDS

    read = read_splits(config, dataset)
    if read and not DATASET_KINDS[config["datasets"][dataset]["kind"]].adapter:
        return SPLITS
    return read


def built_splits(config: dict, dataset: str) -> tuple[str, ...]:
    """The splits a build of ``dataset`` writes: :func:`stored_splits`, or all three for a
    dataset nothing reads whose manifest is asked for by name (no target of the workflow)."""
    return stored_splits(config, dataset) or SPLITS


def encoder_side(config: dict) -> int | None:
    """The side of the image the image encoder takes: ``diagnostics.encoder.clip_image_size``
    for CLIP; None for a backbone, which prepares the stored copy as its training did (from the
    dataset's own size)."""
    encoder = config["diagnostics"]["encoder"]
    return encoder["clip_image_size"] if encoder["kind"] == "clip" else None


def split_size(config: dict, dataset: str, split: str) -> int:
    """The side ``split`` of ``dataset`` is stored at: the largest side the rules that read it
    need, the image encoder's input (:func:`encoder_side`, at most the dataset's own side) for
    the embeddings and the audit's calibration and the dataset's own side
    (:func:`imagenot.acquire.sizes.stored_size`) for every other reader; the dataset's own side
    where it is built from downloads (every split at the download's size) or nothing reads the
    split."""
    from imagenot.acquire.kinds import DATASET_KINDS
    from imagenot.acquire.sizes import stored_size

    own, side = stored_size(config, dataset), encoder_side(config)
    rules = split_readers(config)[dataset][split]
    if not rules or not DATASET_KINDS[config["datasets"][dataset]["kind"]].adapter:
        return own
    encoded = [r.startswith(EMBED) or r == CALIBRATE for r in rules]
    return max(min(own, side) if side is not None and e else own for e in encoded)


def split_sizes(config: dict, dataset: str) -> dict[str, int]:
    """:func:`split_size` of each split a build of ``dataset`` writes (:func:`built_splits`)."""
    return {split: split_size(config, dataset, split) for split in built_splits(config, dataset)}


def materialise_settings(config: dict, dataset: str):
    """The range rule's settings of ``dataset`` (``acquire_materialise_range``): the config's,
    storing the splits some rule reads (:func:`built_splits`), each at the side its readers
    need (``split_sizes``: the splits stored smaller than ``image_size``, :func:`split_size`)."""
    from dataclasses import replace

    from imagenot.acquire.settings import MaterialiseSettings

    settings = MaterialiseSettings.from_config(config, dataset=dataset)
    smaller = {
        split: side
        for split, side in split_sizes(config, dataset).items()
        if side != settings.image_size
    }
    return replace(settings, splits=built_splits(config, dataset), split_sizes=smaller)


def range_disk_mb(config: dict, dataset: str) -> int:
    """The range rule's disk request: :func:`imagenot.acquire.sizes.range_disk_mb` of the
    splits it stores, each at its side (:func:`split_sizes`)."""
    from imagenot.acquire.sizes import range_disk_mb as disk_mb

    sides = split_sizes(config, dataset)
    return disk_mb(config, dataset, tuple(sides), sides)
