"""Config lookups for the diagnostics stage's rules (pure functions of the workflow config).

The rule file rules/diagnostics.smk calls these; Snakemake files themselves define no functions.
Nothing here looks at the filesystem but :func:`check` (the class-list files the WordNet jobs
would refuse): every output is derived from config alone.

Subjects of the WordNet statistics are the diagnosed datasets whose classes are WordNet ids
(kinds ``laion`` and ``imagenet``), named by the dataset, and every class-list file of
``diagnostics.class_lists``, named ``list-{name}`` (a dash never occurs in a dataset name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from imagenot.acquire.kinds import wnid_kinds
from imagenot.core import paths
from imagenot.core.registries import Registry
from imagenot.curate import paths as curate_paths
from imagenot.train.paths import FINAL_MODEL, FINAL_RESULT

# The stage's files (Snakemake patterns: the rules' outputs and inputs, docs/contracts.md).
# A subject is a dataset name or list-{name} for a class list named in the config.
DIAGNOSTICS = f"{paths.RESULTS}/diagnostics"
WORDNET_STATS = f"{DIAGNOSTICS}/{{subject}}/wordnet_stats.json"
WORDNET_CLASSES = f"{DIAGNOSTICS}/{{subject}}/wordnet_classes.parquet"
CAPTION_STATS = f"{DIAGNOSTICS}/{{dataset}}/caption_similarity.json"
# one file per dataset and split, read by the image-similarity diagnostics and by the audit
IMAGE_EMBEDDINGS = f"{DIAGNOSTICS}/{{dataset}}/image_embeddings_{{split}}.npz"
SPLIT_PATTERN = "|".join(paths.SPLITS)  # the {split} wildcard
IMAGE_STATS = f"{DIAGNOSTICS}/{{dataset}}/image_similarity.json"
IMAGE_CLASSES = f"{DIAGNOSTICS}/{{dataset}}/image_similarity.parquet"
FIGURE_PDF = f"{paths.FIGURES}/diagnostics_{{name}}.pdf"
FIGURE_PNG = f"{paths.FIGURES}/diagnostics_{{name}}.png"
TABLE_CSV = f"{paths.TABLES}/diagnostics_{{subject}}.csv"
TABLE_MD = f"{paths.TABLES}/diagnostics_{{subject}}.md"
SUBJECT_PATTERN = "[a-z][a-z0-9_-]*"  # the {subject} wildcard: a dataset name or list-{name}
LIST_PREFIX = "list-"


def settings(config: dict) -> dict:
    """The validated ``diagnostics`` section (defaults filled by its schema, the only place a
    default lives)."""
    return config["diagnostics"]


def reference_dataset(config: dict) -> str | None:
    """The configured reference dataset, or None when unset or not a configured dataset."""
    name = settings(config)["reference_dataset"]
    return name if name in config["datasets"] else None


def contrast_datasets(config: dict) -> list[str]:
    """Datasets diagnosed against the reference, in config order."""
    chosen, reference = settings(config)["datasets"], reference_dataset(config)
    if chosen is None:  # every LAION-built dataset but the reference
        return [n for n, s in config["datasets"].items() if s["kind"] == "laion" and n != reference]
    return [name for name in config["datasets"] if name in chosen]


def wordnet_subjects(config: dict) -> list[str]:
    """Subjects of the WordNet statistics: wnid-labelled contrast datasets, then class lists."""
    datasets = config["datasets"]
    subjects = [d for d in contrast_datasets(config) if datasets[d]["kind"] in wnid_kinds()]
    return subjects + [LIST_PREFIX + name for name in settings(config)["class_lists"]]


def check(config: dict) -> None:
    """The class-list files of ``diagnostics.class_lists`` and ``diagnostics.reference_classes``
    exist and pass the WordNet job's own check
    (:func:`imagenot.core.class_list.config_class_list`): a list with a malformed, repeated
    or unknown wnid is refused before any job, with the job's message."""
    cfg = settings(config)
    lists = {f"class_lists.{name}": path for name, path in cfg["class_lists"].items()}
    if cfg["reference_classes"]:
        lists["reference_classes"] = cfg["reference_classes"]
    from imagenot.core.class_list import config_class_list

    for key, given in lists.items():
        config_class_list(config, f"diagnostics.{key}", given)


