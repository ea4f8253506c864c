"""The handlers of the diagnostics stage's steps (docs/method.md section 3), declared in
:mod:`imagenot.core.steps`: each takes its files object (:mod:`imagenot.diagnostics.files`), its
settings object (:mod:`imagenot.diagnostics.settings`) and its options by name;
``wordnet-stats`` is also typed by hand.
"""

from __future__ import annotations

import json as _json
import os
import sys

from imagenot.core.wordnet import NLTK_DATA


def wordnet_stats(f, json: bool) -> int:
    """WordNet subtree statistics of a class list against a reference list."""
    from imagenot.core import class_list as cl
    from imagenot.core.io import write_json, write_parquet
    from imagenot.core.wordnet import imagenet_wnids, load_wordnet
    from imagenot.diagnostics import wordnet_stats as ws

    wn = load_wordnet(f.nltk_data or os.environ.get("IMAGENOT_NLTK_DATA", NLTK_DATA))
    try:
        classes = ws.resolve_classes(wn, cl.read_class_entries(f.classes), f.classes)
        if f.reference:
            reference = ws.resolve_classes(wn, cl.read_class_entries(f.reference), f.reference)
        else:
            entries = [cl.ClassEntry(w, i) for i, w in enumerate(imagenet_wnids(), start=1)]
            reference = ws.resolve_classes(wn, entries, "ImageNet (timm)")
    except (cl.ClassListError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    document = ws.compare(classes, reference)
    if f.stats:
        write_json(document, f.stats)
    if f.per_class:
        write_parquet(ws.per_class_table(classes, reference), f.per_class)
    if json:
        print(_json.dumps(document, indent=2, sort_keys=True))
    else:
        print(f"{'statistic':<16}{'classes':>14}{'reference':>14}")
        for key in ws.STAT_KEYS:
            a, b = document["classes"][key], document["reference"][key]
            print(f"{key:<16}{a:>14.6g}{b:>14.6g}")
        for key in ("synset_overlap", "parent_overlap"):
            print(f"{key:<16}{document[key]:.4f}")
    return 0


def caption_similarity_stats(f) -> None:
    """Caption-gloss similarity summary of a curation."""
    from imagenot.core.io import write_json
    from imagenot.diagnostics.captions import caption_stats, read_curation

    write_json(caption_stats(*read_curation(f.classes, f.selection)), f.stats)


def embed_images(f, s, workers: int, device: str | None, gpu_job: bool) -> None:
    """Embed every image of one split of a dataset with the diagnostics encoder."""
    import numpy as np

    from imagenot.core.dataset import folder_of
    from imagenot.core.device import cuda_available, resolve_device
    from imagenot.diagnostics import embed

    embed.check_clip_input(s)  # the config's sizes, before any file is read
    # by fact (imagenot.core.device): a GPU-planned job that sees no CUDA device stops here
    device = device or resolve_device("auto", gpu_job, cuda_available(), key=None)
    dataset_dir = folder_of(f.manifest, f.classes)
    encoder, description = embed.load_encoder(
        s.kind, s.clip_model, f.checkpoint, f.result, device, "embed-images"
    )
    arrays = embed.embed_dataset(dataset_dir, s, encoder, workers, device)
    arrays["encoder"] = np.asarray(description)
    embed.write_embeddings(arrays, f.embeddings)
    print(f"{f.embeddings}: {arrays['embeddings'].shape} embeddings ({description})")


def image_similarity(f, s) -> None:
    """Intra- and inter-class similarity of image embeddings (at most
    ``max_images_per_class`` per class, first in manifest order)."""
    from imagenot.core.io import write_json, write_parquet
    from imagenot.diagnostics import image_similarity as sim
    from imagenot.diagnostics.embed import first_per_class, read_embeddings

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


def table(f, s) -> None:
    """Contrast vs reference table with ratios."""
    from imagenot.core.files import INPUT
    from imagenot.core.io import read_json, write_text
    from imagenot.diagnostics import table

    given = {role: getattr(f, role) for role in f.roles(INPUT)}  # None: not produced
    rows = table.diagnostics_rows(**{r: path and read_json(path) for r, path in given.items()})
    write_text(table.to_csv(rows, s.subject, s.reference_name), f.csv)
    write_text(table.to_markdown(rows, s.subject, s.reference_name), f.md)


def figure(f, s, labels: list[str]) -> None:
    """One diagnostics figure (PDF and PNG)."""
    from imagenot.core.figure_style import save
    from imagenot.core.registries import resolve
    from imagenot.diagnostics.plan import FIGURES

    fig = resolve(FIGURES.entry(s.name).draw)(s.name, labels, f, s)
    save(fig, f.pdf, f.png, s.figure_options.dpi)
