"""Is the feed fast enough? Training images/s of each paper model fed by the real feed against
the same model fed from device memory, on whatever device this machine has.

For each model (default: ``train.models`` of ``--config``, the paper config) it times training
steps (forward, backward, optimizer step; bf16 autocast and channels_last on CUDA, as
``imagenot.train.loop`` trains) twice over the same JPEGs, written once as one of our datasets:

* ``feed``: the training job's feed, ``imagenot.train.feed.Feeder`` with ``--workers``
  persistent DataLoader workers decoding JPEGs (``--encoded``: workers read bytes and
  ``decode_batch`` decodes on the device, ``train.decode_on_gpu``), pinned memory on CUDA,
  ``preprocess`` on the device;
* ``device``: the same images decoded once and held on the device as one uint8 tensor, indexed
  per batch, ``preprocess`` on the device: the model's own speed with a free feed.

``ratio`` = feed / device: >= 0.9 means the feed keeps up (docs/gpu.md, "Is the feed fast
enough?"). Warm-up steps are not timed; on CUDA the device is synchronised only at the ends of
each timed window. The feed's workers decode up to ``4 x --workers`` batches ahead (the
Feeder's prefetch), some of them during the warm-up, so the timed window must be many times
that long to measure the steady state: the default 100 steps against 7 workers' 28.
Also reported: the decode floor (the same JPEGs decoded on one core in this process, no loader),
the device's name and the worker processes the feed really used (each records its pid on its
first item: evidence that decoding ran in workers).

The measuring code is ``imagenot.train.feed_bench``, shared with the preflight
(``imagenot preflight``, docs/gpu.md "First hour on a GPU"), which runs it at the dataset's
stored size; here ``--stored-size`` (default ``--size``) gives the JPEGs' side.

    .venv/bin/python benchmarks/bench_feed_models.py                  # a GPU: paper models, 224 px
    .venv/bin/python benchmarks/bench_feed_models.py --device cpu --models resnet18 --size 64 \
        --images 64 --batch-size 16 --steps 3 --warmup 1 --workers 1 --json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import torch

from imagenot.core.config import load_config
from imagenot.core.registries import RegistryError
from imagenot.train import experiments, plan
from imagenot.train import resources as train_resources
from imagenot.train.device import configure, deterministic_for
from imagenot.train.feed_bench import bench_model, decode_floor, resident, write_jpeg_dataset
from imagenot.train.registry import check_input_size

REPO = Path(__file__).resolve().parents[1]


def _batch_sizes(config: dict, models: list[str], space: str, given: int | None) -> dict:
    """``--batch-size``, else each model's batch in ``space`` (its override, else the space's),
    cut as a one-GPU training job cuts it into micro-batches under ``train.max_batch_per_gpu``
    (null: the batch whole; on a GPU the jobs' own cut is what the preflight measured to fit,
    ``imagenot preflight``)."""
    if given:
        return dict.fromkeys(models, given)
    if space not in config["train"]["spaces"]:
        raise SystemExit(
            f"--space {space!r} is not a key of train.spaces (have: "
            f"{', '.join(config['train']['spaces'])})"
        )
    sp = config["train"]["spaces"][space]
    out = {}
    for m in models:
        b = sp.get("batch_size_overrides", {}).get(m, sp["batch_size"])
        out[m] = experiments.per_gpu_batch(b, 1, config["train"]["max_batch_per_gpu"])
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(REPO / "config/paper.yaml"), help="workflow config")
    p.add_argument("--models", help="comma-separated (default: the config's train.models)")
    p.add_argument("--space", default="imagenot_st", help="train.spaces key giving batch sizes")
    p.add_argument("--batch-size", type=int, help="one batch for every model (default: --space)")
    p.add_argument("--size", type=int, default=224, help="image side in px (the paper: 224)")
    p.add_argument(
        "--stored-size",
        type=int,
        help="side of the JPEGs written, resized to --size as a job does (default --size)",
    )
    p.add_argument("--images", type=int, default=2048, help="JPEGs written (batches cycle)")
    p.add_argument("--steps", type=int, default=100, help="timed steps per side (docstring)")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps before them")
    p.add_argument(
        "--workers",
        type=int,
        help="DataLoader workers (default: the config's, cpus_per_gpu - 1 on GPU jobs)",
    )
    p.add_argument(
        "--threads",
        type=int,
        help="torch threads of the training process (default: cpus_per_gpu on CUDA, torch's on "
        "the CPU, where the model's threads and the workers share the cores)",
    )
    p.add_argument("--encoded", action="store_true", help="decode on the device (decode_on_gpu)")
    p.add_argument("--num-classes", type=int, default=1000, help="classifier width")
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda if available")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()

    if args.steps < 1 or args.warmup < 0 or args.images < 1:
        raise SystemExit("--steps and --images must be at least 1, --warmup at least 0")
    config = load_config(args.config)
    models = args.models.split(",") if args.models else list(config["train"]["models"])
    try:  # before writing any image: a name or size the registry refuses is a one-line error
        for name in models:
            check_input_size(name, args.size)
    except RegistryError as exc:
        raise SystemExit(f"--models/--size: {exc}") from None
    batches = _batch_sizes(config, models, args.space, args.batch_size)
    if args.workers is None:
        args.workers = experiments.num_workers(config)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device on this machine")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    # the process-wide settings of a training job: its threads (a GPU job's process: its node's
    # cores over its GPUs there, as imagenot.train.jobs), cuDNN autotuning on CUDA, glibc's
    # malloc keeping freed memory
    per_gpu = train_resources.threads(config) // max(1, plan.gpus_per_node(config))
    threads = args.threads or (per_gpu if device.type == "cuda" else torch.get_num_threads())
    configure(deterministic_for(None, device.type), threads)
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cpu_count": os.cpu_count(),
        "size": args.size,
        "stored_size": args.stored_size or args.size,
        "images_written": args.images,
        "workers": args.workers,
        "threads": threads,
        "feed": "encoded (decode_batch on the device)" if args.encoded else "decoded in workers",
        "warmup_steps": args.warmup,
        "models": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        dataset = write_jpeg_dataset(root / "ds", args.images, args.stored_size or args.size)
        result["decode_floor_img_per_s_per_core"] = round(decode_floor(dataset), 1)
        on_device = resident(dataset, device)
        timing = {k: getattr(args, k) for k in ("size", "steps", "warmup", "workers", "encoded")}
        for name in models:
            try:
                row = bench_model(
                    name, dataset, on_device, batch=batches[name], num_classes=args.num_classes,
                    normalisation=config["train"]["normalisation"], device=device, root=root,
                    **timing,
                )  # fmt: skip
            except torch.OutOfMemoryError:
                row = {
                    "model": name,
                    "batch_size": batches[name],
                    "error": "out of device memory: pass --batch-size, or set "
                    "train.max_batch_per_gpu in --config as a training job would",
                }
            result["models"].append(row)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return
    print(
        f"device {result['device']}, {args.size} px, {args.workers} workers "
        f"({result['feed']}), decode floor {result['decode_floor_img_per_s_per_core']} img/s "
        "per core"
    )
    print(f"{'model':<20} {'batch':>6} {'feed img/s':>11} {'device img/s':>13} {'ratio':>6}")
    for r in result["models"]:
        if "error" in r:
            print(f"{r['model']:<20} {r['batch_size']:>6} {r['error']}")
            continue
        print(
            f"{r['model']:<20} {r['batch_size']:>6} {r['feed_img_per_s']:>11} "
            f"{r['device_img_per_s']:>13} {r['ratio']:>6}"
        )


if __name__ == "__main__":
    main()
