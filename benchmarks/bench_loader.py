"""Training-input throughput of our shards vs torchvision ImageFolder + PIL, and loopback download.

Generates N synthetic JPEGs at the demo resolution, stores them both as an ImageFolder tree and
as one of our datasets, then reads every image once on one core (no DataLoader workers) into a
uint8 CHW tensor, as training does. Prints one JSON object with ``--json``.

    python benchmarks/bench_loader.py --json [--n 4000] [--size 64] [--download 400]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from PIL import Image

from imagenot.acquire.dataset import ManifestDataset, Record, write_dataset


def _images(n: int, size: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    yy, xx = np.mgrid[0:size, 0:size] / size
    for _ in range(n):
        a, b, c = rng.uniform(0, 6, 3)
        base = np.stack([np.sin(a * xx + b * yy + c + k) for k in range(3)], -1)
        arr = ((base * 0.4 + 0.5) * 255 + rng.normal(0, 12, base.shape)).clip(0, 255)
        buf = io.BytesIO()
        Image.fromarray(arr.astype(np.uint8)).save(buf, format="JPEG", quality=95)
        out.append(buf.getvalue())
    return out


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_read(root: Path, jpegs: list[bytes], n_classes: int = 10) -> dict:
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import PILToTensor

    classes = [f"c{i:02d}" for i in range(n_classes)]
    for i, data in enumerate(jpegs):
        d = root / "folder" / classes[i % n_classes]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:06d}.jpg").write_bytes(data)
    records = [Record(f"k{i:06d}", classes[i % n_classes], "train", d) for i, d in enumerate(jpegs)]
    write_dataset(root / "ours", records, classes)

    torch.set_num_threads(1)
    ours = ManifestDataset(root / "ours", "train")
    folder = ImageFolder(str(root / "folder"), transform=PILToTensor())

    def read_all(ds):
        for i in range(len(ds)):
            image, _ = ds[i]
            assert image.dtype == torch.uint8

    read_all(ours), read_all(folder)  # warm the page cache and imports
    t_ours = min(_time(lambda: read_all(ours)) for _ in range(3))
    t_folder = min(_time(lambda: read_all(folder)) for _ in range(3))
    n = len(jpegs)
    return {
        "images": n,
        "images_per_s_per_core": round(n / t_ours, 1),
        "imagefolder_images_per_s_per_core": round(n / t_folder, 1),
        "speedup_vs_imagefolder": round(t_folder / t_ours, 2),
    }


def bench_download(root: Path, jpegs: list[bytes], size: int, threads: int) -> dict:
    from imagenot.acquire import plan
    from imagenot.acquire.download import download_part
    from imagenot.acquire.settings import DownloadSettings
    from imagenot.config import validate_config

    www = root / "www"
    config: dict = {}
    validate_config(config)  # the schema's defaults, then what this benchmark sets
    settings = DownloadSettings(
        **{
            **plan.download_settings(config),
            "threads_per_process": threads,
            "url_map": {"http://bench.invalid/": str(www)},
            "shard_size": 10000,
            "image_size": size,
            "retries": 0,
            "min_success_rate": 0.0,
            "max_unreachable": None,
        }
    )

    www.mkdir()
    for i, data in enumerate(jpegs):
        (www / f"{i}.jpg").write_bytes(data)
    sel = pa.table(
        {
            "key": [f"s-{i:09d}" for i in range(len(jpegs))],
            "URL": [f"http://bench.invalid/{i}.jpg" for i in range(len(jpegs))],
            "TEXT": [""] * len(jpegs),
            "wnid": ["n0"] * len(jpegs),
            "similarity": pa.array([0.5] * len(jpegs), pa.float32()),
        }
    )
    pq.write_table(sel, root / "sel.parquet")
    t = _time(
        lambda: download_part(
            root / "sel.parquet",
            0,
            1,
            root / "work",
            root / "part.tar",
            root / "part.parquet",
            settings=settings,
            processes=1,
        )
    )
    ok = pq.read_table(root / "part.parquet")["reason"].to_pylist().count("success")
    return {
        "download_images": len(jpegs),
        "download_success": ok,
        "download_images_per_s": round(len(jpegs) / t, 1),
        "download_threads": threads,
        "download_note": "loopback, img2dataset fetch + decode-once validation, incl. start-up",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--n", type=int, default=4000, help="images for the loader benchmark")
    p.add_argument("--size", type=int, default=64, help="image side (demo resolution)")
    p.add_argument("--download", type=int, default=400, help="images to download (0 = skip)")
    p.add_argument("--threads", type=int, default=16, help="download threads")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        result = {"size": args.size, "cpu_count": os.cpu_count()}
        result.update(bench_read(root, _images(args.n, args.size)))
        if args.download:
            result.update(
                bench_download(root, _images(args.download, 256, 1), args.size, args.threads)
            )
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
