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

The step mirrors ``imagenot.train.loop.train_one_epoch`` (its body is not a callable function):
``_step`` below; what it leaves out (per-step seeding, the learning-rate schedule, on-device loss
sums, gradient accumulation) costs microseconds per step, not the feed's milliseconds.

    .venv/bin/python benchmarks/bench_feed_models.py                  # a GPU: paper models, 224 px
    .venv/bin/python benchmarks/bench_feed_models.py --device cpu --models resnet18 --size 64 \
        --images 64 --batch-size 16 --steps 3 --warmup 1 --workers 1 --json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, get_worker_info

from imagenot.acquire.dataset import ManifestDataset, Record, write_dataset
from imagenot.config import load_config, schema_default
from imagenot.registries import RegistryError
from imagenot.train import plan
from imagenot.train.device import configure, deterministic_for
from imagenot.train.feed import EncodedBatch, EncodedImages, Feeder, decode_batch, preprocess
from imagenot.train.registry import build_model, check_input_size
from imagenot.train.schedules import build_optimizer

# input statistics: the same cost whatever their values (models trained from scratch)
NORMALISATION = {k: schema_default(f"train.normalisation.{k}") for k in ("mean", "std")}

REPO = Path(__file__).resolve().parents[1]
# the paper's ImageNot ST optimizer (config/paper.yaml, imagenot_st); its lr does not change speed
HYPERPARAMETERS = {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 2e-5}


def _images(n: int, size: int) -> list[bytes]:
    from bench_loader import _images as smooth_noisy_jpegs  # benchmarks/ is on sys.path

    return smooth_noisy_jpegs(n, size)


class _Witness(Dataset):
    """The feed's dataset, unchanged, but every process that serves an item appends its pid and
    DataLoader worker id (``get_worker_info``; ``main`` in the training process) to ``log``
    once: the report's evidence of who decoded."""

    def __init__(self, data, log: Path):
        self.data, self.log, self._pid = data, log, None

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        if self._pid != os.getpid():
            self._pid = os.getpid()
            info = get_worker_info()
            with self.log.open("a") as f:
                f.write(f"{self._pid} {'main' if info is None else info.id}\n")
        return self.data[index]

    def __getattr__(self, name):  # collate / empty of an EncodedImages
        if name == "data":
            raise AttributeError(name)
        return getattr(self.data, name)


