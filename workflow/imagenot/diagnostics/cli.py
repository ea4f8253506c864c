"""`imagenot` subcommands of the diagnostics stage (docs/method.md section 3).

Each command takes its files by role (:mod:`imagenot.diagnostics.files`, its parser built from
the class); ``wordnet-stats`` is also typed by hand. The rule commands get everything else from
config as one ``--settings`` JSON object, a settings object of
:mod:`imagenot.diagnostics.settings` the rule built with ``from_config``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from imagenot.cli import subcommand
from imagenot.diagnostics import files
from imagenot.diagnostics.settings import (
    EmbedSettings,
    FigureSettings,
    ImageSimilaritySettings,
    TableSettings,
)
from imagenot.wordnet import NLTK_DATA


def _parse(cls, text: str, command: str):
    """The parsed settings, or exit with one line naming the key."""
    from imagenot.settings import parse_or_exit

    return parse_or_exit(cls, text, command)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands."""
    p = subcommand(
        subparsers,
        "wordnet-stats",
        _wordnet_stats,
        files=files.WordnetStatsFiles,
        description="Statistics of the union of all hypernym paths of the classes "
        "(docs/method.md section 3). Bad ids are reported with their line numbers (exit status 2).",
    )
    p.add_argument("--json", action="store_true", help="print the JSON document on stdout")

    subcommand(
        subparsers, "caption-similarity-stats", _caption_stats, files=files.CaptionStatsFiles
    )

    p = subcommand(
        subparsers,
        "embed-images",
        _embed_images,
        files=files.EmbedFiles,
        settings=EmbedSettings,
    )
    p.add_argument("--workers", type=int, required=True, help="DataLoader worker processes")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    p.add_argument(
        "--gpu-job",
        action="store_true",
        help="the config plans this job for a GPU (resources.gpus > 0): stop without one",
    )

    subcommand(
        subparsers,
        "image-similarity",
        _image_similarity,
        files=files.ImageSimilarityFiles,
        settings=ImageSimilaritySettings,
    )
    subcommand(
        subparsers, "diagnostics-table", _table, files=files.TableFiles, settings=TableSettings
    )
    p = subcommand(
        subparsers, "diagnostics-figure", _figure, files=files.FigureFiles, settings=FigureSettings
    )
    p.add_argument(
        "--labels",
        nargs="+",
        required=True,
        metavar="LABEL",
        help="the subjects or datasets the figure compares, in the order of its files",
    )


