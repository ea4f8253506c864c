"""The handlers of the audit stage's steps (docs/audit.md), declared in :mod:`imagenot.core.steps`:
each takes its files object (:mod:`imagenot.audit.files`), its settings object
(:mod:`imagenot.audit.settings`) and its options by name."""

from __future__ import annotations

import numpy as np


def calibrate(f, s, device: str | None, gpu_job: bool) -> None:
    """Calibrate the near-duplicate threshold on held-apart images and their edited copies."""
    import numpy as np
    import torch

    from imagenot.audit import calibrate as cal
    from imagenot.core.dataset import ManifestDataset, folder_of
    from imagenot.core.device import cuda_available, resolve_device
    from imagenot.core.io import write_json
    from imagenot.diagnostics import embed

    embed.check_clip_input(s)  # the config's sizes, before any file is read
    device = device or resolve_device("auto", gpu_job, cuda_available(), key=None)
    dataset = ManifestDataset(folder_of(f.manifest, f.classes), s.split)
    rows = cal.sample(dataset.labels, s.sample_images, s.seed)
    if len(rows) == 0:
        raise ValueError(
            f"{f.manifest}: split {s.split!r} has no class with two images; "
            "audit.calibration.split needs one"
        )
    images = torch.stack([dataset[int(i)][0] for i in rows])
    labels = dataset.labels[rows]
    (encode, prepare), description = embed.load_encoder(
        s.kind, s.clip_model, f.checkpoint, f.result, device, "audit-calibrate"
    )

    def embedded(x):
        return embed.embed(x, encode, prepare, s.batch_size, device)

    originals = embedded(images)
    copies = {name: embedded(c) for name, c in cal.make_copies(images, s.copies, s.seed).items()}
    positives, negatives = cal.pair_scores(originals, copies, labels)
    try:
        result = cal.choose_threshold(positives, negatives, s.min_precision, s.min_pairs)
    except ValueError as exc:
        raise ValueError(f"{f.manifest} (split {s.split}): {exc}") from None
    if s.verification["enabled"]:
        result["verification"] = _verification(images, labels, originals, s)
    result.update(
        encoder=description,
        split=s.split,
        images=len(rows),
        classes=len(np.unique(labels)),
        recall_by_copy=cal.recall_by_copy(copies, originals, result["threshold"]),
        copy_quantiles=np.quantile(positives, [0.01, 0.05, 0.5]).round(4).tolist(),
        distinct_quantiles=np.quantile(negatives, [0.5, 0.95, 0.99]).round(4).tolist(),
    )
    write_json(result, f.calibration)
    print(
        f"{f.calibration}: threshold {result['threshold']:.4f}, precision "
        f"{result['precision']:.3f}, recall {result['recall']:.3f} ({description})"
    )


def _verification(images, labels, originals, s) -> dict:
    """The verification's threshold on the calibration's copies (positives) and each
    held-apart image's best candidate among the other images of the sample (negatives)."""
    from imagenot.audit import calibrate as cal
    from imagenot.audit import verify

    v = s.verification
    grey = verify.grey(images, v["compare_side"])
    positives = np.concatenate(
        [
            verify.pair_scores(grey, verify.grey(c, v["compare_side"]), v)
            for c in cal.make_copies(images, s.copies, s.seed).values()
        ]
    )
    thumbs = verify.thumbnails(images, v["thumbnail_side"]) if v["pixel_candidates"] else None
    itself = np.arange(len(grey))
    rows = verify.candidate_rows(originals, originals, thumbs, thumbs, v, 4096, skip=itself)
    negatives, _ = verify.best_candidates(grey, lambda wanted: grey[wanted], rows, v)
    result = verify.choose_threshold(
        positives, negatives, v["copy_rate"], s.min_precision, s.min_pairs
    )
    result["distinct_quantiles"] = np.quantile(negatives, [0.5, 0.95, 0.99, 1]).round(4).tolist()
    result["copy_quantiles"] = np.quantile(positives, [0, 0.01, 0.05, 0.5]).round(4).tolist()
    return result