def class_list_file(config: dict, subject: str) -> str:
    """The class-list file of a WordNet subject."""
    if subject.startswith(LIST_PREFIX):
        return paths.shipped(settings(config)["class_lists"][subject.removeprefix(LIST_PREFIX)])
    return paths.CLASSES.format(dataset=subject)


def reference_classes_input(config: dict) -> list[str]:
    """The reference class-list file as a rule input ([] = ImageNet's list shipped by timm)."""
    path = settings(config)["reference_classes"]
    return [paths.shipped(path)] if path else []


def reference_label(config: dict) -> str:
    """Column heading of the reference in tables and figures."""
    return reference_dataset(config) or (
        "reference" if settings(config)["reference_classes"] else "imagenet"
    )


def caption_datasets(config: dict) -> list[str]:
    """LAION-built datasets (curation outputs exist) among the contrast and reference datasets."""
    datasets = config["datasets"]
    names = [*contrast_datasets(config), reference_dataset(config)]
    return [n for n in names if n and datasets[n]["kind"] == "laion"]


def backbone_run(config: dict) -> dict | None:
    """The final standard-protocol run whose model encodes images (kind backbone), or None."""
    from imagenot.train.plan import final_runs

    encoder = settings(config)["encoder"]
    contrast = contrast_datasets(config)
    dataset = encoder["backbone_dataset"] or (contrast[0] if contrast else None)
    model, seed = encoder["backbone_model"], encoder["backbone_seed"]
    runs = (r for r in final_runs(config) if (r["protocol"], r["dataset"]) == ("st", dataset))
    return next(
        (r for r in runs if model in (None, r["model"]) and seed in (None, int(r["seed"]))), None
    )


def _backbone_file(config: dict, pattern: str) -> list[str]:
    run = backbone_run(config) if settings(config)["encoder"]["kind"] == "backbone" else None
    return [] if run is None else [pattern.format(**run)]


def encoder_checkpoint(config: dict) -> list[str]:
    """The backbone checkpoint as a rule input ([] for CLIP or when no run matches)."""
    return _backbone_file(config, FINAL_MODEL)


def encoder_result(config: dict) -> list[str]:
    """The backbone run's record (result.json) as a rule input ([] as
    :func:`encoder_checkpoint`)."""
    return _backbone_file(config, FINAL_RESULT)


def encoder_available(config: dict) -> bool:
    """Whether images can be embedded: CLIP, or a backbone run the workflow trains."""
    return settings(config)["encoder"]["kind"] == "clip" or bool(encoder_checkpoint(config))


def encoder_description(config: dict) -> str:
    """Human-readable encoder identity (rule params: a change reruns the embeddings)."""
    encoder = settings(config)["encoder"]
    if encoder["kind"] == "clip":
        return f"clip:{encoder['clip_model']}"
    checkpoint = encoder_checkpoint(config)
    return f"backbone:{checkpoint[0]}" if checkpoint else "backbone:none"


def image_datasets(config: dict) -> list[str]:
    """Datasets whose image similarity is computed (none when no encoder is available)."""
    if not encoder_available(config):
        return []
    reference = reference_dataset(config)
    return contrast_datasets(config) + ([reference] if reference else [])


# ------------------------------------------------------------------------------ output paths


def embeddings_file(dataset: str, split: str) -> str:
    """The embeddings of one split of a dataset (``embed-images``)."""
    return IMAGE_EMBEDDINGS.format(dataset=dataset, split=split)


def similarity_embeddings(config: dict, dataset: str) -> str:
    """The embeddings the image-similarity diagnostics reads: the dataset's
    ``diagnostics.image_similarity.split``."""
    return embeddings_file(dataset, settings(config)["image_similarity"]["split"])


