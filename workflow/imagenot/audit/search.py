"""Nearest-neighbour search of image embeddings with FAISS (docs/audit.md).

Similarity is the inner product of L2-normalised embeddings (cosine similarity), found by exact
search: ``faiss.IndexFlatIP`` over the target set, queried a block of rows at a time, so memory
is the target set (N x D float32) plus one block's results. Exact search fits every set the
audit compares: the largest target, ImageNet's 1.28 M training images at CLIP ViT-L/14's 768
dimensions, takes 3.9 GB; no approximate index, so no recall to trade. On a machine where FAISS
sees a GPU (``faiss-gpu``), the index is moved there.

A job searches one part of a query split (:func:`part_rows`: ``audit.query_parts`` contiguous
row ranges), so the work of one job is bounded by that part.
"""

from __future__ import annotations

import numpy as np

ADD_ROWS = 65536  # target rows normalised and added to the index at a time


def normalise(embeddings: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm as contiguous float32 (zero rows stay zero)."""
    x = np.asarray(embeddings, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x / np.where(norms == 0, 1.0, norms), dtype=np.float32)


def part_rows(n: int, part: int, parts: int) -> tuple[int, int]:
    """Rows ``[start, stop)`` of part ``part`` of ``parts`` near-equal contiguous parts of ``n``."""
    if not 0 <= part < parts:
        raise ValueError(f"part {part} is not one of 0..{parts - 1}")
    return n * part // parts, n * (part + 1) // parts


def flat_index(targets: np.ndarray, use_gpu: bool | None = None):
    """An exact inner-product index over the normalised ``targets`` (on a GPU when FAISS has
    one and ``use_gpu`` is not False)."""
    import faiss

    index = faiss.IndexFlatIP(targets.shape[1])
    gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if gpus and use_gpu is not False:
        index = faiss.index_cpu_to_all_gpus(index)
    for start in range(0, len(targets), ADD_ROWS):  # normalised a slice at a time: no copy
        index.add(normalise(targets[start : start + ADD_ROWS]))
    return index


def nearest_k(
    queries: np.ndarray, targets: np.ndarray, block_size: int, k: int, use_gpu: bool | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's ``k`` most similar targets, the most similar first: (similarity float32
    N x k, target row int64 N x k), exact; queries go through ``block_size`` rows at a time.
    Where the target set has fewer than ``k`` rows the rest are similarity -inf, row -1."""
    n = len(queries)
    sims = np.full((n, k), -np.inf, dtype=np.float32)
    rows = np.full((n, k), -1, dtype=np.int64)
    if n == 0 or len(targets) == 0:
        return sims, rows
    if queries.shape[1] != targets.shape[1]:
        raise ValueError(
            f"query embeddings have {queries.shape[1]} dimensions, targets {targets.shape[1]}: "
            "not one encoder's"
        )
    index = flat_index(targets, use_gpu)
    for start in range(0, n, block_size):
        block = normalise(queries[start : start + block_size])
        d, i = index.search(block, k)
        sims[start : start + len(block)] = np.where(i >= 0, d, -np.inf)
        rows[start : start + len(block)] = i
    return sims, rows


def nearest(
    queries: np.ndarray, targets: np.ndarray, block_size: int, use_gpu: bool | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's most similar target: (similarity float32 N, target row int64 N), exact
    (:func:`nearest_k` with k 1). An empty target set gives similarity -inf and row -1."""
    sims, rows = nearest_k(queries, targets, block_size, 1, use_gpu)
    return sims[:, 0], rows[:, 0]


def pair_similarity(queries: np.ndarray, targets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Cosine similarity of each query with its target row ``rows[i]`` (-inf where -1)."""
    out = np.full(len(rows), -np.inf, dtype=np.float32)
    have = np.flatnonzero(rows >= 0)
    if len(have):
        a, b = normalise(queries[have]), normalise(targets[rows[have]])
        out[have] = np.einsum("ij,ij->i", a, b)
    return out
