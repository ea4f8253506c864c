"""Diagnostics figures (matplotlib, Agg): each function takes tables, returns a Figure."""

from __future__ import annotations

import os

import numpy as np

from imagenot.diagnostics.files import FigureFiles
from imagenot.io import read_parquet


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, pdf: str | os.PathLike, png: str | os.PathLike) -> None:
    """Write ``fig`` atomically as PDF (TrueType fonts: :func:`imagenot.figures.style.write_pdf`)
    and PNG (metadata stripped for stable bytes)."""
    from imagenot.figures.style import write_pdf
    from imagenot.io import atomic_path

    write_pdf(fig, pdf, {"Producer": None})
    with atomic_path(png, ".png") as tmp:
        fig.savefig(tmp, format="png", dpi=150, metadata={"Software": None})
    _plt().close(fig)


def _per_label(labels: list[str], paths: list[str], role: str) -> dict[str, str]:
    """``{label: path}``: one file of ``role`` per label, in order (else an error saying so)."""
    if len(paths) != len(labels):
        raise ValueError(
            f"--{role.replace('_', '-')}: {len(paths)} file(s) for {len(labels)} label(s) "
            f"({' '.join(labels)}); one per label"
        )
    return dict(zip(labels, paths, strict=True))


def draw_wordnet_figure(name: str, labels: list[str], files: FigureFiles, reference_name: str):
    """``class_depth`` / ``siblings``: one per-class WordNet table per subject (its ``classes``
    rows; the first table's ``reference`` rows are the reference list)."""
    import pyarrow.compute as pc

    column = "depth" if name == "class_depth" else "n_siblings"
    series, reference = {}, None
    for label, path in _per_label(labels, files.tables, "tables").items():
        t = read_parquet(path, columns=["role", column])
        series[label] = t.filter(pc.equal(t["role"], "classes"))[column].to_numpy()
        if reference is None:
            ref = t.filter(pc.equal(t["role"], "reference"))[column].to_numpy()
            reference = (reference_name, ref)
    series = with_reference(series, reference)
    return (class_depth_figure if name == "class_depth" else siblings_figure)(series)


def draw_caption_figure(name: str, labels: list[str], files: FigureFiles, reference_name: str):
    """``caption_similarity``: one curation (classes and selection) per dataset."""
    from imagenot.diagnostics.captions import read_curation

    classes = _per_label(labels, files.classes, "classes")
    selection = _per_label(labels, files.selection, "selection")
    return caption_similarity_figure({k: read_curation(classes[k], selection[k]) for k in labels})


def draw_image_figure(name: str, labels: list[str], files: FigureFiles, reference_name: str):
    """``image_similarity``: one per-class image-similarity table per dataset."""

    tables = {}
    for label, path in _per_label(labels, files.tables, "tables").items():
        t = read_parquet(path)
        tables[label] = {
            k: np.asarray(t[k].to_numpy(zero_copy_only=False), dtype=float)
            for k in ("intra", "inter")
        }
    return image_similarity_figure(tables)


def with_reference(series: dict[str, np.ndarray], reference: tuple[str, np.ndarray] | None):
    """Series in display order: the subjects, then the reference (if any)."""
    out = dict(series)
    if reference is not None:
        out[reference[0]] = reference[1]
    return out