def _step(model, optimizer, images, labels, device: torch.device, size: int) -> None:
    """One training step as ``train_one_epoch`` takes it: its ``_to_device`` (decode, preprocess,
    channels_last), forward under its autocast, cross-entropy, backward, optimizer step."""
    cuda = device.type == "cuda"
    if isinstance(images, EncodedBatch | list):
        images = decode_batch(images, size, device)
    layout = torch.channels_last if cuda else torch.contiguous_format
    x = preprocess(images.to(device, non_blocking=True), size, NORMALISATION, layout)
    y = labels.to(device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
        logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    optimizer.step()


def _timed(batches, model, optimizer, device, size: int, warmup: int) -> tuple[float, int]:
    """Seconds and images of the steps after ``warmup``; synchronised at the window's ends."""
    start, seen = None, 0
    for i, (images, labels) in enumerate(batches):
        if i == warmup:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            start = time.perf_counter()
        _step(model, optimizer, images, labels, device, size)
        if i >= warmup:
            seen += len(labels)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, seen


def _pieces(n: int, batch: int, steps: int) -> list[torch.Tensor]:
    """``steps`` batches of ``batch`` indices, running over the dataset and round again."""
    return [torch.arange(i * batch, (i + 1) * batch) % n for i in range(steps)]


def bench_model(
    name: str,
    dataset: ManifestDataset,
    resident: tuple[torch.Tensor, torch.Tensor],
    args,
    batch: int,
    device: torch.device,
    root: Path,
) -> dict:
    model = build_model(name, args.num_classes).to(device)
    if device.type == "cuda":
        model.to(memory_format=torch.channels_last)
    model.train()
    optimizer = build_optimizer(list(model.parameters()), HYPERPARAMETERS)
    pieces = _pieces(len(dataset), batch, args.warmup + args.steps)

    # (b) device-resident: indexing one uint8 tensor already on the device (the indices moved
    # there before the timed window: no host-to-device copy per step)
    images, labels = resident
    on_device = ((images[idx], labels[idx]) for idx in [idx.to(device) for idx in pieces])
    device_s, device_n = _timed(on_device, model, optimizer, device, args.size, args.warmup)

    # (a) the real feed, as a training job builds it
    log = root / f"workers-{name}.txt"
    log.unlink(missing_ok=True)
    data = _Witness(EncodedImages(dataset) if args.encoded else dataset, log)
    feeder = Feeder(data, args.workers, batch, pin=device.type == "cuda")
    feed_s, feed_n = _timed(feeder.epoch(pieces), model, optimizer, device, args.size, args.warmup)
    seen = [line.split() for line in log.read_text().splitlines()]
    del feeder  # ends its persistent workers
    feed, dev = feed_n / feed_s, device_n / device_s
    return {
        "model": name,
        "batch_size": batch,
        "steps": args.steps,
        "feed_images": feed_n,
        "device_images": device_n,
        "feed_img_per_s": round(feed, 1),
        "device_img_per_s": round(dev, 1),
        "ratio": round(feed / dev, 3),
        "feed_worker_pids": sorted({int(pid) for pid, who in seen if who != "main"}),
        "feed_main_process_items": any(who == "main" for _, who in seen),
    }


def decode_floor(dataset: ManifestDataset) -> float:
    """Images/s of decoding every image once on one core, no loader (as bench_loader)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = min(_clock(lambda: [dataset[i] for i in range(len(dataset))]) for _ in range(2))
    finally:
        torch.set_num_threads(threads)
    return len(dataset) / best


def _clock(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _batch_sizes(config: dict, models: list[str], space: str, given: int | None) -> dict:
    """``--batch-size``, else each model's batch in ``space`` (its override, else the space's),
    capped by ``train.max_batch_per_gpu`` as a training job's per-GPU micro-batch is."""
    if given:
        return dict.fromkeys(models, given)
    if space not in config["train"]["spaces"]:
        raise SystemExit(
            f"--space {space!r} is not a key of train.spaces (have: "
            f"{', '.join(config['train']['spaces'])})"
        )
    sp = config["train"]["spaces"][space]
    cap = config["train"]["max_batch_per_gpu"]
    out = {}
    for m in models:
        b = sp.get("batch_size_overrides", {}).get(m, sp["batch_size"])
        out[m] = min(b, cap) if cap else b
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(REPO / "config/paper.yaml"), help="workflow config")
    p.add_argument("--models", help="comma-separated (default: the config's train.models)")
    p.add_argument("--space", default="imagenot_st", help="train.spaces key giving batch sizes")
    p.add_argument("--batch-size", type=int, help="one batch for every model (default: --space)")
    p.add_argument("--size", type=int, default=224, help="image side in px (the paper: 224)")
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
        args.workers = plan.num_workers(config)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device on this machine")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    # the process-wide settings of a training job: its threads (a GPU job's process: its node's
    # cores over its GPUs there, as imagenot.train.jobs), cuDNN autotuning on CUDA, glibc's
    # malloc keeping freed memory
    per_gpu = plan.threads(config) // max(1, plan.gpus_per_node(config))
    threads = args.threads or (per_gpu if device.type == "cuda" else torch.get_num_threads())
    configure(deterministic_for(None, device.type), threads)
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "cpu_count": os.cpu_count(),
        "size": args.size,
        "images_written": args.images,
        "workers": args.workers,
        "threads": threads,
        "feed": "encoded (decode_batch on the device)" if args.encoded else "decoded in workers",
        "warmup_steps": args.warmup,
        "models": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        classes = [f"c{i:02d}" for i in range(10)]
        jpegs = _images(args.images, args.size)
        records = [Record(f"k{i:06d}", classes[i % 10], "train", d) for i, d in enumerate(jpegs)]
        write_dataset(root / "ds", records, classes, shard_size=5000)
        dataset = ManifestDataset(root / "ds", "train")
        result["decode_floor_img_per_s_per_core"] = round(decode_floor(dataset), 1)
        resident = (
            torch.stack([dataset[i][0] for i in range(len(dataset))]).to(device),
            torch.tensor(dataset.labels, dtype=torch.int64).to(device),
        )
        for name in models:
            try:
                row = bench_model(name, dataset, resident, args, batches[name], device, root)
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
