"""The files of the diagnostics stage's steps (:mod:`imagenot.core.files`).

A dataset's own folder is a format (:mod:`imagenot.core.dataset`): ``embed-images`` takes its
manifest and classes, checks that they sit in one folder, and reads the images that folder's
manifest locates.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.core.files import Files, given, made
from imagenot.core.wordnet import NLTK_DATA


@dataclass(frozen=True)
class WordnetStatsFiles(Files):
    """``wordnet-stats``: the WordNet statistics of a class list against a reference list."""

    classes: str = given("class list: one wnid a line (.txt) or .parquet with `wnid`")
    reference: str | None = given(
        "reference class list (default: ImageNet's 1000, as timm ships them)", optional=True
    )
    nltk_data: str | None = given(
        f"NLTK_DATA folder holding WordNet 3.0 (default: $IMAGENOT_NLTK_DATA or {NLTK_DATA})",
        optional=True,
    )
    stats: str | None = made("also write the JSON document to this file", optional=True)
    per_class: str | None = made("write the per-class depth/siblings parquet here", optional=True)


@dataclass(frozen=True)
class CaptionStatsFiles(Files):
    """``caption-similarity-stats``: the caption-gloss similarity summary of one curation."""

    classes: str = given("the curation's classes.parquet (each class's score)")
    selection: str = given("the curation's selection.parquet (each caption's similarity)")
    stats: str = made("the JSON summary")


@dataclass(frozen=True)
class EmbedFiles(Files):
    """``embed-images``: one split of a dataset embedded with the diagnostics encoder."""

    manifest: str = given("the dataset's manifest (its folder is the dataset's)")
    classes: str = given("the dataset's classes.txt, beside the manifest")
    checkpoint: str | None = given(
        "a backbone encoder's weights (model.safetensors of a final run)", optional=True
    )
    result: str | None = given(
        "a backbone encoder's run record (that run's result.json)", optional=True
    )
    embeddings: str = made(".npz with embeddings, labels, keys, classes and the encoder")


@dataclass(frozen=True)
class ImageSimilarityFiles(Files):
    """``image-similarity``: intra- and inter-class similarity of one dataset's embeddings."""

    embeddings: str = given(".npz written by `imagenot embed-images`")
    stats: str = made("the JSON summary")
    per_class: str = made("per-class parquet: label, class, n, intra, inter")


@dataclass(frozen=True)
class TableFiles(Files):
    """``diagnostics-table``: one subject against the reference. Each statistics file is
    handed when the config produces it (a flag without a path: not produced)."""

    wordnet: str | None = given("the subject's wordnet_stats.json", optional=True)
    captions: str | None = given("the subject's caption_similarity.json", optional=True)
    reference_captions: str | None = given("the reference's caption_similarity.json", optional=True)
    images: str | None = given("the subject's image_similarity.json", optional=True)
    reference_images: str | None = given("the reference's image_similarity.json", optional=True)
    csv: str = made("the table as CSV")
    md: str = made("the table as Markdown")


@dataclass(frozen=True)
class FigureFiles(Files):
    """``diagnostics-figure``: one figure comparing its sources (``--labels``, in order), as
    PDF and PNG. Each figure reads its own roles (imagenot.diagnostics.plan.FIGURES); the
    others are handed empty."""

    tables: list[str] = given(
        "class_depth, siblings: each subject's wordnet_classes.parquet; image_similarity: "
        "each dataset's image_similarity.parquet (one per label)",
        many=True,
        optional=True,
    )
    classes: list[str] = given(
        "caption_similarity: each dataset's curated classes.parquet (one per label)",
        many=True,
        optional=True,
    )
    selection: list[str] = given(
        "caption_similarity: each dataset's selection.parquet (one per label)",
        many=True,
        optional=True,
    )
    pdf: str = made("the figure as PDF")
    png: str = made("the figure as PNG")
