"""`imagenot` subcommands of the diagnostics stage (method.md section 3).

``wordnet-stats`` is also typed by hand and keeps its flags. The other rule commands get
everything from config as one ``--settings`` JSON object, a settings object of
:mod:`imagenot.diagnostics.settings` the rule built with ``from_config``; file paths stay
arguments (they are the rule's inputs and outputs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from imagenot.curate.paths import DATASET_DIR
from imagenot.diagnostics.plan import FIGURES
from imagenot.diagnostics.settings import EmbedSettings, FigureSettings, TableSettings
from imagenot.paths import DATASET
from imagenot.wordnet import NLTK_DATA


def _parse(cls, text: str, command: str):
    """The parsed settings, or exit with one line naming the key."""
    from imagenot.settings import parse_or_exit

    return parse_or_exit(cls, text, command)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands."""
    p = subparsers.add_parser(
        "wordnet-stats",
        help="WordNet subtree statistics of a class list against a reference list",
        description="Statistics of the union of all hypernym paths of the classes (method.md s.3). "
        "Bad ids are reported with their line numbers (exit status 2).",
    )
    p.add_argument(
        "--classes",
        required=True,
        help="class list: one wnid a line (.txt) or .parquet with `wnid`",
    )
    p.add_argument(
        "--reference", default=None, help="reference class list (default: ImageNet's 1000, timm)"
    )
    p.add_argument(
        "--nltk-data",
        default=os.environ.get("IMAGENOT_NLTK_DATA", NLTK_DATA),
        help=f"NLTK_DATA dir with WordNet 3.0 (default: $IMAGENOT_NLTK_DATA or {NLTK_DATA})",
    )
    p.add_argument("--json", action="store_true", help="print the JSON document on stdout")
    p.add_argument("--out", default=None, help="also write the JSON document to this file")
    p.add_argument("--per-class", default=None, help="write per-class depth/siblings parquet here")
    p.set_defaults(func=_wordnet_stats)

    p = subparsers.add_parser(
        "caption-similarity-stats", help="caption-gloss similarity summary of a curation"
    )
    p.add_argument(
        "--curate-dir",
        required=True,
        help=f"{DATASET_DIR} (classes + selection parquet)",
    )
    p.add_argument("--out", required=True, help="JSON summary to write")
    p.set_defaults(func=_caption_stats)

    p = subparsers.add_parser(
        "embed-images", help="embed one split of a dataset with the diagnostics encoder"
    )
    p.add_argument("--dataset-dir", required=True, help=DATASET)
    p.add_argument(
        "--settings", required=True, help="JSON of imagenot.diagnostics.settings.EmbedSettings"
    )
    p.add_argument(
        "--checkpoint", default=None, help="backbone: model.safetensors (result.json beside it)"
    )
    p.add_argument("--workers", type=int, required=True, help="DataLoader worker processes")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available)")
    p.add_argument(
        "--gpu-job",
        action="store_true",
        help="the config plans this job for a GPU (resources.gpus > 0): stop without one",
    )
    p.add_argument("--out", required=True, help=".npz with embeddings, labels, keys, classes")
    p.set_defaults(func=_embed_images)

    p = subparsers.add_parser(
        "image-similarity", help="intra/inter-class similarity of image embeddings"
    )
    p.add_argument("--embeddings", required=True, help=".npz from `imagenot embed-images`")
    p.add_argument("--out-json", required=True)
    p.add_argument(
        "--out-table", required=True, help="per-class parquet: label, class, n, intra, inter"
    )
    p.set_defaults(func=_image_similarity)

    p = subparsers.add_parser("diagnostics-table", help="contrast vs reference table with ratios")
    p.add_argument(
        "--settings", required=True, help="JSON of imagenot.diagnostics.settings.TableSettings"
    )
    for option in (
        "wordnet-stats",
        "caption-stats",
        "reference-caption-stats",
        "image-stats",
        "reference-image-stats",
    ):
        p.add_argument(f"--{option}", default=None, help="JSON written by this stage")
    p.add_argument("--csv", required=True)
    p.add_argument("--md", required=True)
    p.set_defaults(func=_table)

    p = subparsers.add_parser("diagnostics-figure", help="one diagnostics figure (PDF + PNG)")
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="LABEL=PATH",
        help="class_depth/siblings: wordnet_classes.parquet; caption_similarity: curate dir; "
        "image_similarity: image_similarity.parquet",
    )
    p.add_argument(
        "--settings", required=True, help="JSON of imagenot.diagnostics.settings.FigureSettings"
    )
    p.add_argument("--pdf", required=True)
    p.add_argument("--png", required=True)
    p.set_defaults(func=_figure)


