"""Training-input throughput of our shards vs torchvision ImageFolder + PIL, and loopback download.

Generates N synthetic JPEGs at the demo resolution, stores them both as an ImageFolder tree and
as one of our datasets, then reads every image once on one core (no DataLoader workers) into a
uint8 CHW tensor, as training does. Prints one JSON object with ``--json``.

    .venv/bin/python benchmarks/bench_loader.py --json [--n 4000] [--size 64] [--download 400]

``--feed`` measures the training feed instead, as a training job builds it
(``imagenot.train.feed.Feeder``: persistent workers, prefetch, each batch decoded into a slot of
the feeder's shared-memory ring, then ``preprocess`` on the CPU device): images/s, images/s per
worker core, the most file descriptors the job's processes held at once, and the decode floor
(the same images decoded on one core in this process, no loader) in the same run. Per-core
figures need a core per worker besides the main process's, and epochs of >= 32 batches (shorter
ones measure the pipeline's fill and drain; docs/gpu.md):

    .venv/bin/python benchmarks/bench_loader.py --feed --workers 1 --batch-size 256 --size 224 --n 8192 --json

torch and the modules that load it are imported inside the functions that use them: the
download's processes (spawned, so each runs this module again) import no torch
(:mod:`imagenot.acquire.fetch`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from imagenot.acquire.dataset import Record, write_dataset
from imagenot.core.dataset import ManifestDataset


def _images(n: int, size: int, seed: int = 0) -> list[bytes]:
    from imagenot.train.feed_bench import smooth_jpegs

    return smooth_jpegs(n, size, seed)


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_read(root: Path, jpegs: list[bytes], n_classes: int = 10) -> dict:
    import torch
    from torchvision.datasets import ImageFolder
    from torchvision.transforms import PILToTensor

    classes = [f"c{i:02d}" for i in range(n_classes)]
    for i, data in enumerate(jpegs):
        d = root / "folder" / classes[i % n_classes]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:06d}.jpg").write_bytes(data)
    records = [Record(f"k{i:06d}", classes[i % n_classes], "train", d) for i, d in enumerate(jpegs)]
    write_dataset(root / "ours", records, classes, shard_size=5000)

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
    import dataclasses

    from imagenot.acquire.download import download_part
    from imagenot.acquire.files import DownloadFiles
    from imagenot.acquire.settings import DownloadSettings
    from imagenot.core.config import validate_config

    www = root / "www"
    config = validate_config({})  # the schema's defaults, then what this benchmark sets
    settings = dataclasses.replace(
        DownloadSettings.from_config(config),
        **{
            "download_parts": 1,
            "threads_per_process": threads,
            "url_map": {"http://bench.invalid/": str(www)},
            "images_per_download_shard": 10000,
            "image_size": size,
            "retries": 0,
            "min_success_rate": 0.0,
            "max_unreachable_fraction": None,
        },
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
            DownloadFiles(root / "sel.parquet", root / "part.parquet", root / "part.tar"),
            settings,
            part=0,
            work_dir=root / "work",
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


def _open_fds(pids: list[int]) -> int:
    """File descriptors held by these processes now (Linux /proc)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):  # a worker that just ended
            total += len(os.listdir(f"/proc/{pid}/fd"))
    return total


def bench_feed(
    root: Path, jpegs: list[bytes], workers: int, batch_size: int, encoded: bool
) -> dict:
    """The training feed over one of our datasets (module docstring)."""
    import threading

    import psutil
    import torch

    from imagenot.core.config import schema_default
    from imagenot.train.feed import EncodedImages, Feeder, decode_batch, preprocess

    classes = [f"c{i:02d}" for i in range(10)]
    records = [Record(f"k{i:06d}", classes[i % 10], "train", d) for i, d in enumerate(jpegs)]
    write_dataset(root / "feed", records, classes, shard_size=5000)
    plain = ManifestDataset(root / "feed", "train")
    size = int(plain[0][0].shape[-1])
    torch.set_num_threads(1)
    # the decode floor: every image decoded once on one core, no loader
    for i in range(min(len(plain), 64)):
        plain[i]
    floor_s = min(_time(lambda: [plain[i] for i in range(len(plain))]) for _ in range(2))

    data = EncodedImages(plain) if encoded else plain
    feeder = Feeder(data, workers, batch_size)
    order = torch.arange(len(plain))
    pieces = list(order.split(batch_size))
    me = psutil.Process()
    peak = {"fds": 0}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            pids = [me.pid, *(c.pid for c in me.children(recursive=True))]
            peak["fds"] = max(peak["fds"], _open_fds(pids))
            time.sleep(0.05)

    def one_epoch() -> None:
        for images, _ in feeder.epoch(pieces):
            if encoded:
                images = decode_batch(images, size, "cpu")
            preprocess(
                images,
                size,
                {k: schema_default(f"train.normalisation.{k}") for k in ("mean", "std")},
            )

    one_epoch()  # start the persistent workers, warm the page cache
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    seconds = min(_time(one_epoch) for _ in range(2))
    stop.set()
    watcher.join()
    n = len(plain)
    cores = max(workers, 1)
    per_core = n / seconds / cores
    floor = n / floor_s
    return {
        "feed": "encoded (decode after the queue)" if encoded else "decoded in workers",
        "images": n,
        "workers": workers,
        "batch_size": batch_size,
        "img_per_s": round(n / seconds, 1),
        "img_per_s_per_core": round(per_core, 1),
        "decode_floor_img_per_s_per_core": round(floor, 1),
        "feed_to_floor_per_core": round(per_core / floor, 3),
        "max_open_fds": peak["fds"],
        "fd_soft_limit": __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)[0],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--n", type=int, default=4000, help="images for the loader benchmark")
    p.add_argument("--size", type=int, default=64, help="image side (demo resolution)")
    p.add_argument("--download", type=int, default=400, help="images to download (0 = skip)")
    p.add_argument("--threads", type=int, default=16, help="download threads")
    p.add_argument("--feed", action="store_true", help="measure the training feed (docstring)")
    p.add_argument("--workers", type=int, default=2, help="--feed: DataLoader workers")
    p.add_argument("--batch-size", type=int, default=256, help="--feed: images per batch")
    p.add_argument(
        "--encoded", action="store_true", help="--feed: workers read bytes (decode_on_gpu path)"
    )
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        result = {"size": args.size, "cpu_count": os.cpu_count()}
        if args.feed:
            jpegs = _images(args.n, args.size)
            result.update(bench_feed(root, jpegs, args.workers, args.batch_size, args.encoded))
            print(json.dumps(result, sort_keys=True) if args.json else result)
            return
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
