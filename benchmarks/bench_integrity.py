"""Cost of checking each image's sha256 where datasets are read (docs/benchmarks.md).

``ManifestDataset.read_bytes`` compares every image's bytes with the sha256 its manifest
stores, so a shard damaged after it was written is refused naming the shard and the image.
This times, per image and best of ``--repeat`` passes over a written dataset (in the page
cache, as training's second epoch reads it):

- ``read``: the ``pread`` of the JPEG's bytes alone (no check);
- ``read_checked``: ``read_bytes``, the same read plus the sha256 comparison;
- ``decode``: the read plus libjpeg's RGB decode (torchvision), no check;
- ``item``: ``ds[i]``, what training and evaluation do: checked read plus decode;
- ``shard_sha256``: the alternative, a sha256 over each whole shard file, per image.

for each side in ``--sizes`` (64: the demo; 224: the paper's). One thread.

    .venv/bin/python benchmarks/bench_integrity.py --json [--images 2000] [--sizes 64 224]
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from imagenot.acquire.dataset import Record, write_dataset
from imagenot.core.dataset import ManifestDataset, decode_jpeg
from imagenot.core.io import sha256_file


def _jpeg(rng: np.random.Generator, size: int) -> bytes:
    """A JPEG of natural-image-like entropy: smooth noise, quality 90."""
    small = rng.integers(0, 256, (size // 8, size // 8, 3), dtype=np.uint8)
    image = Image.fromarray(small).resize((size, size), Image.BICUBIC)
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _best_us(fn, n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for i in range(n):
            fn(i)
        best = min(best, time.perf_counter() - start)
    return 1e6 * best / n


def measure(size: int, n: int, repeat: int, root: Path) -> dict:
    rng = np.random.default_rng(size)
    out = root / f"ds-{size}"
    records = [Record(f"k{i:06d}", "n0", "train", _jpeg(rng, size)) for i in range(n)]
    write_dataset(out, records, ["n0"], shard_size=1000)
    ds = ManifestDataset(out, "train")
    reader, shards = ds._reader, ds._shards
    offsets, lengths = ds._offsets, ds._lengths

    def raw(i: int) -> bytes:
        return reader.read(shards[i], int(offsets[i]), int(lengths[i]))

    files = sorted({out / s for s in shards})
    shard_s = min(_timed(lambda: [sha256_file(f) for f in files]) for _ in range(repeat))
    row = {
        "side": size,
        "images": n,
        "jpeg_bytes": int(np.mean(lengths)),
        "read_us": _best_us(raw, n, repeat),
        "read_checked_us": _best_us(ds.read_bytes, n, repeat),
        "decode_us": _best_us(lambda i: decode_jpeg(raw(i)), n, repeat),
        "item_us": _best_us(ds.__getitem__, n, repeat),
        "shard_sha256_us": 1e6 * shard_s / n,
    }
    row["check_us"] = row["read_checked_us"] - row["read_us"]
    row["check_share_of_item"] = row["check_us"] / row["item_us"]
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 224])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(size, args.images, args.repeat, Path(tmp)) for size in args.sizes]
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(
                f"{r['side']} px ({r['jpeg_bytes']} B): read {r['read_us']} us, checked "
                f"{r['read_checked_us']} us, item {r['item_us']} us; the check is "
                f"{100 * r['check_share_of_item']:.1f}% of an item"
            )


if __name__ == "__main__":
    main()