def thumbnails(f, s, workers: int) -> None:
    """Make the colour-normalised thumbnails of one split of a dataset, in its embeddings' key
    order."""
    from imagenot.audit import thumbnails as thumbs
    from imagenot.core.dataset import ManifestDataset, folder_of
    from imagenot.diagnostics.embed import read_embeddings

    dataset = ManifestDataset(folder_of(f.manifest, f.classes), s.split)
    keys = np.asarray(read_embeddings(f.embeddings)["keys"], dtype=str).tolist()
    made = thumbs.make_thumbnails(dataset, keys, s.thumbnail_side, workers, f.embeddings)
    thumbs.write_thumbnails(keys, made, s.thumbnail_side, f.thumbnails)
    print(f"{f.thumbnails}: {len(keys)} thumbnails of {s.thumbnail_side} px")


def search(f, s, threads: int) -> None:
    """Find each image's closest image in every target set (exact FAISS search), its
    candidates verified by alignment."""
    import faiss
    import pyarrow as pa
    import torch

    from imagenot.audit import search as exact
    from imagenot.audit import tables, verify
    from imagenot.audit.thumbnails import read_thumbnails
    from imagenot.core.dataset import ManifestDataset, folder_of
    from imagenot.core.io import write_parquet
    from imagenot.diagnostics.embed import read_embeddings

    faiss.omp_set_num_threads(max(1, threads))  # the job's cores, not the node's
    torch.set_num_threads(max(1, threads))
    if len(f.targets) != len(s.targets):
        raise ValueError(
            f"--targets: {len(f.targets)} file(s) for {len(s.targets)} target set(s) "
            f"({' '.join(s.targets)}); one per set"
        )
    v = s.verification
    if v["enabled"] and len(f.manifests) != len(s.targets) + 1:
        raise ValueError(
            f"--manifests: {len(f.manifests)} file(s); verification needs the audited "
            f"dataset's and one per target set ({len(s.targets) + 1})"
        )
    thumbed = v["enabled"] and v["pixel_candidates"] > 0
    if thumbed and len(f.thumbnails) != len(s.targets) + 1:
        raise ValueError(
            f"--thumbnails: {len(f.thumbnails)} file(s); pixel_candidates needs the audited "
            f"split's and one per target set ({len(s.targets) + 1})"
        )
    queries = read_embeddings(f.queries)
    start, stop = exact.part_rows(len(queries["keys"]), int(s.part), s.query_parts)
    part = {k: queries[k][start:stop] for k in ("embeddings", "labels", "keys")}
    part["classes"] = queries["classes"]
    query_grey, query_thumbs = None, None
    pieces = [tables.MATCH_SCHEMA.empty_table()]
    for i, (label, path) in enumerate(zip(s.targets, f.targets, strict=True)):
        found = read_embeddings(path)
        if str(found["encoder"]) != str(queries["encoder"]):
            raise ValueError(
                f"{path}: embedded by {found['encoder']}, {f.queries} by {queries['encoder']}; "
                "the audit compares one encoder's embeddings"
            )
        if v["enabled"]:
            side = v["thumbnail_side"]
            if query_grey is None:  # the part's own images only
                own = ManifestDataset(folder_of(f.manifests[0]), s.split)
                query_grey = verify.images(own, list(map(str, part["keys"])), v["compare_side"])
                if thumbed:
                    whole = read_thumbnails(f.thumbnails[0], queries["keys"], side, f.queries)
                    query_thumbs = whole[start:stop].copy()
                    del whole
            target_set = ManifestDataset(folder_of(f.manifests[i + 1]), label.split("/")[1])
            keys = np.asarray(found["keys"], dtype=str).tolist()
            thumbs = read_thumbnails(f.thumbnails[i + 1], keys, side, path) if thumbed else None
            rows = verify.candidate_rows(
                part["embeddings"], found["embeddings"], query_thumbs, thumbs, v, s.block_size
            )
            del thumbs

            def target(wanted, target_set=target_set, keys=keys):
                # decoded lazily: only the candidates this part verifies
                return verify.images(target_set, [keys[w] for w in wanted], v["compare_side"])

            scores, column = verify.best_candidates(query_grey, target, rows, v)
            rows = rows[np.arange(len(rows)), column]
            sims = exact.pair_similarity(part["embeddings"], found["embeddings"], rows)
        else:
            sims, rows = exact.nearest(part["embeddings"], found["embeddings"], s.block_size)
            scores = sims
        pieces.append(tables.matches_table(s.split, part, label, found, sims, rows, scores))
        print(f"{label}: {len(part['keys'])} x {len(found['keys'])} searched")
    write_parquet(pa.concat_tables(pieces), f.matches)