def _wordnet_stats(args: argparse.Namespace) -> int:
    """WordNet subtree statistics of a class list against a reference list."""
    from imagenot.diagnostics import wordnet_stats as ws
    from imagenot.io import write_json, write_parquet
    from imagenot.wordnet import imagenet_wnids, load_wordnet

    f = files.WordnetStatsFiles.from_args(args)
    wn = load_wordnet(f.nltk_data or os.environ.get("IMAGENOT_NLTK_DATA", NLTK_DATA))
    try:
        classes = ws.resolve_classes(wn, ws.read_class_entries(f.classes), f.classes)
        if f.reference:
            reference = ws.resolve_classes(wn, ws.read_class_entries(f.reference), f.reference)
        else:
            entries = [ws.ClassEntry(w, i) for i, w in enumerate(imagenet_wnids(), start=1)]
            reference = ws.resolve_classes(wn, entries, "ImageNet (timm)")
    except (ws.ClassListError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    document = ws.compare(classes, reference)
    if f.stats:
        write_json(document, f.stats)
    if f.per_class:
        write_parquet(ws.per_class_table(classes, reference), f.per_class)
    if args.json:
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        print(f"{'statistic':<16}{'classes':>14}{'reference':>14}")
        for key in ws.STAT_KEYS:
            a, b = document["classes"][key], document["reference"][key]
            print(f"{key:<16}{a:>14.6g}{b:>14.6g}")
        print(f"synset_overlap  {document['synset_overlap']:.4f}")
        print(f"parent_overlap  {document['parent_overlap']:.4f}")
    return 0


def _caption_stats(args: argparse.Namespace) -> None:
    """Caption-gloss similarity summary of a curation."""
    from imagenot.diagnostics.captions import caption_stats, read_curation
    from imagenot.io import write_json

    f = files.CaptionStatsFiles.from_args(args)
    write_json(caption_stats(*read_curation(f.classes, f.selection)), f.stats)


def _embed_images(args: argparse.Namespace) -> None:
    """Embed every image of one split of a dataset with the diagnostics encoder."""
    import numpy as np

    from imagenot.dataset import folder_of
    from imagenot.device import cuda_available, resolve_device
    from imagenot.diagnostics import embed

    f = files.EmbedFiles.from_args(args)
    s = _parse(EmbedSettings, args.settings, "embed-images")
    # by fact (imagenot.device): a GPU-planned job that sees no CUDA device stops here
    device = args.device or resolve_device("auto", args.gpu_job, cuda_available(), key=None)
    dataset_dir = folder_of(f.manifest, f.classes)
    encoder, description = embed.load_encoder(
        s.kind, s.clip_model, f.checkpoint, f.result, device, "embed-images"
    )
    arrays = embed.embed_dataset(dataset_dir, s, encoder, args.workers, device)
    arrays["encoder"] = np.asarray(description)
    embed.write_embeddings(arrays, f.embeddings)
    print(f"{f.embeddings}: {arrays['embeddings'].shape} embeddings ({description})")


def _image_similarity(args: argparse.Namespace) -> None:
    """Intra- and inter-class similarity of image embeddings (at most
    ``max_images_per_class`` per class, first in manifest order)."""
    from imagenot.diagnostics import image_similarity as sim
    from imagenot.diagnostics.embed import first_per_class, read_embeddings
    from imagenot.io import write_json, write_parquet

    f = files.ImageSimilarityFiles.from_args(args)
    s = _parse(ImageSimilaritySettings, args.settings, "image-similarity")
    arrays = read_embeddings(f.embeddings)
    classes = [str(c) for c in arrays["classes"]]
    chosen = first_per_class(arrays["labels"], s.max_images_per_class)
    per_class = sim.class_similarity(
        arrays["embeddings"][chosen], arrays["labels"][chosen], len(classes)
    )
    summary = sim.summarise(per_class)
    summary["encoder"] = str(arrays["encoder"])  # embed-images always writes it
    write_json(summary, f.stats)
    write_parquet(sim.per_class_table(per_class, classes), f.per_class)


def _read_json(path: str | None):
    if path is None:
        return None
    from imagenot.io import read_json

    return read_json(path)


def _table(args: argparse.Namespace) -> None:
    """Contrast vs reference table with ratios."""
    from imagenot.diagnostics import table
    from imagenot.io import write_text

    f = files.TableFiles.from_args(args)
    s = _parse(TableSettings, args.settings, "diagnostics-table")
    rows = table.diagnostics_rows(
        wordnet=_read_json(f.wordnet),
        captions=_read_json(f.captions),
        reference_captions=_read_json(f.reference_captions),
        images=_read_json(f.images),
        reference_images=_read_json(f.reference_images),
    )
    write_text(table.to_csv(rows, s.subject, s.reference_name), f.csv)
    write_text(table.to_markdown(rows, s.subject, s.reference_name), f.md)


def _figure(args: argparse.Namespace) -> None:
    """One diagnostics figure (PDF and PNG)."""
    from imagenot.diagnostics import figures
    from imagenot.diagnostics.plan import FIGURES
    from imagenot.registries import resolve

    f = files.FigureFiles.from_args(args)
    s = _parse(FigureSettings, args.settings, "diagnostics-figure")
    draw = resolve(FIGURES.entry(s.name).draw)
    fig = draw(s.name, args.labels, f, s)
    figures.save(fig, f.pdf, f.png, s.figure_options)
