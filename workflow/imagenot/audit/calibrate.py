"""The near-duplicate threshold, calibrated on pairs of known answer (docs/audit.md).

A seeded sample of held-apart images (``audit.calibration``) gives two kinds of pair:

- **copies** (positives): each image against each of its edited copies (:data:`COPIES`:
  re-encoded as JPEG, resized down and up, cropped, colour-shifted, all of these at once);
- **distinct images** (negatives): each image against the most similar *other* image of its
  own class in the sample, the hardest distinct pair the sample holds.

The threshold is the one that flags the most copies while the flagged pairs' precision is at
least ``min_precision`` (set between the lowest flagged score and the next score below it); its
precision and recall on these pairs are stated with it. A sample with too few pairs of either
kind, or in which no threshold reaches ``min_precision``, is refused: the audit then has no
threshold to stand on.
"""

from __future__ import annotations

import numpy as np

from imagenot.audit.copies import COPIES


def _uniform(generator, n: int, low: float, high: float):
    import torch

    return low + (high - low) * torch.rand(n, generator=generator)


def reencode(images, generator):
    """Each image re-encoded as JPEG at a quality drawn from 30-70."""
    import torch
    from torchvision.io import decode_jpeg, encode_jpeg

    qualities = torch.randint(30, 71, (len(images),), generator=generator).tolist()
    return torch.stack(
        [
            decode_jpeg(encode_jpeg(im.contiguous(), quality=q))
            for im, q in zip(images, qualities, strict=True)
        ]
    )


def resize(images, generator):
    """Each image shrunk to 40-75% of its side (antialiased) and enlarged back."""
    import torch.nn.functional as F

    size = images.shape[-2:]
    out = []
    for im, s in zip(images, _uniform(generator, len(images), 0.4, 0.75).tolist(), strict=True):
        small = [max(8, round(d * s)) for d in size]
        x = im[None].float()
        x = F.interpolate(x, size=small, mode="bilinear", antialias=True, align_corners=False)
        x = F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=False)
        out.append(x[0].round().clamp(0, 255).byte())
    import torch

    return torch.stack(out)


def crop(images, generator):
    """A crop of 75-90% of each side, at a random place, enlarged back to the image's size."""
    import torch
    import torch.nn.functional as F

    h, w = images.shape[-2:]
    out = []
    fractions = _uniform(generator, len(images), 0.75, 0.9).tolist()
    places = torch.rand(len(images), 2, generator=generator).tolist()
    for im, f, (py, px) in zip(images, fractions, places, strict=True):
        ch, cw = max(4, round(h * f)), max(4, round(w * f))
        y, x0 = int(py * (h - ch)), int(px * (w - cw))
        x = im[None, :, y : y + ch, x0 : x0 + cw].float()
        x = F.interpolate(x, size=(h, w), mode="bilinear", antialias=True, align_corners=False)
        out.append(x[0].round().clamp(0, 255).byte())
    return torch.stack(out)


def colour(images, generator):
    """Brightness, contrast and saturation each scaled by 0.7-1.3, hue turned by up to 0.05."""
    import torch
    from torchvision.transforms.v2 import functional as TF

    n = len(images)
    factors = [_uniform(generator, n, 0.7, 1.3).tolist() for _ in range(3)]
    hues = _uniform(generator, n, -0.05, 0.05).tolist()
    out = []
    for i, im in enumerate(images):
        x = TF.adjust_brightness(im, factors[0][i])
        x = TF.adjust_contrast(x, factors[1][i])
        x = TF.adjust_saturation(x, factors[2][i])
        out.append(TF.adjust_hue(x, hues[i]))
    return torch.stack(out)


def combined(images, generator):
    """Crop, colour shift and JPEG re-encoding, one after the other."""
    return reencode(colour(crop(images, generator), generator), generator)


def make_copies(images, names: list[str], seed: int) -> dict:
    """``{name: edited copies of images}`` for each copy kind of ``names`` (:data:`COPIES`),
    drawn from a generator seeded with ``seed`` (the same seed, the same copies)."""
    import torch

    from imagenot.core.registries import resolve

    generator = torch.Generator().manual_seed(int(seed))
    return {name: resolve(COPIES.entry(name))(images, generator) for name in names}


