"""Verification of candidate pairs by alignment (docs/audit.md, "Verification").

An embedding of one vector per image tells images apart by what they show; a copy is told apart
from another picture of the same thing by its own pixels. Each candidate pair (a query and one
of its ``audit.verification.candidates`` nearest targets by embedding) is scored by the
normalised cross-correlation of the two images' high-pass residuals, aligned: each image in turn
is enlarged by every scale of ``scales`` (a crop of a fraction f of the side, enlarged back, is
the original enlarged by 1/f), and the central ``template`` part of the other is slid over it to
its best place. The score is the best correlation over scales, places and the two directions;
colour gains and a re-encoding change it little (each image is one grey channel, standardised
where it is compared), another picture of the same scene or class gives a low one.

Torch only (FFT correlation, batched); imported by the jobs, never by the plans.
"""

from __future__ import annotations

import numpy as np

#: Grey levels of R, G, B (ITU-R BT.601).
GREY = (0.299, 0.587, 0.114)


def grey(images, side: int):
    """uint8 N x C x H x W -> float32 N x side x side grey images (antialiased resize)."""
    import torch
    import torch.nn.functional as F

    x = images.float() / 255.0
    if x.shape[1] == 3:
        x = torch.einsum("nchw,c->nhw", x, torch.tensor(GREY))[:, None]
    elif x.shape[1] != 1:
        x = x.mean(dim=1, keepdim=True)
    if x.shape[-2:] != (side, side):
        x = F.interpolate(x, size=(side, side), mode="bilinear", antialias=True)
    return x[:, 0].contiguous()


def _gaussian(x, sigma: float):
    """``x`` (N x H x W) blurred by a Gaussian of ``sigma`` pixels (edges replicated)."""
    import torch
    import torch.nn.functional as F

    radius = max(1, round(3 * sigma))
    t = torch.arange(-radius, radius + 1, dtype=torch.float32)
    kernel = torch.exp(-(t**2) / (2 * sigma**2))
    kernel = kernel / kernel.sum()
    y = x[:, None]
    y = F.conv2d(F.pad(y, (radius, radius, 0, 0), mode="replicate"), kernel.view(1, 1, 1, -1))
    y = F.conv2d(F.pad(y, (0, 0, radius, radius), mode="replicate"), kernel.view(1, 1, -1, 1))
    return y[:, 0]


def band(x, smooth: float, coarse: float):
    """The band of ``x`` (N x H x W) compared: blurred by ``smooth`` pixels (pixel noise and a
    re-encoding's blocks left out; 0: none), less its blur by ``coarse`` pixels (the lighting
    left out; 0: none)."""
    y = _gaussian(x, smooth) if smooth > 0 else x
    return y - _gaussian(x, coarse) if coarse > 0 else y


def _match(template, image):
    """Best normalised cross-correlation of each ``template`` (N x m x m) over every place
    inside ``image`` (N x n x n, n >= m): N floats."""
    import torch

    n, m = image.shape[-1], template.shape[-1]
    t = template - template.mean(dim=(1, 2), keepdim=True)
    t = t / (t.norm(dim=(1, 2), keepdim=True) + 1e-8)
    size = (n, n)
    spectrum = torch.fft.rfft2(image, s=size) * torch.conj(torch.fft.rfft2(t, s=size))
    numerator = torch.fft.irfft2(spectrum, s=size)[:, : n - m + 1, : n - m + 1]
    # window sums of x and x^2 from integral images
    pad = torch.nn.functional.pad
    c1 = pad(image.cumsum(1).cumsum(2), (1, 0, 1, 0))
    c2 = pad((image**2).cumsum(1).cumsum(2), (1, 0, 1, 0))

    def window(c):
        return c[:, m:, m:] - c[:, :-m, m:] - c[:, m:, :-m] + c[:, :-m, :-m]

    s1, s2 = window(c1), window(c2)
    variance = (s2 - s1**2 / (m * m)).clamp_min(0)
    ncc = numerator / (variance.sqrt() + 1e-6)
    # places whose window is flat (no texture) say nothing
    ncc = torch.where(variance > 1e-6 * m * m, ncc, torch.zeros_like(ncc))
    return ncc.flatten(1).max(dim=1).values