def pool(f, s, device: str | None, gpu_job: bool) -> None:
    """Flag a download pool's images before its splits are built (the exclusion list)."""
    from imagenot.audit.pool import audit_pool
    from imagenot.core.device import cuda_available, resolve_device

    audit_pool(f, s, device or resolve_device("auto", gpu_job, cuda_available(), key=None))


def table(f, s) -> None:
    """Tabulate the near-duplicates found at the calibrated threshold."""
    import pyarrow as pa

    from imagenot.audit import tables
    from imagenot.core.io import (
        read_json,
        read_parquet,
        write_csv,
        write_json,
        write_parquet,
    )

    calibration = read_json(f.calibration)
    # what flags a pair: the verification's threshold where the calibration has one
    verified = "verification" in calibration
    applied = calibration["verification"] if verified else calibration
    threshold = float(applied["threshold"])
    matches = pa.concat_tables([read_parquet(p) for p in f.matches])
    per_class = tables.per_class(matches, threshold)
    write_parquet(per_class, f.per_class)
    write_csv(tables.report_rows(per_class, s.dataset_names), f.csv)
    write_parquet(tables.flagged(matches, threshold), f.flagged)
    write_parquet(tables.closest(matches, s.figure_pairs), f.closest)
    sets = tables.set_counts(per_class)
    summary = {
        "dataset": s.dataset,
        "threshold": threshold,
        "verified": verified,
        "precision": applied["precision"],
        "recall": applied["recall"],
        "calibration": calibration,
        "sets": sets,
        "sentence": tables.sentence(s.dataset, sets, applied, s.reference, s.dataset_names),
    }
    write_json(summary, f.summary)
    print(summary["sentence"])


def figure(f, s) -> None:
    """Draw the closest pairs side by side (PDF and PNG)."""
    from imagenot.audit.figure import draw_pairs
    from imagenot.core.dataset import ManifestDataset, folder_of
    from imagenot.core.figure_style import save
    from imagenot.core.io import read_json, read_parquet

    if len(f.manifests) != len(f.classes):
        raise ValueError(f"--classes: {len(f.classes)} file(s) for {len(f.manifests)} manifests")
    folders = {}
    for manifest, classes in zip(f.manifests, f.classes, strict=True):
        folder = folder_of(manifest, classes)
        folders[folder.name] = folder
    threshold = float(read_json(f.summary)["threshold"])
    rows = read_parquet(f.closest).sort_by([("score", "descending"), ("key", "ascending")])
    pairs = rows.slice(0, s.figure_pairs).to_pylist()
    opened: dict[tuple[str, str], tuple] = {}

    def image(dataset: str, split: str, key: str):
        if (dataset, split) not in opened:
            if dataset not in folders:
                raise ValueError(f"--manifests: no manifest of dataset {dataset!r}")
            ds = ManifestDataset(folders[dataset], split)
            opened[dataset, split] = (ds, {k: i for i, k in enumerate(ds.keys)})
        ds, index = opened[dataset, split]
        return ds[index[key]][0].permute(1, 2, 0).numpy()

    images = []
    for pair in pairs:
        target, target_split = pair["target"].split("/")
        images.append(
            (
                image(s.dataset, pair["split"], pair["key"]),
                image(target, target_split, pair["target_key"]),
            )
        )
    fig = draw_pairs(pairs, images, threshold, s)
    save(fig, f.pdf, f.png, s.figure_options.dpi)
