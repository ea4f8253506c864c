"""The audit of a dataset's download pool, before its splits are built (docs/audit.md,
"Removing flagged images"): which validated images to leave out, and why.

The pool is every validated image of every download round (the fill's candidates,
:func:`imagenot.acquire.build.read_rounds`), in the fill's order (caption similarity
descending, key). Each image is embedded with the diagnostics encoder and flagged where its
closest image in a target set (the reference's splits, the other datasets' compared split) is
at or above the calibrated threshold; then the pool is searched against itself, and of each
group of images linked by pairs at or above the threshold (the same photo under several URLs)
the first in the fill's order is kept. The exclusion list names each flagged image once, with
the first reason of :data:`imagenot.acquire.splits.EXCLUSION_REASONS` that applies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imagenot.acquire.splits import EXCLUSION_REASONS
from imagenot.audit import search

if TYPE_CHECKING:
    from imagenot.audit.files import PoolFiles
    from imagenot.audit.settings import PoolSettings

EXCLUSION_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("reason", pa.string()),
        ("target", pa.string()),  # '{dataset}/{split}', or 'pool' for a copy within the pool
        ("target_key", pa.string()),
        ("similarity", pa.float32()),
    ]
)


def read_pool(selections: list[str], status: list[str]) -> pa.Table:
    """The pool's validated images (key, wnid, similarity, part_tar, offset, length), in the
    fill's order."""
    from imagenot.acquire.build import read_rounds

    _, candidates = read_rounds(selections, status)
    order = pc.sort_indices(candidates, [("similarity", "descending"), ("key", "ascending")])
    return candidates.take(order).select(
        ["key", "wnid", "similarity", "part_tar", "offset", "length"]
    )


def embed_pool(pool: pa.Table, encode, prepare, batch_size: int, device: str) -> np.ndarray:
    """The pool's embeddings (N x D float32, in its order), ``batch_size`` images at a time
    read from the part tars at each row's offset and decoded (memory: one batch of images)."""
    from pathlib import Path

    import torch

    from imagenot.core.dataset import ShardReader, decode_jpeg
    from imagenot.diagnostics.embed import embed

    reader = ShardReader(Path("."))  # the part tars' paths as the status tables give them
    spans = list(zip(*(pool[c].to_pylist() for c in ("part_tar", "offset", "length")), strict=True))
    chunks = []
    for start in range(0, len(spans), batch_size):
        images = [
            decode_jpeg(reader.read(t, o, n)) for t, o, n in spans[start : start + batch_size]
        ]
        chunks.append(embed(torch.stack(images), encode, prepare, batch_size, device))
    reader.close()
    return np.concatenate(chunks) if chunks else np.zeros((0, 0), np.float32)


def target_flags(
    embeddings: np.ndarray,
    targets: list[tuple[str, dict]],
    threshold: float,
    block_size: int,
    use_gpu: bool | None = None,
) -> dict[int, tuple[str, str, float]]:
    """Pool row -> (target label, target key, similarity) of the first target set, in
    ``targets`` order, holding an image at or above ``threshold`` (its closest there)."""
    flags: dict[int, tuple[str, str, float]] = {}
    for label, found in targets:
        sims, rows = search.nearest(embeddings, found["embeddings"], block_size, use_gpu)
        for row in np.flatnonzero(sims >= threshold).tolist():
            if row not in flags:
                key = str(found["keys"][rows[row]])
                flags[row] = (label, key, float(sims[row]))
    return flags