def _enlarged(x, scale: float):
    import torch.nn.functional as F

    side = x.shape[-1]
    big = max(side, round(side * scale))
    if big == side:
        return x
    return F.interpolate(x[:, None], size=(big, big), mode="bilinear", align_corners=False)[:, 0]


def scores(
    a, b, scales, template: float, smooth: float, coarse: float, batch: int = 256
) -> np.ndarray:
    """Alignment score of each pair (``a[i]``, ``b[i]``): grey images N x s x s (:func:`grey`),
    module docstring. ``scales``: the enlargements tried (1 first); ``template``: the fraction
    of the side compared; ``smooth``, ``coarse``: the band compared (:func:`band`)."""
    import torch

    out = np.zeros(len(a), dtype=np.float32)
    side = a.shape[-1]
    m = max(4, round(side * template))
    lo = (side - m) // 2
    with torch.no_grad():
        for start in range(0, len(a), batch):
            x, y = a[start : start + batch], b[start : start + batch]
            best = torch.full((len(x),), -1.0)
            for scale in scales:
                for first, second in ((x, y), (y, x)):
                    moved = band(_enlarged(second, scale), smooth, coarse)
                    fixed = band(first, smooth, coarse)[:, lo : lo + m, lo : lo + m]
                    best = torch.maximum(best, _match(fixed, moved))
            out[start : start + len(x)] = best.numpy()
    return out


def scale_grid(max_scale: float, step: float) -> list[float]:
    """The enlargements tried: 1, 1 + step, ... up to ``max_scale``."""
    n = int(np.floor((max_scale - 1.0) / step + 1e-9))
    return [round(1.0 + i * step, 6) for i in range(n + 1)]


def pair_scores(a, b, v: dict) -> np.ndarray:
    """:func:`scores` with the settings ``v`` (``audit.verification``)."""
    return scores(
        a,
        b,
        scale_grid(v["max_scale"], v["scale_step"]),
        v["template_fraction"],
        v["smooth"],
        v["coarse"],
    )


def images(dataset, keys, side: int):
    """Grey images (:func:`grey`, ``side`` px) of ``keys`` of a ManifestDataset, in order: the
    search decodes only the candidates it verifies."""
    import torch

    index = {k: i for i, k in enumerate(dataset.keys)}
    out = torch.zeros((len(keys), side, side), dtype=torch.float32)
    for start in range(0, len(keys), 256):
        chunk = [dataset[index[k]][0] for k in keys[start : start + 256]]
        out[start : start + len(chunk)] = grey_list(chunk, side)
    return out


def thumbnails(tensors, side: int) -> np.ndarray:
    """Each uint8 C x H x W tensor as a colour-normalised thumbnail: resized to ``side`` px
    (antialiased), three channels (a grey image repeated), each channel less its mean and the
    whole scaled to unit norm; N x (3 side^2) float32. A copy whose channels were each scaled
    by a gain, re-encoded or resized keeps nearly the same thumbnail whatever an encoder makes
    of it: the inner product of two finds such copies (:func:`candidate_rows`)."""
    import torch.nn.functional as F

    out = np.zeros((len(tensors), 3 * side * side), dtype=np.float32)
    for i, t in enumerate(tensors):
        x = t[None].float()
        x = x.expand(1, 3, *x.shape[-2:]) if x.shape[1] == 1 else x[:, :3]
        x = F.interpolate(x, size=(side, side), mode="bilinear", antialias=True)[0]
        x = x - x.mean(dim=(1, 2), keepdim=True)
        out[i] = (x / (x.norm() + 1e-6)).flatten().numpy()
    return out