def class_depth_figure(series: dict[str, np.ndarray]):
    """Grouped bars: fraction of classes at each WordNet depth, one bar per list."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    all_depths = np.concatenate([np.asarray(v, dtype=int) for v in series.values()])
    depths = np.arange(all_depths.min(), all_depths.max() + 1) if all_depths.size else np.arange(1)
    width = 0.8 / max(len(series), 1)
    for i, (label, values) in enumerate(series.items()):
        values = np.asarray(values, dtype=int)
        counts = np.bincount(values - depths[0], minlength=len(depths))[: len(depths)]
        fraction = counts / max(values.size, 1)
        ax.bar(
            depths + (i - (len(series) - 1) / 2) * width,
            fraction,
            width,
            label=f"{label} (n={values.size})",
        )
    ax.set_xlabel("class depth in WordNet (shortest path to entity.n.01)")
    ax.set_ylabel("fraction of classes")
    ax.set_xticks(depths)
    ax.legend()
    return fig


def siblings_figure(series: dict[str, np.ndarray]):
    """Side-by-side box plots of the number of WordNet siblings per class (log scale)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(series) + 2), 4), layout="constrained")
    data = [np.asarray(v, dtype=float) + 1 for v in series.values()]
    ax.boxplot(
        data,
        tick_labels=[
            f"{k}\n(median {np.median(v) - 1:.0f})" for k, v in zip(series, data, strict=True)
        ],
    )
    ax.set_yscale("log")
    ax.set_ylabel("WordNet siblings per class + 1")
    return fig


def grouped_quantiles(groups: np.ndarray, values: np.ndarray, qs=(0.0, 0.25, 0.5, 0.75, 1.0)):
    """(group ids, quantiles array G x len(qs)) of ``values`` per group, vectorised.

    Uses the lower-index quantile (no interpolation) of each group's sorted values.
    """
    groups = np.asarray(groups).astype(str)
    values = np.asarray(values, dtype=np.float64)
    ids, inverse = np.unique(groups, return_inverse=True)
    order = np.lexsort((values, inverse))
    counts = np.bincount(inverse, minlength=len(ids))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sorted_values = values[order]
    out = np.empty((len(ids), len(qs)))
    for j, q in enumerate(qs):
        out[:, j] = sorted_values[starts + np.floor(q * (counts - 1)).astype(int)]
    return ids, out


def caption_similarity_figure(curations: dict[str, tuple[dict, dict]]):
    """Left: per-class caption similarity distributions (classes sorted by score: min-max band,
    quartile band, median); right: histogram of class scores with min/mean/median/max."""
    plt = _plt()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    for label, (classes, selection) in curations.items():
        ids, quant = grouped_quantiles(selection["wnid"], selection["similarity"])
        score = dict(zip(classes["wnid"].astype(str), classes["score"], strict=True))
        order = np.argsort([-score.get(i, np.nan) for i in ids], kind="stable")
        x = np.linspace(0, 1, len(ids)) if len(ids) > 1 else np.zeros(len(ids))
        q = quant[order]
        (line,) = left.plot(x, q[:, 2], lw=1, label=f"{label} median")
        left.fill_between(x, q[:, 0], q[:, 4], color=line.get_color(), alpha=0.15, lw=0)
        left.fill_between(x, q[:, 1], q[:, 3], color=line.get_color(), alpha=0.3, lw=0)
        s = np.asarray(classes["score"], dtype=float)
        right.hist(
            s,
            bins=30,
            alpha=0.6,
            label=f"{label}: min {s.min():.3f} mean {s.mean():.3f}\nmedian {np.median(s):.3f} max {s.max():.3f}",
        )
    left.set_xlabel("classes, by decreasing class score (fraction)")
    left.set_ylabel("caption-gloss similarity of selected captions")
    left.legend(fontsize="small")
    right.set_xlabel("class score (mean top-n caption-gloss similarity)")
    right.set_ylabel("classes")
    right.legend(fontsize="small")
    return fig


def image_similarity_figure(tables: dict[str, dict[str, np.ndarray]]):
    """Side-by-side box plots of per-class intra- and inter-class image similarity."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 2.2 * len(tables) + 2), 4), layout="constrained")
    data, labels = [], []
    for label, t in tables.items():
        for kind in ("intra", "inter"):
            v = np.asarray(t[kind], dtype=float)
            data.append(v[np.isfinite(v)])
            labels.append(
                f"{label}\n{kind} ({np.nanmean(v):.3f})"
                if np.isfinite(v).any()
                else f"{label}\n{kind}"
            )
    ax.boxplot(data, tick_labels=labels)
    ax.set_ylabel("mean inner product of normalised embeddings")
    ax.set_title("per-class image similarity: within a class (intra) and across classes (inter)")
    return fig