def sample(labels: np.ndarray, n_images: int, seed: int) -> np.ndarray:
    """Row indices of a seeded sample of at most ``n_images`` images, two or more from each
    class drawn (a negative pair needs two distinct images of a class), sorted."""
    labels = np.asarray(labels, dtype=np.int64)
    rng = np.random.default_rng(int(seed))
    per_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    per_class = [rows for rows in per_class if len(rows) >= 2]
    if not per_class:
        return np.zeros(0, dtype=np.int64)
    order = rng.permutation(len(per_class))
    take = max(2, n_images // len(per_class))
    chosen: list[int] = []
    for c in order:
        if len(chosen) + 2 > n_images:
            break
        rows = per_class[c]
        chosen += rng.choice(
            rows, size=min(take, len(rows), n_images - len(chosen)), replace=False
        ).tolist()
    return np.sort(np.asarray(chosen, dtype=np.int64))


def pair_scores(
    originals: np.ndarray, copies: dict[str, np.ndarray], labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(positive scores, negative scores): cosine similarity of each original with each of its
    copies; of each original with the most similar other original of its class (none for an
    image alone in its class)."""
    from imagenot.audit.search import normalise

    x = normalise(originals)
    positives = [np.einsum("ij,ij->i", x, normalise(c)) for c in copies.values()]
    labels = np.asarray(labels)
    sims = x @ x.T
    same = (labels[:, None] == labels[None, :]) & ~np.eye(len(labels), dtype=bool)
    sims = np.where(same, sims, -np.inf)
    best = sims.max(axis=1) if len(labels) else np.zeros(0)
    negatives = best[np.isfinite(best)]
    pos = np.concatenate(positives) if positives else np.zeros(0)
    return pos.astype(np.float64), negatives.astype(np.float64)


def enough_pairs(positives, negatives, min_pairs: int, what: str, distinct: str) -> tuple:
    """``positives`` and ``negatives`` as float arrays; ValueError naming ``what`` when either
    has fewer than ``min_pairs`` (audit.calibration.min_pairs)."""
    positives = np.asarray(positives, dtype=np.float64)
    negatives = np.asarray(negatives, dtype=np.float64)
    if len(positives) < min_pairs or len(negatives) < min_pairs:
        raise ValueError(
            f"{what} has {len(positives)} copy pair(s) and {len(negatives)} "
            f"{distinct}; audit.calibration.min_pairs asks for {min_pairs} of each"
        )
    return positives, negatives


def choose_threshold(
    positives: np.ndarray, negatives: np.ndarray, min_precision: float, min_pairs: int
) -> dict:
    """The threshold flagging the most positives at precision >= ``min_precision`` (module
    docstring), with its precision and recall on these pairs; ValueError for a degenerate set."""
    positives, negatives = enough_pairs(
        positives, negatives, min_pairs, "calibration set", "distinct pair(s)"
    )
    scores = np.concatenate([positives, negatives])
    if np.ptp(scores) == 0:
        raise ValueError("calibration set's pairs all score the same: no threshold separates them")
    truth = np.concatenate([np.ones(len(positives), bool), np.zeros(len(negatives), bool)])
    order = np.argsort(-scores, kind="stable")
    scores, truth = scores[order], truth[order]
    tp = np.cumsum(truth)
    flagged = np.arange(1, len(scores) + 1)
    # a cut only between distinct scores (tied pairs fall on one side together)
    cuts = np.flatnonzero(np.r_[scores[1:] < scores[:-1], True])
    precision, recall = tp[cuts] / flagged[cuts], tp[cuts] / len(positives)
    ok = np.flatnonzero(precision >= min_precision)
    if ok.size == 0:
        raise ValueError(
            f"no threshold reaches precision {min_precision} on the calibration pairs "
            f"(best {precision.max():.3f}): the encoder does not tell copies from distinct "
            "images of one class"
        )
    best = ok[np.argmax(recall[ok])]  # the first such cut: fewest flagged at that recall
    k = cuts[best]
    below = scores[k + 1] if k + 1 < len(scores) else scores[k] - 1e-6
    return {
        "threshold": float((scores[k] + below) / 2),
        "precision": float(precision[best]),
        "recall": float(recall[best]),
        "copy_pairs": len(positives),
        "distinct_pairs": len(negatives),
        "min_precision": float(min_precision),
    }


def recall_by_copy(copies: dict[str, np.ndarray], originals: np.ndarray, threshold: float) -> dict:
    """Per copy kind, the share of its pairs at or above ``threshold``."""
    from imagenot.audit.search import normalise

    x = normalise(originals)
    return {
        name: float((np.einsum("ij,ij->i", x, normalise(c)) >= threshold).mean())
        for name, c in copies.items()
    }