def candidate_rows(queries, targets, query_thumbs, target_thumbs, v: dict, block: int, skip=None):
    """Each query's candidate target rows (N x k, -1: none): its ``v["candidates"]`` nearest
    targets by embedding, then its ``v["pixel_candidates"]`` nearest by :func:`thumbnails` not
    already among them. ``skip``: per query, a target row left out (the query itself, when
    queries and targets are one set), or None."""
    from imagenot.audit import search as exact

    extra = 1 if skip is not None else 0
    kinds = [(queries, targets, v["candidates"])]
    if v["pixel_candidates"]:
        kinds.append((query_thumbs, target_thumbs, v["pixel_candidates"]))
    parts = []
    for q, t, k in kinds:
        _, rows = exact.nearest_k(q, t, block, min(k + extra, max(len(t), 1)))
        if skip is not None:
            rows = np.where(rows == np.asarray(skip)[:, None], -1, rows)
        parts.append(rows)
    rows = np.concatenate(parts, axis=1)
    for i, r in enumerate(rows):  # each target once per query, the first place kept
        _, first = np.unique(r, return_index=True)
        keep = np.zeros(len(r), dtype=bool)
        keep[first] = True
        rows[i] = np.where(keep, r, -1)
    return rows


def grey_list(tensors, side: int):
    """:func:`grey` of uint8 C x H x W tensors of any sizes."""
    import torch

    return torch.cat([grey(t[None], side) for t in tensors]) if tensors else torch.zeros(0)


def best_candidates(query, target, rows: np.ndarray, v: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each query's best candidate by alignment: ``query`` grey images N x s x s, ``target`` a
    function of target rows -> their grey images, ``rows`` N x k candidate rows (-1: none).
    Returns (score float32 N, column of ``rows`` chosen int64 N); a query without candidates
    scores -inf."""
    n, k = rows.shape
    score = np.full((n, k), -np.inf, dtype=np.float32)
    qi, ci = np.nonzero(rows >= 0)
    if len(qi):
        wanted = np.unique(rows[qi, ci])
        found = target(wanted)
        where = np.searchsorted(wanted, rows[qi, ci])
        score[qi, ci] = pair_scores(query[qi], found[where], v)
    column = score.argmax(axis=1) if k else np.zeros(n, dtype=np.int64)
    return score[np.arange(n), column], column


def choose_threshold(
    positives: np.ndarray,
    negatives: np.ndarray,
    copy_rate: float,
    min_precision: float,
    min_pairs: int,
) -> dict:
    """The verification threshold (docs/audit.md, "Verification"): the lowest copy score at
    which the flags' precision, with copies making ``copy_rate`` of the compared images, is at
    least ``min_precision``. The share of distinct images flagged at a threshold t is modelled
    from the ``negatives`` (each held-apart image's best candidate among distinct images):
    their Fisher-transformed scores as normal, centre their median and spread their median
    absolute deviation (robust to the few copies a split of web images may hold among its
    "distinct" pairs), F(t) its upper tail; recall R(t) is the share of ``positives`` at or
    above t; precision = copy_rate R / (copy_rate R + (1 - copy_rate) F). ValueError for too
    few pairs or no threshold reaching the precision."""
    from scipy.stats import norm

    from imagenot.audit.calibrate import enough_pairs

    positives, negatives = enough_pairs(
        positives, negatives, min_pairs, "verification calibration", "distinct image(s)"
    )
    z = np.arctanh(np.clip(negatives, -0.999999, 0.999999))
    centre = float(np.median(z))
    spread = float(1.4826 * np.median(np.abs(z - centre))) or float(z.std()) or 1e-6
    cuts = np.unique(positives)
    recall = np.array([(positives >= t).mean() for t in cuts])
    false = norm.sf((np.arctanh(np.clip(cuts, -0.999999, 0.999999)) - centre) / spread)
    precision = copy_rate * recall / (copy_rate * recall + (1 - copy_rate) * false)
    ok = np.flatnonzero(precision >= min_precision)
    if ok.size == 0:
        raise ValueError(
            f"no verification threshold reaches precision {min_precision} at copy rate "
            f"{copy_rate} (best {precision.max():.3f}): copies and distinct images score alike"
        )
    best = ok[0]  # the lowest such threshold: the most recall
    t = float(cuts[best])
    return {
        "threshold": t,
        "precision": float(precision[best]),
        "recall": float(recall[best]),
        "false_flag_rate": float(false[best]),
        "distinct_at_or_above": int((negatives >= t).sum()),
        "copy_rate": float(copy_rate),
        "min_precision": float(min_precision),
        "copy_pairs": len(positives),
        "distinct_pairs": len(negatives),
        "distinct_median": float(np.tanh(centre)),
    }
