"""Cost of evaluating published weights on the original files (docs/contracts.md, `originals/`).

A dataset that published weights are evaluated on keeps its test images' original files beside
the stored 480 px copy, and the evaluation of published weights decodes each original with
Pillow and applies the weight's resize and centre crop to it (torchvision's protocol: the input
its published accuracies were measured on) instead of the tensor protocol on the copy. This
materialises an ILSVRC-2012 folder of photos as the reference dataset is (480 px copies at JPEG
quality 95, originals kept; ``imagenot.acquire.materialise``) and times, per test image, best of
``--repeat`` passes over the split (files in the page cache, one thread):

- ``original_ms``: ``ManifestDataset(..., originals=True)`` with the weight's Pillow geometry:
  read, Pillow decode, resize and crop of the original;
- ``copy_ms``: ``ManifestDataset`` of the copy, then the weight's tensor geometry: read, decode
  and the same protocol on the 480 px copy;

and the bytes per image of each. The photos: the JPEG samples the venv ships (scikit-learn's two,
matplotlib's Grace Hopper) and ``--generated`` smooth scenes with noise, of the odd sizes photos
have (landscape and portrait, 250 to 1023 px a side). The correctness of the two inputs
(the originals give torchvision's input exactly) is tests/test_reference_input.py's.

    .venv/bin/python benchmarks/bench_reference_input.py --json [--generated 30] [--repeat 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import torch
from PIL import Image

from imagenot.acquire import materialise as range_job
from imagenot.acquire.settings import MaterialiseSettings
from imagenot.core.config import validate_config
from imagenot.core.dataset import ManifestDataset
from imagenot.train.facts import weight_facts

WNIDS = ("n01440764", "n01443537")
SIZES = ((500, 375), (375, 500), (1023, 681), (391, 269), (817, 613), (250, 333))


def shipped_photos() -> list[bytes]:
    """JPEG photos the venv ships (scikit-learn's sample images, matplotlib's Grace Hopper)."""
    found = []
    for module, rel in (
        ("sklearn", "datasets/images/china.jpg"),
        ("sklearn", "datasets/images/flower.jpg"),
        ("matplotlib", "mpl-data/sample_data/grace_hopper.jpg"),
    ):
        try:
            path = Path(__import__(module).__file__).parent / rel
        except ImportError:
            continue
        if path.is_file():
            found.append(path.read_bytes())
    return found


def scenes(n: int, seed: int = 0) -> list[bytes]:
    """``n`` JPEGs (quality 90) of the sizes in ``SIZES``, in turn: smooth colour waves plus
    noise, which compress and decode like photographs."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        width, height = SIZES[i % len(SIZES)]
        yy, xx = np.mgrid[0:height, 0:width] / max(width, height)
        a, b, c = rng.uniform(0, 12, 3)
        base = np.stack([np.sin(a * xx + b * yy + c + k) for k in range(3)], -1)
        arr = ((base * 0.4 + 0.5) * 255 + rng.normal(0, 12, base.shape)).clip(0, 255)
        buf = io.BytesIO()
        Image.fromarray(arr.astype(np.uint8)).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def reference_dataset(root: Path, photos: list[bytes]) -> Path:
    """The photos as an ILSVRC-2012 folder (each in train/ and val/: the test split is val/),
    materialised as the paper's reference dataset is: 480 px copies, originals kept."""
    for i, data in enumerate(photos):
        wnid = WNIDS[i % 2]
        for split in ("train", "val"):
            folder = root / "ilsvrc" / split / wnid
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{split}_{i:04d}.JPEG").write_bytes(data)
    config = validate_config(
        {"datasets": {"imagenet": {"kind": "imagenet", "path": str(root / "ilsvrc")}}}
    )
    settings = dataclasses.replace(
        MaterialiseSettings.from_config(config, dataset="imagenet"),
        val_per_class=0,
        max_unreadable_share=0.0,
        image_size=480,
        jpeg_quality=95,
        keep_originals=True,
    )
    out = root / "imagenet"
    range_job.materialise(out, settings)
    return out


def per_image_seconds(fn, n: int, repeat: int) -> float:
    fn()  # warm: page cache, imports
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best / n


def measure(out: Path, weights: str, model: str, repeat: int) -> dict:
    p = weight_facts(weights, model).preprocessing
    originals = ManifestDataset(out, "test", p.pil_geometry, originals=True)
    copies = ManifestDataset(out, "test")

    def read_originals():
        for i in range(len(originals)):
            originals[i]

    def read_copies():
        for i in range(len(copies)):
            p.geometry(copies[i][0][None].float() / 255)

    n = len(copies)
    test = pq.read_table(out / "manifest.parquet").to_pandas().query("split == 'test'")
    return {
        "weights": weights,
        "test_images": n,
        "original_kb": round(float(test.original_length.mean()) / 1e3, 1),
        "copy_kb": round(float(test.length.mean()) / 1e3, 1),
        "original_ms": round(per_image_seconds(read_originals, n, repeat) * 1e3, 2),
        "copy_ms": round(per_image_seconds(read_copies, n, repeat) * 1e3, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--generated", type=int, default=30, help="generated scenes")
    parser.add_argument("--weights", default="ResNet18_Weights.IMAGENET1K_V1")
    parser.add_argument("--model", default="resnet18", help="the model --weights is for")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = reference_dataset(Path(tmp), shipped_photos() + scenes(args.generated))
        row = measure(out, args.weights, args.model, args.repeat)
    if args.json:
        print(json.dumps(row))
    else:
        print(
            f"{row['test_images']} test images ({row['weights']}): original "
            f"{row['original_kb']} kB, {row['original_ms']} ms (Pillow decode, resize, crop); "
            f"480 px copy {row['copy_kb']} kB, {row['copy_ms']} ms (decode, tensor protocol)"
        )


if __name__ == "__main__":
    main()