def _labelled(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"expected LABEL=PATH, got {item!r}")
        out[label] = path
    return out


def _wordnet_stats(args: argparse.Namespace) -> int:
    from imagenot.diagnostics import wordnet_stats as ws
    from imagenot.io import write_json, write_parquet
    from imagenot.wordnet import imagenet_wnids, load_wordnet

    wn = load_wordnet(args.nltk_data)
    try:
        classes = ws.resolve_classes(wn, ws.read_class_entries(args.classes), args.classes)
        if args.reference:
            reference = ws.resolve_classes(
                wn, ws.read_class_entries(args.reference), args.reference
            )
        else:
            entries = [ws.ClassEntry(w, i) for i, w in enumerate(imagenet_wnids(), start=1)]
            reference = ws.resolve_classes(wn, entries, "ImageNet (timm)")
    except (ws.ClassListError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    document = ws.compare(classes, reference)
    if args.out:
        write_json(document, args.out)
    if args.per_class:
        write_parquet(ws.per_class_table(classes, reference), args.per_class)
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
    from imagenot.diagnostics.captions import caption_stats, read_curation
    from imagenot.io import write_json

    write_json(caption_stats(*read_curation(args.curate_dir)), args.out)


def _embed_images(args: argparse.Namespace) -> None:
    import numpy as np

    from imagenot.device import cuda_available, resolve_device
    from imagenot.diagnostics import embed

    s = _parse(EmbedSettings, args.settings, "embed-images")
    # by fact (imagenot.device): a GPU-planned job that sees no CUDA device stops here
    device = args.device or resolve_device("auto", args.gpu_job, cuda_available(), key=None)
    if s.kind == "backbone":
        if not args.checkpoint:
            raise SystemExit("imagenot embed-images: a backbone encoder needs --checkpoint")
        encoder = embed.backbone_encoder(args.checkpoint, device)
        description = f"backbone:{args.checkpoint}"
    elif s.kind == "clip":
        if not s.clip_model:
            raise SystemExit("imagenot embed-images: --settings.clip_model is required for clip")
        encoder = embed.clip_encoder(s.clip_model, device)
        description = f"clip:{s.clip_model}"
    else:
        raise SystemExit(f"imagenot embed-images: --settings.kind {s.kind!r}: backbone or clip")
    arrays = embed.embed_dataset(args.dataset_dir, s, encoder, args.workers, device)
    arrays["encoder"] = np.asarray(description)
    embed.write_embeddings(arrays, args.out)
    print(f"{args.out}: {arrays['embeddings'].shape} embeddings ({description})")


def _image_similarity(args: argparse.Namespace) -> None:
    from imagenot.diagnostics import image_similarity as sim
    from imagenot.diagnostics.embed import read_embeddings
    from imagenot.io import write_json, write_parquet

    arrays = read_embeddings(args.embeddings)
    classes = [str(c) for c in arrays["classes"]]
    per_class = sim.class_similarity(arrays["embeddings"], arrays["labels"], len(classes))
    summary = sim.summarise(per_class)
    summary["encoder"] = str(arrays["encoder"])  # embed-images always writes it
    write_json(summary, args.out_json)
    write_parquet(sim.per_class_table(per_class, classes), args.out_table)


def _read_json(path: str | None):
    if path is None:
        return None
    from imagenot.io import read_json

    return read_json(path)


def _table(args: argparse.Namespace) -> None:
    from imagenot.diagnostics import table
    from imagenot.io import write_text

    s = _parse(TableSettings, args.settings, "diagnostics-table")
    rows = table.diagnostics_rows(
        wordnet=_read_json(args.wordnet_stats),
        captions=_read_json(args.caption_stats),
        reference_captions=_read_json(args.reference_caption_stats),
        images=_read_json(args.image_stats),
        reference_images=_read_json(args.reference_image_stats),
    )
    write_text(table.to_csv(rows, s.subject, s.reference_name), args.csv)
    write_text(table.to_markdown(rows, s.subject, s.reference_name), args.md)


def _figure(args: argparse.Namespace) -> None:
    from imagenot.diagnostics import figures
    from imagenot.registries import resolve

    s = _parse(FigureSettings, args.settings, "diagnostics-figure")
    draw = resolve(FIGURES.entry(s.name).draw)
    fig = draw(s.name, _labelled(args.inputs), s.reference_name)
    figures.save(fig, args.pdf, args.png)
