"""Benchmark: one model under all 17 transformations, decode-once batching vs one pass per transform.

Builds a demo-size dataset (synthetic JPEGs, materialised with ``imagenot.acquire.dataset``) and
times two ways to evaluate one model on its test split under the 17 transformations:

* ``decode_once``: what ``imagenot evaluate-robustness`` does: one DataLoader pass decodes every
  image once; each batch is transformed 17 times as a tensor (per-image parameters) and images a
  transformation leaves unchanged reuse the untransformed predictions;
* ``per_transform_passes``: the straightforward way: 17 DataLoader passes, each decoding every
  image again and applying the torchvision.transforms.v2 class image by image.

Prints ``speedup_vs_per_transform_passes`` = per_transform_passes / decode_once seconds for the
chosen model (default: a demo-scale CNN). Both ways run the model 17 times per image (less where a
gate leaves an image unchanged), so on CPU the model's own cost bounds the speedup; the
``pipeline_only`` figures repeat the comparison with a near-free linear model to isolate decoding
and transformation, which is what remains when the model runs on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from imagenot.acquire.dataset import ManifestDataset, Record, write_dataset
from imagenot.config import validate_config
from imagenot.evaluate.robustness import (
    dataset_batches,
    evaluate_batches,
    normalise,
)
from imagenot.evaluate.transforms import build_transforms

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def make_dataset(root: Path, n_test: int, size: int, n_classes: int) -> Path:
    """A dataset dir with ``n_test`` smooth random test JPEGs of ``size`` px."""
    from torchvision.io import encode_jpeg

    g = torch.Generator().manual_seed(0)
    records = []
    for i in range(n_test):
        small = torch.rand(1, 3, 8, 8, generator=g)
        img = torch.nn.functional.interpolate(small, size=(size, size), mode="bilinear")[0]
        img = (img * 255).round().to(torch.uint8)
        jpeg = bytes(encode_jpeg(img, quality=90).numpy())
        records.append(Record(key=f"img{i:06d}", wnid=f"c{i % n_classes}", split="test", jpeg=jpeg))
    write_dataset(root, records, [f"c{c}" for c in range(n_classes)])
    return root


def small_cnn(n_classes: int) -> torch.nn.Module:
    """A demo-scale convolutional network (the demo trains models of this size on CPU)."""
    torch.manual_seed(0)
    c = torch.nn
    return c.Sequential(
        c.Conv2d(3, 16, 3, stride=2, padding=1),
        c.BatchNorm2d(16),
        c.ReLU(),
        c.Conv2d(16, 32, 3, stride=2, padding=1),
        c.BatchNorm2d(32),
        c.ReLU(),
        c.AdaptiveAvgPool2d(1),
        c.Flatten(),
        c.Linear(32, n_classes),
    ).eval()


def linear_probe(n_classes: int) -> torch.nn.Module:
    """A near-free model (mean colour -> logits): isolates decoding and transformation cost."""
    torch.manual_seed(0)
    c = torch.nn
    return c.Sequential(c.AdaptiveAvgPool2d(1), c.Flatten(), c.Linear(3, n_classes)).eval()


def torchvision_transforms(settings: dict, size: int) -> list:
    """The same 17 transformations as torchvision.transforms.v2 classes (per image)."""
    from torchvision.transforms import v2

    s = settings
    bil = v2.InterpolationMode.BILINEAR
    return [
        v2.Identity(),
        v2.GaussianBlur(s["GaussianBlur"]["kernel_size"], s["GaussianBlur"]["sigma"]),
        v2.RandomAdjustSharpness(
            s["AdjustSharpness"]["sharpness_factor"], s["AdjustSharpness"]["p"]
        ),
        v2.RandomAffine(
            s["Affine"]["degrees"],
            s["Affine"]["translate"],
            s["Affine"]["scale"],
            s["Affine"]["shear"],
            interpolation=bil,
        ),
        v2.ColorJitter(
            *(s["ColorJitter"][k] for k in ("brightness", "contrast", "saturation", "hue"))
        ),
        v2.ColorJitter(contrast=s["Contrast"]["factor"]),
        v2.RandomEqualize(s["Equalize"]["p"]),
        v2.RandomGrayscale(s["Grayscale"]["p"]),
        v2.RandomHorizontalFlip(s["HorizontalFlip"]["p"]),
        v2.RandomInvert(s["Invert"]["p"]),
        v2.RandomPerspective(s["Perspective"]["distortion_scale"], s["Perspective"]["p"], bil),
        v2.RandomPosterize(s["Posterize"]["bits"], s["Posterize"]["p"]),
        v2.RandomResizedCrop(size, s["ResizedCrop"]["scale"], s["ResizedCrop"]["ratio"]),
        v2.RandomRotation(s["Rotation"]["degrees"], bil),
        v2.RandomAdjustSharpness(s["Sharpness"]["factor"][1], 1.0),
        v2.RandomSolarize(s["Solarize"]["threshold"], s["Solarize"]["p"]),
        v2.RandomVerticalFlip(s["VerticalFlip"]["p"]),
    ]


@torch.inference_mode()
def per_transform_passes(model, ds_dir, settings, size, batch_size, workers) -> float:
    from torch.utils.data import DataLoader
    from torchvision.transforms import v2

    torch.manual_seed(0)
    start = time.perf_counter()
    for t in torchvision_transforms(settings["transforms"], size):
        pipeline = v2.Compose(
            [v2.ToDtype(torch.float32, scale=True), v2.Resize([size, size], antialias=True), t]
        )
        ds = ManifestDataset(ds_dir, "test", transform=pipeline)
        for x, _ in DataLoader(ds, batch_size=batch_size, num_workers=workers):
            model(normalise(x, MEAN, STD))
    return time.perf_counter() - start


def decode_once(model, ds_dir, settings, size, batch_size, workers) -> float:
    transforms = build_transforms(settings["transforms"])
    start = time.perf_counter()
    batches = dataset_batches(ds_dir, "test", size, batch_size, workers)
    evaluate_batches(model, batches, transforms, settings["seed"], MEAN, STD, "cpu")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--images", type=int, default=512, help="test images")
    parser.add_argument("--size", type=int, default=64, help="image side in px (demo: 64)")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers (both ways)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=3, help="best of N")
    parser.add_argument(
        "--model",
        default="small_cnn",
        help="small_cnn (demo scale) or a name of imagenot.train.registry",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    if args.model == "small_cnn":
        model = small_cnn(args.classes)
    else:
        from imagenot.train.registry import build_model

        model = build_model(args.model, args.classes).eval()
    config = validate_config({})
    settings = {**config["evaluate"], "seed": config["seed"]}

    def compare(net: torch.nn.Module, ds_dir: Path) -> tuple[float, float]:
        common = (net, ds_dir, settings, args.size, args.batch_size, args.workers)
        decode_once(*common)  # warm-up (allocator, kernels)
        fast = min(decode_once(*common) for _ in range(args.repeats))
        slow = min(per_transform_passes(*common) for _ in range(args.repeats))
        return fast, slow

    with tempfile.TemporaryDirectory() as tmp:
        ds_dir = make_dataset(Path(tmp) / "ds", args.images, args.size, args.classes)
        fast, slow = compare(model, ds_dir)
        probe_fast, probe_slow = compare(linear_probe(args.classes), ds_dir)

    result = {
        "benchmark": "bench_eval",
        "model": args.model,
        "images": args.images,
        "size_px": args.size,
        "transforms": 17,
        "batch_size": args.batch_size,
        "workers": args.workers,
        "threads": args.threads,
        "decode_once_s": round(fast, 3),
        "per_transform_passes_s": round(slow, 3),
        "images_per_s_decode_once": round(17 * args.images / fast, 1),
        "speedup_vs_per_transform_passes": round(slow / fast, 2),
        "pipeline_only_decode_once_s": round(probe_fast, 3),
        "pipeline_only_per_transform_passes_s": round(probe_slow, 3),
        "pipeline_only_speedup": round(probe_slow / probe_fast, 2),
        "torch": torch.__version__,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
