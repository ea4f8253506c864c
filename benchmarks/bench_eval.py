"""Benchmark: one model under all 17 transformations, decode-once batching vs one pass per transform.

Builds a demo-size dataset (by default the demo's test split: 10 images x 14 classes of 64 px
demo-world renders stored as JPEG like the materialised datasets) and times two ways to evaluate
one model on it under the 17 transformations:

* ``decode_once``: what ``imagenot evaluate-robustness`` does: one DataLoader pass decodes every
  image once; each batch is transformed 17 times as a tensor (per-image parameters) and images a
  transformation leaves unchanged reuse the untransformed predictions; the model runs with its
  batch norms folded into the convolutions and, on the CPU, channels-last weights;
* ``per_transform_passes``: the straightforward way: 17 DataLoader passes, each decoding every
  image again and applying the torchvision.transforms.v2 class image by image.

Same model, batch size, workers and torch threads for both; the two ways run interleaved (best
of ``--repeats``) so that both see the same load on a shared machine. The process first calls
``keep_freed_memory()`` as ``imagenot evaluate-robustness`` does; being process-wide, it serves
both ways (``--default-malloc`` leaves glibc's defaults).

Prints ``speedup_vs_per_transform_passes`` = per_transform_passes / decode_once wall seconds for
the chosen model (default: a demo-scale CNN; ``--model alexnet_mini`` etc. for the registered demo
models). Both ways run the model on every transformed image (ours skips the images a closed gate
leaves unchanged, about a quarter), so on CPU the model's own cost bounds the speedup; the
``pipeline_only`` figures repeat the comparison with a near-free linear model to isolate decoding
and transformation, which is what remains when the model runs on a GPU. ``cpu_*`` figures are this
process's CPU seconds (less sensitive to load than wall time; workers not counted).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from imagenot.acquire.dataset import Record, write_dataset
from imagenot.core.config import validate_config
from imagenot.core.dataset import ManifestDataset
from imagenot.core.io import keep_freed_memory
from imagenot.evaluate.robustness import (
    dataset_batches,
    evaluate_batches,
)
from imagenot.evaluate.transforms import build_transforms
from imagenot.train.facts import Preprocessing

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def normalise(x: torch.Tensor, mean, std) -> torch.Tensor:
    """``(x - mean) / std`` per channel: what the model's protocol ends with."""
    m = torch.tensor(mean, dtype=x.dtype).reshape(1, -1, 1, 1)
    s = torch.tensor(std, dtype=x.dtype).reshape(1, -1, 1, 1)
    return (x - m) / s


def make_dataset(root: Path, n_test: int, size: int, n_classes: int) -> Path:
    """A dataset dir with ``n_test`` test JPEGs of ``size`` px like the demo's.

    Demo-world renders (``imagenot.demo.images``: striped backgrounds, a foreground shape, pixel
    noise; one prototype per class) encoded as the materialised datasets store them (PIL, quality
    95, ``imagenot.acquire.images.encode_jpeg``).
    """
    import numpy as np
    from PIL import Image

    from imagenot.acquire.images import encode_jpeg
    from imagenot.demo.images import make_prototypes, render

    rng = np.random.default_rng(0)
    prototypes = make_prototypes(n_classes, rng)
    records = []
    for i in range(n_test):
        pixels = render(prototypes[i % n_classes], rng, size)
        jpeg = encode_jpeg(Image.fromarray(pixels), quality=95)
        records.append(Record(key=f"img{i:06d}", wnid=f"c{i % n_classes}", split="test", jpeg=jpeg))
    write_dataset(root, records, [f"c{c}" for c in range(n_classes)], shard_size=5000)
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
    """The registered transformations as torchvision.transforms.v2 classes (per image), in
    registry order (imagenot.evaluate.transform_registry.TRANSFORMS); one without a torchvision
    counterpart here is an error naming it."""
    from torchvision.transforms import v2

    from imagenot.evaluate.transforms import names

    s = settings
    bil = v2.InterpolationMode.BILINEAR
    counterparts = {
        "Identity": lambda: v2.Identity(),
        "GaussianBlur": lambda: v2.GaussianBlur(
            s["GaussianBlur"]["kernel_size"], s["GaussianBlur"]["sigma"]
        ),
        "AdjustSharpness": lambda: v2.RandomAdjustSharpness(
            s["AdjustSharpness"]["sharpness_factor"], s["AdjustSharpness"]["p"]
        ),
        "Affine": lambda: v2.RandomAffine(
            s["Affine"]["degrees"],
            s["Affine"]["translate"],
            s["Affine"]["scale"],
            s["Affine"]["shear"],
            interpolation=bil,
        ),
        "ColorJitter": lambda: v2.ColorJitter(
            *(s["ColorJitter"][k] for k in ("brightness", "contrast", "saturation", "hue"))
        ),
        "Contrast": lambda: v2.ColorJitter(contrast=s["Contrast"]["factor"]),
        "Equalize": lambda: v2.RandomEqualize(s["Equalize"]["p"]),
        "Grayscale": lambda: v2.RandomGrayscale(s["Grayscale"]["p"]),
        "HorizontalFlip": lambda: v2.RandomHorizontalFlip(s["HorizontalFlip"]["p"]),
        "Invert": lambda: v2.RandomInvert(s["Invert"]["p"]),
        "Perspective": lambda: v2.RandomPerspective(
            s["Perspective"]["distortion_scale"], s["Perspective"]["p"], bil
        ),
        "Posterize": lambda: v2.RandomPosterize(s["Posterize"]["bits"], s["Posterize"]["p"]),
        "ResizedCrop": lambda: v2.RandomResizedCrop(
            size, s["ResizedCrop"]["scale"], s["ResizedCrop"]["ratio"]
        ),
        "Rotation": lambda: v2.RandomRotation(s["Rotation"]["degrees"], bil),
        "Sharpness": lambda: v2.RandomAdjustSharpness(s["Sharpness"]["factor"][1], 1.0),
        "Solarize": lambda: v2.RandomSolarize(s["Solarize"]["threshold"], s["Solarize"]["p"]),
        "VerticalFlip": lambda: v2.RandomVerticalFlip(s["VerticalFlip"]["p"]),
    }
    missing = [n for n in names() if n not in counterparts]
    if missing:
        raise SystemExit(f"bench_eval: no torchvision counterpart for {missing}")
    return [counterparts[n]() for n in names()]


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
    batches = dataset_batches(ds_dir, "test", batch_size, workers)
    protocol = Preprocessing.trained({"mean": MEAN, "std": STD}, size)
    evaluate_batches(
        model, batches, transforms, settings["seed"], protocol, "cpu", fold_batch_norm=True
    )
    return time.perf_counter() - start


