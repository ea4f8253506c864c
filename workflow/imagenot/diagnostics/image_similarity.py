"""Intra-class and inter-class image similarity from image embeddings (docs/method.md section 3).

Similarity of two images is the inner product of their L2-normalised embeddings. Everything is
computed from per-class sums ``S_c = sum_{i in c} x_i`` in one pass (a sparse one-hot product and
one C x C matrix product), never from a loop over image pairs:

- intra-class similarity of class c: mean over ordered pairs i != j within c,
  ``(||S_c||^2 - n_c) / (n_c (n_c - 1))`` (self-pairs excluded; ``||x_i|| = 1``);
- inter-class similarity of class c: mean over pairs (i in c, j not in c),
  ``S_c . (S - S_c) / (n_c (N - n_c))`` where ``S`` is the sum over all images;
- dataset summaries: the mean over classes of each (classes weigh equally), and the pooled
  inter-class mean over all cross-class pairs.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def class_similarity(
    embeddings: np.ndarray, labels: np.ndarray, n_classes: int | None
) -> dict[str, np.ndarray]:
    """Per-class ``n``, ``intra`` and ``inter`` similarity (NaN where undefined).

    ``intra`` needs at least two images in the class, ``inter`` at least one image elsewhere.
    """
    labels = np.asarray(labels, dtype=np.int64)
    if n_classes is None:
        n_classes = int(labels.max()) + 1 if labels.size else 0
    from scipy.sparse import csr_matrix

    x = np.asarray(embeddings, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    x = x / np.where(norms == 0, 1.0, norms)  # unit rows (zero rows stay zero)
    counts = np.bincount(labels, minlength=n_classes).astype(np.int64)
    rows = np.arange(labels.size)
    onehot = csr_matrix((np.ones(labels.size), (labels, rows)), shape=(n_classes, labels.size))
    sums = np.asarray(onehot @ x)  # C x D: the sum of each class's rows
    squared_norms = np.einsum("ij,ij->i", x, x)  # 1, or 0 for zero embeddings
    self_sum = np.bincount(labels, weights=squared_norms, minlength=n_classes)
    gram = sums @ sums.T  # C x C: sum of inner products between classes c and d
    within = np.diag(gram) - self_sum
    across = gram.sum(axis=1) - np.diag(gram)
    n_total = counts.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        intra = np.where(counts > 1, within / (counts * (counts - 1)), np.nan)
        cross_pairs = counts * (n_total - counts)
        inter = np.where(cross_pairs > 0, across / cross_pairs, np.nan)
    return {"n": counts, "intra": intra, "inter": inter, "cross_sum": across}


def summarise(per_class: dict[str, np.ndarray]) -> dict[str, float]:
    """Dataset-level summary: class means of intra/inter, pooled inter, their ratio, counts."""
    counts = per_class["n"]
    cross_pairs = float((counts * (counts.sum() - counts)).sum())
    intra = float(np.nanmean(per_class["intra"])) if np.isfinite(per_class["intra"]).any() else None
    inter = float(np.nanmean(per_class["inter"])) if np.isfinite(per_class["inter"]).any() else None
    pooled = float(per_class["cross_sum"].sum() / cross_pairs) if cross_pairs else None
    ratio = intra / inter if intra is not None and inter else None
    stats = {"n_images": int(counts.sum()), "n_classes": int((counts > 0).sum())}
    stats |= {"intra_class_similarity": intra, "inter_class_similarity": inter}
    return stats | {"inter_class_similarity_pooled": pooled, "intra_inter_ratio": ratio}


def per_class_table(per_class: dict[str, np.ndarray], class_names: list[str]) -> pa.Table:
    """Parquet-ready per-class table: ``label``, ``class``, ``n``, ``intra``, ``inter``."""
    n = len(per_class["n"])
    names = list(class_names) + [str(i) for i in range(len(class_names), n)]
    return pa.table(
        {
            "label": pa.array(np.arange(n), pa.int64()),
            "class": pa.array(names[:n], pa.string()),
            "n": pa.array(per_class["n"], pa.int64()),
            "intra": pa.array(per_class["intra"], pa.float64(), from_pandas=True),
            "inter": pa.array(per_class["inter"], pa.float64(), from_pandas=True),
        }
    )
