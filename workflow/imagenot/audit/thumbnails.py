"""The colour-normalised thumbnails of one set (one dataset's split), made once per set by rule
``audit_thumbnails`` and read by every search job that compares the set (docs/audit.md,
"Verification"): the thumbnail search's side of the candidates (``audit.verification.
pixel_candidates``).

A file holds ``keys`` (the set's embeddings file's keys, in their order), ``thumbnails``
(float32, one row of :func:`imagenot.audit.verify.thumbnails` per key) and ``side``; a reader
hands the keys it expects and a file of other keys or another order is refused
(:func:`read_thumbnails`). Torch only in the job that makes them; imported by the jobs, never
by the plans.
"""

from __future__ import annotations

import os

import numpy as np


class _Thumbnail:
    """Map-style: item ``i`` is the thumbnail of ``dataset``'s row ``rows[i]`` (decoded in a
    DataLoader worker)."""

    def __init__(self, dataset, rows, side: int):
        self.dataset, self.rows, self.side = dataset, rows, side

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        from imagenot.audit.verify import thumbnails

        return thumbnails([self.dataset[int(self.rows[i])][0]], self.side)[0]


def make_thumbnails(dataset, keys: list[str], side: int, workers: int, source: str) -> np.ndarray:
    """The thumbnails (N x 3 side^2 float32) of ``keys`` of a ManifestDataset, in the order of
    ``keys``, decoded by ``workers`` DataLoader processes (tqdm progress on stderr). A key the
    manifest lacks is refused, naming ``source`` (the file the keys come from)."""
    from torch.utils.data import DataLoader
    from tqdm import tqdm

    from imagenot.core import job_usage

    index = {k: i for i, k in enumerate(dataset.keys)}
    missing = [k for k in keys if k not in index]
    if missing:
        raise ValueError(
            f"{source}: {len(missing)} key(s) not in split {dataset.split!r} of "
            f"{dataset.dataset_dir} (e.g. {missing[0]!r}); the embeddings are of another set"
        )
    rows = np.asarray([index[k] for k in keys], dtype=np.int64)
    job_usage.declare_workers(workers)  # the job's recorded peak counts them
    loader = DataLoader(
        _Thumbnail(dataset, rows, side), batch_size=256, num_workers=workers, shuffle=False
    )
    out = np.zeros((len(keys), 3 * side * side), dtype=np.float32)
    done = 0
    with tqdm(total=len(keys), desc="thumbnails", unit="img", mininterval=5) as progress:
        for batch in loader:
            out[done : done + len(batch)] = batch.numpy()
            done += len(batch)
            progress.update(len(batch))
    return out


def write_thumbnails(keys, thumbnails: np.ndarray, side: int, path: str | os.PathLike) -> None:
    """Save a set's thumbnails with their keys and side atomically as ``.npz``."""
    from imagenot.core.io import atomic_path

    with atomic_path(path, ".npz") as tmp:
        np.savez(
            tmp,
            keys=np.asarray(keys, dtype=str),
            thumbnails=np.asarray(thumbnails, dtype=np.float32),
            side=np.asarray(side),
        )


def read_thumbnails(path: str | os.PathLike, keys, side: int, embeddings: str) -> np.ndarray:
    """The thumbnails of ``path``, checked: made at ``side`` px for exactly ``keys``, in their
    order (those of ``embeddings``, the set's embeddings file); else ValueError, one line naming
    the file and the first row that differs."""
    from imagenot.core.io import read_npy

    arrays = read_npy(path)
    if not {"keys", "thumbnails", "side"} <= set(arrays):
        raise ValueError(f"{path}: not a thumbnails file (keys, thumbnails, side)")
    if int(arrays["side"]) != side:
        raise ValueError(
            f"{path}: thumbnails of {int(arrays['side'])} px, the settings ask for {side} "
            "(audit.verification.thumbnail_side); rebuild it (rule audit_thumbnails)"
        )
    found, wanted = np.asarray(arrays["keys"], dtype=str), np.asarray(keys, dtype=str)
    if found.shape != wanted.shape or not np.array_equal(found, wanted):
        n = min(len(found), len(wanted))
        differ = np.flatnonzero(found[:n] != wanted[:n])
        at = int(differ[0]) if differ.size else n
        seen = repr(str(found[at])) if at < len(found) else "none"
        expected = repr(str(wanted[at])) if at < len(wanted) else "none"
        raise ValueError(
            f"{path}: {len(found)} key(s), {embeddings} has {len(wanted)}; row {at} is {seen}, "
            f"{expected} there: the thumbnails are not in the embeddings' key order (rebuild "
            "them: rule audit_thumbnails)"
        )
    thumbs = arrays["thumbnails"]
    if thumbs.shape != (len(wanted), 3 * side * side):
        raise ValueError(
            f"{path}: thumbnails of shape {thumbs.shape}, expected {(len(wanted), 3 * side * side)}"
        )
    return np.asarray(thumbs, dtype=np.float32)