# The diagnostics figures (the one list: ``imagenot diagnostics-figure`` choices derive from it).
@dataclass(frozen=True)
class DiagnosticsFigure:
    """A diagnostics figure: what it compares, which files it reads and what draws it.

    ``sources(config)`` gives the labels it compares (subjects or datasets), in order;
    ``files`` the pattern of each source's file by role of
    :class:`imagenot.diagnostics.files.FigureFiles` (``{role: pattern}``, its ``{subject}`` or
    ``{dataset}`` wildcard the source's label); ``draw`` a
    ``"module:function"`` called as ``draw(name, labels, files, settings)`` (settings: the
    rule's :class:`imagenot.diagnostics.settings.FigureSettings`) returning a
    matplotlib figure (imported by the job only: planning stays matplotlib-free)."""

    sources: Callable[[dict], list[str]]
    files: dict[str, str]
    draw: str


#: The one list of diagnostics figures (rule ``diagnostics_figure``'s wildcard, the command's
#: check, the default of what is drawn).
_DRAW = "imagenot.diagnostics.figures"
_WORDNET = DiagnosticsFigure(
    wordnet_subjects, {"tables": WORDNET_CLASSES}, f"{_DRAW}:draw_wordnet_figure"
)
_CAPTION_FILES = {"classes": curate_paths.CLASS_TABLE, "selection": curate_paths.SELECTION}
FIGURES = Registry(
    "diagnostics figure",
    {
        "class_depth": _WORDNET,
        "siblings": _WORDNET,
        "caption_similarity": DiagnosticsFigure(
            caption_datasets, _CAPTION_FILES, f"{_DRAW}:draw_caption_figure"
        ),
        "image_similarity": DiagnosticsFigure(
            image_datasets, {"tables": IMAGE_CLASSES}, f"{_DRAW}:draw_image_figure"
        ),
    },
)


def figure_inputs(config: dict, name: str, role: str) -> list[str]:
    """The files of role ``role`` of the diagnostics figure ``name``, one per source in the
    order of :func:`figure_labels` ([] for a role the figure does not read)."""
    figure = FIGURES.entry(name)
    pattern = figure.files.get(role)
    return [pattern.format(subject=s, dataset=s) for s in figure.sources(config)] if pattern else []


def figure_labels(config: dict, name: str) -> list[str]:
    """``--labels`` of ``imagenot diagnostics-figure`` for ``name``: its sources, in order (each
    shell-quoted in the rule's line: imagenot.core.shell_line)."""
    return list(FIGURES.entry(name).sources(config))


def table_subjects(config: dict) -> list[str]:
    """Subjects with a diagnostics table: WordNet subjects, then image-only contrast datasets."""
    subjects = wordnet_subjects(config)
    images = image_datasets(config)
    return subjects + [d for d in contrast_datasets(config) if d in images and d not in subjects]


def table_inputs(config: dict, subject: str) -> dict[str, str]:
    """The statistics files of one diagnostics table by role of
    :class:`imagenot.diagnostics.files.TableFiles` (only those the config produces)."""
    inputs = {}
    if subject in wordnet_subjects(config):
        inputs["wordnet"] = WORDNET_STATS.format(subject=subject)
    reference = reference_dataset(config)
    if subject in caption_datasets(config):
        inputs["captions"] = CAPTION_STATS.format(dataset=subject)
        if reference in caption_datasets(config):
            inputs["reference_captions"] = CAPTION_STATS.format(dataset=reference)
    if subject in image_datasets(config):
        inputs["images"] = IMAGE_STATS.format(dataset=subject)
        if reference:
            inputs["reference_images"] = IMAGE_STATS.format(dataset=reference)
    return inputs


def table_input(config: dict, subject: str, role: str) -> list[str]:
    """One statistics file of a diagnostics table as a rule input ([] when the config does not
    produce it)."""
    path = table_inputs(config, subject).get(role)
    return [path] if path else []


def figures(config: dict) -> list[str]:
    """Names of the diagnostics figures this config produces: those with something to draw."""
    return [name for name, figure in FIGURES.items() if figure.sources(config)]


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``: figures, tables, per-subject statistics."""
    out = [WORDNET_STATS.format(subject=s) for s in wordnet_subjects(config)]
    for name in figures(config):
        out += [FIGURE_PDF.format(name=name), FIGURE_PNG.format(name=name)]
    for subject in table_subjects(config):
        out += [TABLE_CSV.format(subject=subject), TABLE_MD.format(subject=subject)]
    return out