def pool_copies(
    embeddings: np.ndarray, threshold: float, use_gpu: bool | None = None
) -> dict[int, tuple[int, float]]:
    """Pool row -> (kept row, similarity) for every image of a group of images linked by
    pairs at or above ``threshold`` but the group's first row (the fill's first): the
    connected components of those pairs (exact range search)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(embeddings)
    if n < 2:
        return {}
    x = search.normalise(embeddings)
    index = search.flat_index(x, use_gpu=False if use_gpu is None else use_gpu)
    lims, sims, cols = index.range_search(x, float(threshold))
    rows = np.repeat(np.arange(n), np.diff(lims.astype(np.int64)))
    pair = rows != cols
    rows, cols, sims = rows[pair], cols[pair], sims[pair]
    graph = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    _, group = connected_components(graph, directed=False)
    first = np.full(group.max() + 1, n)
    np.minimum.at(first, group, np.arange(n))
    out = {}
    for row in np.flatnonzero(first[group] != np.arange(n)).tolist():
        kept = int(first[group[row]])  # its similarity to the kept image, linked or not
        out[row] = (kept, float(x[row] @ x[kept]))
    return out


def exclusion_table(
    pool: pa.Table,
    flags: dict[int, tuple[str, str, float]],
    copies: dict[int, tuple[int, float]],
    reference: str | None,
) -> pa.Table:
    """One row per flagged pool image, in the pool's order: ``reference`` where its target set
    is the reference's, ``other_dataset`` where another dataset's, else ``pool_copy``."""
    keys = pool["key"].to_pylist()
    out = []
    for row in sorted(set(flags) | set(copies)):
        if row in flags:
            label, target_key, sim = flags[row]
            reason = "reference" if label.split("/")[0] == reference else "other_dataset"
        else:
            kept, sim = copies[row]
            label, target_key, reason = "pool", keys[kept], "pool_copy"
        assert reason in EXCLUSION_REASONS
        out.append(
            {
                "key": keys[row],
                "reason": reason,
                "target": label,
                "target_key": target_key,
                "similarity": sim,
            }
        )
    return pa.Table.from_pylist(out, schema=EXCLUSION_SCHEMA)


def audit_pool(files: PoolFiles, settings: PoolSettings, device: str) -> pa.Table:
    """Embed the pool, flag it against the target sets and itself at the calibration's
    threshold, and write the pool's embeddings and the exclusion list."""
    from imagenot.core.io import read_json, write_parquet
    from imagenot.diagnostics import embed

    embed.check_clip_input(settings)  # the config's sizes, before any file is read
    if len(files.targets) != len(settings.targets):
        raise ValueError(
            f"--targets: {len(files.targets)} file(s) for {len(settings.targets)} target set(s) "
            f"({' '.join(settings.targets)}); one per set"
        )
    calibration = read_json(files.calibration)
    pool = read_pool(files.selections, files.status)
    (encode, prepare), description = embed.load_encoder(
        settings.kind, settings.clip_model, files.checkpoint, files.result, device, "audit-pool"
    )
    if calibration["encoder"] != description:
        raise ValueError(
            f"{files.calibration}: calibrated with {calibration['encoder']}, the pool is "
            f"embedded by {description}; one encoder's threshold"
        )
    embeddings = embed_pool(pool, encode, prepare, settings.batch_size, device)
    embed.write_embeddings(
        {
            "embeddings": embeddings,
            "keys": np.asarray(pool["key"].to_pylist(), dtype=str),
            "encoder": np.asarray(description),
        },
        files.embeddings,
    )
    targets = []
    for label, path in zip(settings.targets, files.targets, strict=True):
        found = embed.read_embeddings(path)
        if str(found["encoder"]) != description:
            raise ValueError(f"{path}: embedded by {found['encoder']}, the pool by {description}")
        targets.append((label, found))
    threshold = float(calibration["threshold"])
    flags = target_flags(embeddings, targets, threshold, settings.block_size)
    copies = pool_copies(embeddings, threshold)
    table = exclusion_table(pool, flags, copies, settings.reference)
    write_parquet(table, files.exclusions)
    counts = pc.value_counts(table["reason"]).to_pylist() if table.num_rows else []
    by_reason = ", ".join(f"{c['values']} {c['counts']}" for c in counts) or "none"
    print(
        f"{files.exclusions}: {table.num_rows} of {pool.num_rows} pool images flagged at "
        f"{threshold:.4f} ({by_reason})"
    )
    return table