def timed(fn, *args) -> tuple[float, float]:
    """(wall, CPU) seconds of one call; CPU time is this process's (workers not counted)."""
    cpu = time.process_time()
    wall = fn(*args)
    return wall, time.process_time() - cpu


def compare(net, ds_dir, settings, args) -> dict[str, tuple[float, float]]:
    """Best of ``args.repeats`` (wall and CPU seconds) per way, the two ways interleaved.

    Interleaving (ours, baseline, ours, baseline, ...) exposes both to the same load on a
    shared machine; each way runs once untimed first.
    """
    common = (net, ds_dir, settings, args.size, args.batch_size, args.workers)
    ways = {"decode_once": decode_once, "per_transform_passes": per_transform_passes}
    for fn in ways.values():
        fn(*common)  # warm-up (allocator, kernels, imports)
    best = {name: (math.inf, math.inf) for name in ways}
    for _ in range(args.repeats):
        for name, fn in ways.items():
            wall, cpu = timed(fn, *common)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--images", type=int, default=140, help="test images (demo: 10 per class x 14 classes)"
    )
    parser.add_argument("--size", type=int, default=64, help="image side in px (demo: 64)")
    parser.add_argument("--classes", type=int, default=14)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers (both ways)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=5, help="best of N")
    parser.add_argument(
        "--model",
        default="small_cnn",
        help="small_cnn (demo scale) or a name of imagenot.train.registry (e.g. alexnet_mini)",
    )
    parser.add_argument(
        "--default-malloc",
        action="store_true",
        help="leave glibc malloc at its defaults instead of keep_freed_memory() (both ways)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    # what `imagenot evaluate-robustness` does at start-up; process-wide, so both ways get it
    malloc_tuned = False if args.default_malloc else keep_freed_memory()

    if args.model == "small_cnn":
        model = small_cnn(args.classes)
    else:
        from imagenot.train.registry import build_model

        torch.manual_seed(0)
        model = build_model(args.model, args.classes).eval()
    config = validate_config({})
    settings = {**config["evaluate"], "seed": config["seed"]}

    with tempfile.TemporaryDirectory() as tmp:
        ds_dir = make_dataset(Path(tmp) / "ds", args.images, args.size, args.classes)
        best = compare(model, ds_dir, settings, args)
        probe = compare(linear_probe(args.classes), ds_dir, settings, args)

    fast, slow = best["decode_once"][0], best["per_transform_passes"][0]
    probe_fast, probe_slow = probe["decode_once"][0], probe["per_transform_passes"][0]
    result = {
        "benchmark": "bench_eval",
        "model": args.model,
        "images": args.images,
        "size_px": args.size,
        "transforms": len(settings["transforms"]),
        "batch_size": args.batch_size,
        "workers": args.workers,
        "threads": args.threads,
        "repeats": args.repeats,
        "malloc_tuned": malloc_tuned,
        "decode_once_s": round(fast, 3),
        "per_transform_passes_s": round(slow, 3),
        "images_per_s_decode_once": round(17 * args.images / fast, 1),
        "speedup_vs_per_transform_passes": round(slow / fast, 2),
        "cpu_decode_once_s": round(best["decode_once"][1], 3),
        "cpu_per_transform_passes_s": round(best["per_transform_passes"][1], 3),
        "cpu_speedup": round(best["per_transform_passes"][1] / best["decode_once"][1], 2),
        "pipeline_only_decode_once_s": round(probe_fast, 3),
        "pipeline_only_per_transform_passes_s": round(probe_slow, 3),
        "pipeline_only_speedup": round(probe_slow / probe_fast, 2),
        "load_average_1min": round(os.getloadavg()[0], 2),
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
