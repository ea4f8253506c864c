"""Config lookups for the diagnostics stage's rules (pure functions of the workflow config).

The rule file rules/diagnostics.smk calls these; Snakemake files themselves define no functions.
Nothing here looks at the filesystem: every output is derived from config alone.

Subjects of the WordNet statistics are the diagnosed datasets whose classes are WordNet ids
(kinds ``laion`` and ``imagenet``), named by the dataset, and every class-list file of
``diagnostics.class_lists``, named ``list-{name}`` (a dash never occurs in a dataset name).
"""

from __future__ import annotations

import shlex

from imagenot.acquire.kinds import wnid_kinds

R = "results"
LIST_PREFIX = "list-"

_DEFAULTS = {
    "datasets": None,
    "reference_dataset": "imagenet",
    "reference_classes": None,
    "class_lists": {},
    "image_similarity": {},
    "encoder": {},
}
_ENCODER_DEFAULTS = {
    "kind": "backbone",
    "clip_model": "openai/clip-vit-base-patch32",
    "backbone_dataset": None,
    "backbone_model": None,
    "backbone_seed": None,
}
_IMAGE_DEFAULTS = {"split": "test", "max_images_per_class": None, "batch_size": 256}


def settings(config: dict) -> dict:
    """The ``diagnostics`` section with defaults filled (config may be unvalidated)."""
    section = {**_DEFAULTS, **(config.get("diagnostics") or {})}
    section["encoder"] = {**_ENCODER_DEFAULTS, **(section["encoder"] or {})}
    section["image_similarity"] = {**_IMAGE_DEFAULTS, **(section["image_similarity"] or {})}
    return section


def _datasets(config: dict) -> dict:
    return config.get("datasets") or {}


def reference_dataset(config: dict) -> str | None:
    """The configured reference dataset, or None when unset or not a configured dataset."""
    name = settings(config)["reference_dataset"]
    return name if name in _datasets(config) else None


def contrast_datasets(config: dict) -> list[str]:
    """Datasets diagnosed against the reference, in config order."""
    chosen = settings(config)["datasets"]
    reference = reference_dataset(config)
    if chosen is None:
        return [
            name
            for name, spec in _datasets(config).items()
            if spec.get("kind") == "laion" and name != reference
        ]
    return [name for name in _datasets(config) if name in chosen]


def wordnet_subjects(config: dict) -> list[str]:
    """Subjects of the WordNet statistics: wnid-labelled contrast datasets, then class lists."""
    datasets = _datasets(config)
    subjects = [d for d in contrast_datasets(config) if datasets[d].get("kind") in wnid_kinds()]
    return subjects + [LIST_PREFIX + name for name in settings(config)["class_lists"]]


def class_list_file(config: dict, subject: str) -> str:
    """The class-list file of a WordNet subject."""
    if subject.startswith(LIST_PREFIX):
        return settings(config)["class_lists"][subject.removeprefix(LIST_PREFIX)]
    return f"{R}/datasets/{subject}/classes.txt"


def reference_classes_input(config: dict) -> list[str]:
    """The reference class-list file as a rule input ([] = ImageNet's list shipped by timm)."""
    path = settings(config)["reference_classes"]
    return [path] if path else []


def reference_classes_option(config: dict) -> str:
    """``--reference FILE`` for ``imagenot wordnet-stats`` ('' = ImageNet's 1000)."""
    path = settings(config)["reference_classes"]
    return f"--reference {shlex.quote(path)}" if path else ""


def reference_label(config: dict) -> str:
    """Column heading of the reference in tables and figures."""
    return reference_dataset(config) or (
        "reference" if settings(config)["reference_classes"] else "imagenet"
    )


def caption_datasets(config: dict) -> list[str]:
    """LAION-built datasets (curation outputs exist) among the contrast and reference datasets."""
    datasets = _datasets(config)
    names = [*contrast_datasets(config), reference_dataset(config)]
    return [n for n in names if n and datasets[n].get("kind") == "laion"]


def backbone_run(config: dict) -> dict | None:
    """The final standard-protocol run whose model encodes images (kind backbone), or None."""
    from imagenot.train.plan import final_runs

    encoder = settings(config)["encoder"]
    contrast = contrast_datasets(config)
    dataset = encoder["backbone_dataset"] or (contrast[0] if contrast else None)
    for run in final_runs(config):
        if (
            run["protocol"] == "st"
            and run["dataset"] == dataset
            and encoder["backbone_model"] in (None, run["model"])
            and encoder["backbone_seed"] in (None, int(run["seed"]))
        ):
            return run
    return None


def encoder_checkpoint(config: dict) -> list[str]:
    """The backbone checkpoint as a rule input ([] for CLIP or when no run matches)."""
    if settings(config)["encoder"]["kind"] != "backbone":
        return []
    run = backbone_run(config)
    if run is None:
        return []
    return [
        f"{R}/train/{run['dataset']}/{run['protocol']}/{run['model']}/final/seed-{run['seed']}/"
        "model.safetensors"
    ]


def encoder_available(config: dict) -> bool:
    """Whether images can be embedded: CLIP, or a backbone run the workflow trains."""
    return settings(config)["encoder"]["kind"] == "clip" or bool(encoder_checkpoint(config))


def encoder_options(config: dict) -> str:
    """``imagenot embed-images`` options naming the encoder."""
    encoder = settings(config)["encoder"]
    if encoder["kind"] == "clip":
        return f"--encoder clip --clip-model {shlex.quote(encoder['clip_model'])}"
    checkpoint = encoder_checkpoint(config)
    return f"--encoder backbone --checkpoint {checkpoint[0]}" if checkpoint else ""


