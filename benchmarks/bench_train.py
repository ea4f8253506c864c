"""Images per second of our training job (imagenot.train.loop.fit: preprocessing, schedule,
progress, per-epoch validation, metrics and atomic checkpoints) against a plain PyTorch loop with
the same model, batch and input. ``--json`` prints one object; ``overhead_pct`` is the worst
model's slowdown of ours relative to the plain loop, in percent, from wall-clock time;
``overhead_cpu_pct`` the same from this process's CPU time, which a machine shared with other
jobs inflates far less than wall-clock time (each side: best of ``--repeats`` alternating runs).
Both sides include building the model (``make_model``): every training job does it. glibc's
malloc is set as every training job sets it (``keep_freed_memory``, in ``device.configure``); being
process-wide it serves both loops (``--default-malloc`` leaves glibc's defaults, under which page
faults depend on the allocation history that the alternating runs share). Two
components of the difference are reported alone: ``checkpoint_ms`` per model (one checkpoint,
fsynced; a job writes one at its stage's end and every ``train.checkpoint_minutes``, not
after every epoch, so ``ours`` pays it once per run), ``step_overhead_ms`` (CPU time our loop adds per optimizer step, on a tiny model)
and ``step_ops`` (tensor operations per step, plain and ours: on a GPU each is a kernel launch).

    python benchmarks/bench_train.py --json                       # CPU, demo models, 64 px
    python benchmarks/bench_train.py --json --threads 1 --pin 1   # one core, steadier
    python benchmarks/bench_train.py --json --device cuda --image-size 224 \
        --models alexnet vgg19 resnet18 resnet152 densenet161 efficientnet_v2_l convnext_large
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

from imagenot.core.config import schema_default
from imagenot.core.io import keep_freed_memory
from imagenot.train.checkpoints import State, save_checkpoint
from imagenot.train.feed import Feeder, InMemory, preprocess
from imagenot.train.identity import Job
from imagenot.train.interrupts import Interrupts
from imagenot.train.loop import fit, make_model, train_one_epoch
from imagenot.train.registry import MODELS
from imagenot.train.search import DEFAULTS
from imagenot.train.settings import JobSettings

MINI = [name for name in MODELS if name.endswith("_mini")]  # every family's CPU-sized member


def plain_loop(
    job: Job, data: InMemory, epochs: int, val: InMemory | None = None
) -> tuple[float, float]:
    """Images per second (training images; wall-clock, CPU time) of a minimal loop: same model,
    optimizer, batch and preprocessing, and, like torchvision's reference scripts, a validation
    pass per epoch (``val``) and building the model: work every training job does, not overhead
    of ours (``fit`` builds its model inside the timed call, so the plain loop does too)."""
    device = torch.device(job.device)
    start, cpu, seen = time.perf_counter(), time.process_time(), 0
    model, optimizer = make_model(job)
    model.to(device).train()
    if device.type == "cuda":
        model.to(memory_format=torch.channels_last)
    for _ in range(epochs):
        for idx in torch.randperm(len(data)).split(job.settings.batch_size):
            x = preprocess(
                data.images[idx].to(device), job.settings.image_size, job.settings.normalisation
            )
            if device.type == "cuda":
                x = x.contiguous(memory_format=torch.channels_last)
            y = data.labels[idx].to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            seen += len(y)
        if val is not None:
            model.eval()
            with torch.no_grad():
                for idx in torch.arange(len(val)).split(job.settings.eval_batch_size):
                    x = preprocess(
                        val.images[idx].to(device),
                        job.settings.image_size,
                        job.settings.normalisation,
                    )
                    model(x).argmax(1).eq(val.labels[idx].to(device)).sum().item()
            model.train()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return seen / (time.perf_counter() - start), seen / (time.process_time() - cpu)


def bench_job(model: str, size: int, batch: int, device: str) -> Job:
    """The benchmarked job: 10 classes, lr 0.01, a 100-epoch cap (never reached), evaluation in
    training-sized batches, the schema's compile and determinism settings, one process, no
    loader workers (in-memory data), and a recovery checkpoint only at the end (as
    ``train.checkpoint_minutes: 0``)."""
    settings = JobSettings(
        model=model, image_size=size, batch_size=batch, max_epochs=100, patience=100,
        schedule_epochs=100, trainable="all", init=None, eval_batch_size=batch, device=device,
        gpu_job=device == "cuda", compile=schema_default("train.compile"),
        deterministic=schema_default("train.deterministic"), checkpoint_minutes=0.0,
        deadline_margin_minutes=schema_default("train.deadline_margin_minutes"),
        in_memory=True, num_workers=0, world=1, max_batch_per_gpu=None, decode_on_gpu=False,
        stage_to_local=False, features=None,
        normalisation={k: schema_default(f"train.normalisation.{k}") for k in ("mean", "std")},
    )  # fmt: skip
    return Job(
        settings=settings, num_classes=10, hyperparameters={**DEFAULTS, "lr": 0.01}, seed=0,
        init="random", device=device,
    )  # fmt: skip


def ours(job: Job, data: InMemory, val: InMemory, epochs: int) -> tuple[float, float]:
    """Images per second (training images; wall-clock, CPU time) of our job: model, checkpoints
    and validation included."""
    with tempfile.TemporaryDirectory() as tmp:
        start, cpu = time.perf_counter(), time.process_time()
        fit(job, data, val, Path(tmp) / "ckpt.safetensors", "bench", stop_epoch=epochs)
        if job.device == "cuda":
            torch.cuda.synchronize()
        seen = epochs * len(data)
        return seen / (time.perf_counter() - start), seen / (time.process_time() - cpu)


def _linear_steps(steps: int):
    """The plain step's epoch and our ``train_one_epoch``'s, each a callable, over ``steps``
    batches of 4 random 8 px images through one linear model (so that the model's own work does
    not hide the loop's): what :func:`step_overhead` times and :func:`step_ops` counts."""
    size, batch = 8, 4
    n = batch * steps
    g = torch.Generator().manual_seed(0)
    data = InMemory(
        torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g),
        torch.arange(n) % 10,
    )
    job = bench_job("alexnet_mini", size, batch, "cpu")
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * size * size, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    cpu = torch.device("cpu")

    def plain() -> None:
        for idx in torch.randperm(n).split(batch):
            x = preprocess(data.images[idx], size, job.settings.normalisation)
            loss = F.cross_entropy(model(x), data.labels[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    def ours() -> None:
        with Interrupts(job.settings.checkpoint_minutes, None) as interrupts:
            feeder = Feeder(data, job.settings.num_workers, batch)
            train_one_epoch(model, model, optimizer, feeder, job, State("bench", "bench"), cpu,
                            lambda: None, interrupts)  # fmt: skip

    return plain, ours


def step_overhead(repeats: int, steps: int = 400) -> float:
    """Milliseconds of CPU time our ``train_one_epoch`` adds per optimizer step to the plain step
    (seeding, learning rate, on-device sums, the checkpoint check, tqdm), measured with a linear
    model on 8 px images so that the model's own work does not hide it; best of ``repeats``."""
    plain, ours = _linear_steps(steps)

    def best(run) -> float:
        times = []
        for _ in range(repeats):
            start = time.process_time()
            run()
            times.append(time.process_time() - start)
        return min(times)

    return 1e3 * (best(ours) - best(plain)) / steps


def step_ops(steps: int = 40) -> dict:
    """Tensor operations per optimizer step (each a kernel launch on a GPU, a few microseconds
    of host time there) of the plain step and of our ``train_one_epoch``, the same linear model
    on 8 px images as :func:`step_overhead`, counted by a dispatch mode: what our loop adds per
    step, independent of the machine's load (the clock is not)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    plain, ours = _linear_steps(steps)
    counts = {}
    with Count():
        plain()
    counts["plain"], Count.n = Count.n / steps, 0
    with Count():
        ours()
    counts["ours"] = Count.n / steps
    return {k: round(v, 2) for k, v in counts.items()} | {
        "added": round(counts["ours"] - counts["plain"], 2)
    }


def checkpoint_ms(job: Job, repeats: int) -> float:
    """Wall-clock milliseconds of one checkpoint of ``job``'s model and optimizer
    (after one step, so the optimizer state exists); best of ``repeats``."""
    model, optimizer = make_model(job)
    x = torch.zeros(2, 3, job.settings.image_size, job.settings.image_size)
    F.cross_entropy(model(x), torch.zeros(2, dtype=torch.int64)).backward()
    optimizer.step()
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            start = time.perf_counter()
            save_checkpoint(Path(tmp) / "ckpt.safetensors", model, optimizer, State("b", "b"))
            times.append(time.perf_counter() - start)
    return 1e3 * min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--models", nargs="+", default=MINI)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=8, help="training batches per epoch")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs; best kept")
    parser.add_argument(
        "--pin", type=int, nargs="+", default=None, help="run on these CPU cores only (Linux)"
    )
    parser.add_argument(
        "--default-malloc", action="store_true", help="glibc's defaults, not keep_freed_memory()"
    )
    args = parser.parse_args()
    malloc_tuned = False if args.default_malloc else keep_freed_memory()
    if args.pin:
        os.sched_setaffinity(0, set(args.pin))
    torch.set_num_threads(args.threads)
    n, size = args.batch_size * args.batches, args.image_size
    g = torch.Generator().manual_seed(0)
    data = InMemory(
        torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g),
        torch.arange(n) % 10,
    )
    val = InMemory(data.images[: args.batch_size], data.labels[: args.batch_size])
    rows = []
    for name in args.models:
        job = bench_job(name, size, args.batch_size, args.device)
        plain_loop(job, data, 1)  # warm-up (allocator, kernels)
        plain_runs, our_runs = [], []  # (wall, CPU) images/s of each run
        for _ in range(args.repeats):  # alternate, keep the best: robust to a shared machine
            plain_runs.append(plain_loop(job, data, args.epochs, val))
            our_runs.append(ours(job, data, val, args.epochs))
        row = {"model": name}
        for i, clock in enumerate(("", "_cpu")):
            base, mine = max(r[i] for r in plain_runs), max(r[i] for r in our_runs)
            row |= {f"plain{clock}_img_s": round(base, 1), f"ours{clock}_img_s": round(mine, 1),
                    f"overhead{clock}_pct": round(100 * (base - mine) / base, 2)}  # fmt: skip
        row["checkpoint_ms"] = round(checkpoint_ms(job, args.repeats), 1)
        rows.append(row)
    result = {
        "device": args.device,
        "image_size": size,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "repeats": args.repeats,
        "keep_freed_memory": malloc_tuned,
        "load_average": round(os.getloadavg()[0], 2),
        "overhead_pct": max(r["overhead_pct"] for r in rows),
        "overhead_cpu_pct": max(r["overhead_cpu_pct"] for r in rows),
        "step_overhead_ms": round(step_overhead(args.repeats), 3) if args.device == "cpu" else None,
        "step_ops": step_ops() if args.device == "cpu" else None,
        "models": rows,
    }
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