def encoder_description(config: dict) -> str:
    """Human-readable encoder identity (rule params: a change reruns the embeddings)."""
    encoder = settings(config)["encoder"]
    if encoder["kind"] == "clip":
        return f"clip:{encoder['clip_model']}"
    checkpoint = encoder_checkpoint(config)
    return f"backbone:{checkpoint[0]}" if checkpoint else "backbone:none"


def image_options(config: dict) -> str:
    """Split, per-class cap and batch size options of ``imagenot embed-images``."""
    image = settings(config)["image_similarity"]
    options = f"--split {image['split']} --batch-size {image['batch_size']}"
    if image["max_images_per_class"]:
        options += f" --max-per-class {image['max_images_per_class']}"
    return options


def image_datasets(config: dict) -> list[str]:
    """Datasets whose image similarity is computed (none when no encoder is available)."""
    if not encoder_available(config):
        return []
    reference = reference_dataset(config)
    return contrast_datasets(config) + ([reference] if reference else [])


# ------------------------------------------------------------------------------ output paths


def wordnet_stats_file(subject: str) -> str:
    return f"{R}/diagnostics/{subject}/wordnet_stats.json"


def wordnet_classes_file(subject: str) -> str:
    return f"{R}/diagnostics/{subject}/wordnet_classes.parquet"


def caption_stats_file(dataset: str) -> str:
    return f"{R}/diagnostics/{dataset}/caption_similarity.json"


def image_stats_file(dataset: str) -> str:
    return f"{R}/diagnostics/{dataset}/image_similarity.json"


def image_classes_file(dataset: str) -> str:
    return f"{R}/diagnostics/{dataset}/image_similarity.parquet"


# The diagnostics figures (the one list: ``imagenot diagnostics-figure`` choices derive from it).
FIGURES = ("class_depth", "siblings", "caption_similarity", "image_similarity")


def figure_files(name: str) -> list[str]:
    return [f"{R}/figures/diagnostics_{name}.pdf", f"{R}/figures/diagnostics_{name}.png"]


def table_files(subject: str) -> list[str]:
    return [f"{R}/tables/diagnostics_{subject}.csv", f"{R}/tables/diagnostics_{subject}.md"]


# ------------------------------------------------------------------------- figure/table inputs


def _labelled(pairs: list[tuple[str, str]]) -> str:
    return " ".join(shlex.quote(f"{label}={path}") for label, path in pairs)


def wordnet_figure_inputs(config: dict) -> list[str]:
    return [wordnet_classes_file(s) for s in wordnet_subjects(config)]


def wordnet_figure_args(config: dict) -> str:
    """``LABEL=per-class.parquet`` arguments of the WordNet figures."""
    return _labelled([(s, wordnet_classes_file(s)) for s in wordnet_subjects(config)])


def caption_figure_inputs(config: dict) -> list[str]:
    return [
        f"{R}/curate/{d}/{name}.parquet"
        for d in caption_datasets(config)
        for name in ("classes", "selection")
    ]


def caption_figure_args(config: dict) -> str:
    """``LABEL=curate-dir`` arguments of the caption-similarity figure."""
    return _labelled([(d, f"{R}/curate/{d}") for d in caption_datasets(config)])


def image_figure_inputs(config: dict) -> list[str]:
    return [image_classes_file(d) for d in image_datasets(config)]


def image_figure_args(config: dict) -> str:
    return _labelled([(d, image_classes_file(d)) for d in image_datasets(config)])


def table_subjects(config: dict) -> list[str]:
    """Subjects with a diagnostics table: WordNet subjects, then image-only contrast datasets."""
    subjects = wordnet_subjects(config)
    images = image_datasets(config)
    return subjects + [d for d in contrast_datasets(config) if d in images and d not in subjects]


def table_inputs(config: dict, subject: str) -> dict[str, str]:
    """Named inputs of one diagnostics table (only those the config produces)."""
    inputs = {}
    if subject in wordnet_subjects(config):
        inputs["wordnet"] = wordnet_stats_file(subject)
    reference = reference_dataset(config)
    if subject in caption_datasets(config):
        inputs["captions"] = caption_stats_file(subject)
        if reference in caption_datasets(config):
            inputs["reference_captions"] = caption_stats_file(reference)
    if subject in image_datasets(config):
        inputs["images"] = image_stats_file(subject)
        if reference:
            inputs["reference_images"] = image_stats_file(reference)
    return inputs


_TABLE_OPTIONS = {
    "wordnet": "--wordnet-stats",
    "captions": "--caption-stats",
    "reference_captions": "--reference-caption-stats",
    "images": "--image-stats",
    "reference_images": "--reference-image-stats",
}


def table_options(config: dict, subject: str) -> str:
    """Options of ``imagenot diagnostics-table`` for one subject."""
    parts = [f"{_TABLE_OPTIONS[k]} {v}" for k, v in table_inputs(config, subject).items()]
    parts.append(
        f"--name {shlex.quote(subject)} --reference-name {shlex.quote(reference_label(config))}"
    )
    return " ".join(parts)


def figures(config: dict) -> list[str]:
    """Names of the diagnostics figures this config produces."""
    names = []
    if wordnet_subjects(config):
        names += ["class_depth", "siblings"]
    if caption_datasets(config):
        names.append("caption_similarity")
    if image_datasets(config):
        names.append("image_similarity")
    return names


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``: figures, tables, per-subject statistics."""
    out = [wordnet_stats_file(s) for s in wordnet_subjects(config)]
    for name in figures(config):
        out += figure_files(name)
    for subject in table_subjects(config):
        out += table_files(subject)
    return out
