"""The measuring steps of ``benchmarks/gpu_check.py`` (docs/gpu.md, "One GPU check"), one per
call, each writing one JSON object: ``python benchmarks/gpu_check_steps.py STEP --out FILE``.
Over 500 lines because the orchestrator starts every step as this one file by path, on a
python that has nothing of the benchmarks importable; each step's section stands alone.
The orchestrator runs each under its own time limit, so a step that hangs or dies costs its
limit and nothing else.

Steps (``--cpu``: the same code on the CPU with tiny sizes, the test's smoke run):

* ``env``: python, torch, torchvision, CUDA, the GPU, its driver, the cores; which of the
  project's modules import (the wheels beyond torch, torchvision and numpy: :data:`WHEELS`);
* ``plain``: the reference plain loop (``benchmarks/gpu_plain_loop.py``) at :data:`BATCHES`;
* ``step``: the project's training step at the same batches: ``feed_bench.train_step`` on
  images held on the device at the stored 256 px (preprocess on the device, as the jobs), the
  loop's own ``train_one_epoch`` over them, and the parts: preprocess alone, a pinned batch's
  copy to the device;
* ``decode``: nvJPEG (``imagenot.train.decode``) against libjpeg-turbo pixel for pixel (four
  kinds of JPEG), its images/s, and decoding ahead of a training step over many batches: every
  batch's checksum against a quiet decode (pytorch/vision#9606's corruption) and the device's
  memory (``mem_get_info``: nvJPEG allocates outside torch's allocator) from the 10th batch on;
* ``eval``: the costliest evaluation, the published EfficientNet-V2-L at 480 px in float32
  (``evaluate_batches(published=True)``, the 17 transformations), beside the same batch in bf16
  as a model trained here runs: images x transformations per second, agreement, peak memory;
* ``caption``: caption embedding (``curate.encoders.TorchEncoder``'s batching and autocast) with
  a RoBERTa-large-shaped encoder (random weights: no model files on a GPU node; Hugging Face's
  ``RobertaModel`` where transformers is installed, else the same shape in torch), fp16 (the
  paper config's precision) against float32;
* ``embed``: image embedding as ``embed-images`` runs it (``diagnostics.embed.embed``, float32)
  with a CLIP ViT-L/14-shaped encoder (random weights; transformers' where installed, else
  torchvision's ``VisionTransformer`` in the same shape).

A step that starts a process of its own (``plain``) binds it to itself
(``imagenot.core.lifeline.bind_to_parent``): a step killed at its time limit takes it along.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the paper's models at the batch the first GPU run measured them (the plain loop and the
# project's step compare at the same batch); the CPU smoke run: one small model
BATCHES = {
    "alexnet": 256,
    "vgg19": 256,
    "resnet18": 256,
    "resnet152": 256,
    "densenet161": 256,
    "efficientnet_v2_l": 32,
    "convnext_large": 64,
}
CPU_BATCHES = {"alexnet": 2}
EVAL_MODEL, EVAL_IMAGES = "efficientnet_v2_l", 32  # the costliest evaluation (published, 480 px)
EMBED_IMAGES = 1024  # image embedding's timed images
SIZE, STORED = 224, 256  # the paper's training side and stored side
CPU_SIZE, CPU_STORED = 64, 72  # the smoke run's
# What the check imports beyond torch, torchvision (with pillow) and numpy: the wheels to
# install on a GPU node whose python has only those (docs/gpu.md). Module -> wheel.
WHEELS = {
    "yaml": "pyyaml",
    "jsonschema": "jsonschema",
    "referencing": "referencing",
    "jsonschema_specifications": "jsonschema-specifications",
    "rpds": "rpds-py",
    "attrs": "attrs",
    "pyarrow": "pyarrow",
    "tqdm": "tqdm",
    "safetensors": "safetensors",
}
# The Linux platform tags each wheel is published under on PyPI at the version
# envs/requirements.lock pins ("any": pure Python), as PyPI's simple index listed them for those
# versions (2026-12; to re-read: docs/gpu.md "The wheels"). pip takes an explicit --platform
# literally: pyarrow 26 is published for manylinux_2_28 only and rpds-py and safetensors for
# manylinux2014 (manylinux_2_17) only, so an offline download names both tags.
WHEEL_PLATFORMS = {
    "pyyaml": ("manylinux2014", "manylinux_2_28"),
    "jsonschema": ("any",),
    "referencing": ("any",),
    "jsonschema-specifications": ("any",),
    "rpds-py": ("manylinux2014",),
    "attrs": ("any",),
    "pyarrow": ("manylinux_2_28",),
    "tqdm": ("any",),
    "safetensors": ("manylinux2014",),
}
# the glibc each manylinux tag needs (PEP 599, PEP 600)
GLIBC = {"manylinux2014": (2, 17), "manylinux_2_28": (2, 28)}
LOCK = REPO / "envs" / "requirements.lock"


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_versions(lock: Path = LOCK) -> dict[str, str]:
    """``wheel -> version`` of :data:`WHEEL_PLATFORMS`' wheels as ``lock`` pins them."""
    pins = {}
    for line in lock.read_text().splitlines():
        name, sep, version = line.split("#")[0].split(";")[0].strip().partition("==")
        if sep:
            pins[_key(name)] = version.split()[0].rstrip("\\").strip()
    missing = [w for w in WHEEL_PLATFORMS if _key(w) not in pins]
    if missing:
        raise ValueError(f"{lock}: does not pin {', '.join(missing)}")
    return {w: pins[_key(w)] for w in WHEEL_PLATFORMS}


def pip_download(python: str = "3.12", arch: str = "x86_64", wheels=None) -> str:
    """The pip line that fetches ``wheels`` (default: all of :data:`WHEEL_PLATFORMS`) at their
    locked versions for a GPU node of CPython ``python`` on ``arch``, one ``--platform`` per
    tag they are published under (``pip install --no-index --find-links wheels`` them there)."""
    wanted = list(WHEEL_PLATFORMS) if wheels is None else list(wheels)
    tags = sorted({t for w in wanted for t in WHEEL_PLATFORMS[w] if t != "any"}, reverse=True)
    versions = locked_versions()
    return " ".join([
        "pip download --only-binary=:all: --no-deps", *(f"--platform {t}_{arch}" for t in tags),
        f"--python-version {python} -d wheels", *(f"{w}=={versions[w]}" for w in wanted),
    ])  # fmt: skip


def glibc_short(wheels, glibc: tuple[int, int] | None) -> dict[str, str]:
    """``wheel -> why`` for each of ``wheels`` that no published tag of lets a node with
    ``glibc`` (None: not glibc, or unknown) install."""
    if glibc is None:
        return {}
    short = {}
    for w in wheels:
        needs = [GLIBC[t] for t in WHEEL_PLATFORMS[w] if t != "any"]
        if needs and min(needs) > glibc:
            need = ".".join(map(str, min(needs)))
            short[w] = f"{w} is published for glibc {need} and later; this node has " + ".".join(
                map(str, glibc)
            )
    return short


MIB = 1 << 20


def _device(cpu: bool):
    import torch

    return torch.device("cpu" if cpu else "cuda")


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _normalisation() -> dict:
    return {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


# ---- env ------------------------------------------------------------------------------------
def step_env(args) -> dict:
    import numpy
    import torch
    import torchvision

    out = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": numpy.__version__,
        "torch_cuda": torch.version.cuda,
        "cpus": len(os.sched_getaffinity(0)),
        "host": platform.node(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out |= {
            "gpu": props.name,
            "gpu_memory_gib": round(props.total_memory / (1 << 30), 1),
            "capability": f"{props.major}.{props.minor}",
        }
        with contextlib.suppress(OSError, subprocess.SubprocessError, IndexError):
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            out["driver"] = smi.stdout.split()[0]
    missing = {}
    for module, wheel in WHEELS.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing[module] = wheel
    out["missing_wheels"] = sorted(set(missing.values()))
    libc, version = platform.libc_ver()
    glibc = tuple(int(v) for v in version.split(".")[:2]) if libc == "glibc" else None
    out["glibc"] = version if glibc else None
    if out["missing_wheels"]:
        python = ".".join(platform.python_version_tuple()[:2])
        out["pip_download"] = pip_download(python, platform.machine(), out["missing_wheels"])
    out["glibc_short"] = glibc_short(out["missing_wheels"], glibc)
    broken = {}
    for module in ("imagenot.cli", "imagenot.train.loop", "imagenot.evaluate.robustness",
                   "imagenot.curate.encoders"):  # fmt: skip
        try:
            importlib.import_module(module)
        except Exception as exc:  # report every one, go on
            broken[module] = f"{type(exc).__name__}: {exc}"
    out["project_imports"] = broken or "ok"
    return out


# ---- plain ----------------------------------------------------------------------------------
PLAIN_LOOP = REPO / "benchmarks" / "gpu_plain_loop.py"


def plain_loop_args(cpu: bool) -> list[str]:
    """The plain loop's options: the paper's side, 8 + 25 steps; on the CPU (smoke run) the
    smoke run's side, 2 + 5 steps, float32 (``--cpu``; the loop itself unchanged)."""
    if cpu:
        return ["--cpu", "--size", str(CPU_SIZE), "--warmup", "2", "--steps", "5"]
    return ["--size", str(SIZE), "--warmup", "8", "--steps", "25"]


def step_plain(args) -> dict:
    specs = [f"{m}:{b}" for m, b in _batches(args).items()]
    done = subprocess.run(
        [*_python(), str(args.plain_loop), *specs, *plain_loop_args(args.cpu)],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=_die_with_parent,  # this step killed at its limit: the loop goes with it
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise RuntimeError(f"plain loop failed ({done.returncode}): {done.stderr[-2000:]}")
    return {"plain_loop": str(args.plain_loop), "models": json.loads(lines[-1])}


def _die_with_parent() -> None:
    """In a child before it starts: SIGKILL when this step's process dies
    (``imagenot.core.lifeline.bind_to_parent``), whatever process group the child ends in."""
    from imagenot.core.lifeline import bind_to_parent

    bind_to_parent(signal.SIGKILL)


# ---- step -----------------------------------------------------------------------------------
def _timed(fn, device, at_least: float, least_steps: int, most: int) -> tuple[float, int]:
    """Seconds per call of ``fn`` over at least ``least_steps`` calls and ``at_least``
    seconds (``most`` calls at most), after two untimed."""
    for _ in range(2):
        fn()
    _sync(device)
    start, n = time.perf_counter(), 0
    while n < most and (n < least_steps or time.perf_counter() - start < at_least):
        fn()
        n += 1
    _sync(device)
    return (time.perf_counter() - start) / n, n


def _step_model(model_name: str, batch: int, device, size: int, stored: int, cpu: bool) -> dict:
    """One model's step figures (``step`` in the module docstring)."""
    import torch

    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_train import bench_job

    from imagenot.train import feed_bench
    from imagenot.train.checkpoints import State
    from imagenot.train.feed import Feeder, InMemory, preprocess
    from imagenot.train.interrupts import Interrupts
    from imagenot.train.loop import train_one_epoch
    from imagenot.train.registry import build_model
    from imagenot.train.schedules import build_optimizer

    seconds, steps = (0.3, 4) if cpu else (1.5, 8)
    norm = _normalisation()
    layout = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    row: dict = {"batch": batch}
    g = torch.Generator().manual_seed(0)
    n = batch * 4
    host = torch.randint(0, 256, (n, 3, stored, stored), dtype=torch.uint8, generator=g)
    images, ys = host.to(device), torch.randint(0, 1000, (n,), generator=g).to(device)
    # (a) the step the feed check times (feed_bench.train_step): preprocess on the device
    model = build_model(model_name, 1000).to(device, memory_format=layout)
    optimizer = build_optimizer(list(model.parameters()), feed_bench.HYPERPARAMETERS)
    calls = iter(range(10**9))

    def one() -> None:
        k = next(calls) % 4
        x, y = images[k * batch : (k + 1) * batch], ys[k * batch : (k + 1) * batch]
        feed_bench.train_step(model, optimizer, x, y, device, size, norm)

    per, took = _timed(one, device, seconds, steps, 400)
    row |= {"step_img_per_s": round(batch / per, 1), "step_ms": round(1e3 * per, 3),
            "step_steps": took}  # fmt: skip
    # (b) the parts: preprocess alone, a pinned batch's copy to the device
    first = images[:batch]
    per, _ = _timed(lambda: preprocess(first, size, norm, layout), device, 0.2, 5, 200)
    row["preprocess_ms"] = round(1e3 * per, 3)
    # the same arithmetic resized in the stored layout, laid out channels-last once after: which
    # is faster on the GPU (the loop's preprocess converts first), and how far the two differ
    per, _ = _timed(lambda: _resize_then_layout(first, size, norm, layout), device, 0.2, 5, 200)
    row["preprocess_resize_first_ms"] = round(1e3 * per, 3)
    a, b = preprocess(first, size, norm, layout), _resize_then_layout(first, size, norm, layout)
    row["preprocess_resize_first_max_diff"] = float((a - b).abs().max())
    pinned = host[:batch].pin_memory() if device.type == "cuda" else host[:batch]
    per, _ = _timed(lambda: pinned.to(device, non_blocking=True), device, 0.2, 5, 200)
    row["h2d_ms"] = round(1e3 * per, 3)
    # (c) the loop's own train_one_epoch (seeding, schedule, sums, checks, tqdm) over the same
    # images held on the device, the same model: 4 batches per epoch, epochs until time is up
    job = dataclasses.replace(bench_job(model_name, size, batch, device.type), num_classes=1000)
    feeder = Feeder(InMemory(images, ys), 0, batch)
    state = State("gpu_check", "gpu_check")

    def epoch() -> None:
        state.batch = 0
        with Interrupts(0.0, None) as interrupts:
            train_one_epoch(model, model, optimizer, feeder, job, state, device,
                            lambda: None, interrupts)  # fmt: skip

    per, took = _timed(epoch, device, seconds, max(1, steps // 4), 100)
    row |= {"loop_img_per_s": round(4 * batch / per, 1), "loop_steps": 4 * took}
    return row


def _resize_then_layout(images, size: int, norm: dict, layout):
    """``feed.preprocess`` with the resize in the batch's own layout and one layout change after
    (the variant the GPU check times beside it)."""
    import torch.nn.functional as F

    from imagenot.train.feed import _scale_shift

    x = F.interpolate(images.float(), size=(size, size), mode="bilinear", antialias=True)
    scale, shift = _scale_shift(x.device, tuple(norm["mean"]), tuple(norm["std"]))
    return x.contiguous(memory_format=layout).mul_(scale).add_(shift)


def step_step(args) -> dict:
    import torch

    from imagenot.train.device import configure

    device = _device(args.cpu)
    configure(False, args.threads)
    size, stored = (CPU_SIZE, CPU_STORED) if args.cpu else (SIZE, STORED)
    out = {}
    for model_name, batch in _batches(args).items():
        out[model_name] = _step_model(model_name, batch, device, size, stored, args.cpu)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(model_name, out[model_name], flush=True)
    return {"models": out}


# ---- decode ---------------------------------------------------------------------------------
def _jpegs(n: int, side: int) -> tuple[list[bytes], list[str]]:
    """``n`` photograph-like JPEGs: as our datasets store them (``acquire.images.encode_jpeg``:
    RGB, baseline, the schema's ``acquire.jpeg_quality``) for three in four, and one kind in
    four of what other JPEGs may be (4:4:4, progressive, grayscale) in turn."""
    import io

    import numpy as np
    from PIL import Image

    from imagenot.acquire.images import encode_jpeg
    from imagenot.core.config import schema_default

    quality = schema_default("acquire.jpeg_quality")
    others = [("4:4:4", {"subsampling": 0}), ("progressive", {"progressive": True}),
              ("grayscale", {})]  # fmt: skip
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:side, 0:side] / side
    out, names = [], []
    for i in range(n):
        a, b, c = rng.uniform(0, 6, 3)
        base = np.stack([np.sin(a * xx + b * yy + c + k) for k in range(3)], -1)
        arr = ((base * 0.4 + 0.5) * 255 + rng.normal(0, 12, base.shape)).clip(0, 255)
        image = Image.fromarray(arr.astype(np.uint8))
        if i % 4:
            out.append(encode_jpeg(image, quality))
            names.append("as stored")
            continue
        name, options = others[(i // 4) % len(others)]
        if name == "grayscale":
            image = image.convert("L")
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=quality, **options)
        out.append(buf.getvalue())
        names.append(name)
    return out, names


def step_decode(args) -> dict:
    import torch

    from imagenot.train.decode import DecodeAhead, EncodedImages, decode_batch, decode_jpegs
    from imagenot.train.device import configure

    device = _device(args.cpu)
    configure(False, args.threads)
    side, batch, n_batches = (64, 16, 12) if args.cpu else (STORED, 256, 160)
    jpegs, kinds = _jpegs(2 * batch, side)
    data = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    cpu = torch.stack(decode_jpegs(data, torch.device("cpu")))
    out: dict = {"side": side, "batch": batch, "batches": n_batches}
    # 1. pixels: the device's decoder against libjpeg-turbo, per kind of JPEG
    pixels = {}
    for kind in dict.fromkeys(kinds):
        rows = [i for i, k in enumerate(kinds) if k == kind]
        try:
            got = decode_batch([data[i] for i in rows], None, device).cpu()
        except RuntimeError as exc:  # a kind the device's decoder refuses: a finding
            pixels[kind] = {"error": " ".join(str(exc).split())[:300]}
            continue
        d = (got.int() - cpu[rows].int()).abs().float()
        pixels[kind] = {"images": len(rows), "max_abs": int(d.max()),
                        "mean_abs": round(float(d.mean()), 4),
                        "over_2": round(float((d > 2).float().mean()), 5),
                        "identical": int((d.flatten(1).amax(1) == 0).sum())}  # fmt: skip
    out["pixels"] = pixels
    stored = [i for i, k in enumerate(kinds) if k == "as stored"]
    encoded = []
    for k in range(2):  # batches of JPEGs as the datasets store them, as the workers send them
        rows = [stored[(k * batch + j) % len(stored)] for j in range(batch)]
        part, _ = EncodedImages.collate([(data[i], 0) for i in rows])
        encoded.append(part.pin_memory() if device.type == "cuda" else part)
    quiet = torch.cat([decode_batch(e, None, device) for e in encoded]).cpu()
    # 2. the decoder's rate alone (the synchronous path: waits around each batch)
    per, _ = _timed(lambda: decode_batch(encoded[0], None, device), device, 1.0, 5, 200)
    out["decode_img_per_s"] = round(batch / per, 1)
    # 3. decoding ahead of a training step for many batches: each batch's checksum against the
    # quiet decode's, the device's memory from the 10th batch on
    want = [q.to(torch.float64).sum(dim=(1, 2, 3)) for q in quiet.split(batch)]
    from imagenot.train.registry import build_model

    model = build_model("resnet18" if not args.cpu else "resnet_mini", 1000).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(64 if not args.cpu else 4, 3, 112, 112, device=device)
    y = torch.zeros(len(x), dtype=torch.int64, device=device)
    items = ((encoded[k % 2], torch.zeros(batch)) for k in range(n_batches))
    ahead = DecodeAhead(device)
    corrupted, used, allocated = [], [], []
    start = time.perf_counter()
    for k, (images, _) in enumerate(ahead.serve(items)):
        with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
            loss = torch.nn.functional.cross_entropy(model(x), y)  # queued work on the stream
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        got = images.to(torch.float64).sum(dim=(1, 2, 3)).cpu()
        if not torch.equal(got, want[k % 2]):
            corrupted.append(k)
        if device.type == "cuda" and k >= 10:
            free, total = torch.cuda.mem_get_info(device)
            used.append(total - free)
            allocated.append(torch.cuda.memory_allocated(device))
    _sync(device)
    ahead.close()
    out["ahead_batches_per_s"] = round(n_batches / (time.perf_counter() - start), 2)
    out["corrupted_batches"] = corrupted
    if used:
        out["device_used_mib_first_last"] = [round(used[0] / MIB), round(used[-1] / MIB)]
        out["device_used_growth_mib"] = round((max(used) - used[0]) / MIB, 1)
        out["allocated_growth_mib"] = round((max(allocated) - allocated[0]) / MIB, 1)
    return out


# ---- eval -----------------------------------------------------------------------------------
def step_eval(args) -> dict:
    """The costliest evaluation the paper runs: the published EfficientNet-V2-L at its own 480 px
    (the shipped facts' resize, crop and bicubic), in float32 with TF32 off as a published
    weight is evaluated (``evaluate_batches(published=True)``), over the 17 transformations of
    config/paper.yaml; beside it the same batch as a model trained here runs (bf16 autocast on
    CUDA). Random weights of the same architecture: no download on a GPU node, the same
    arithmetic."""
    import torch

    from imagenot.core.config import load_config
    from imagenot.evaluate.robustness import evaluate_batches
    from imagenot.evaluate.transforms import build_transforms
    from imagenot.train.decode import decode_jpegs
    from imagenot.train.device import configure
    from imagenot.train.facts import Preprocessing, weight_facts
    from imagenot.train.registry import MODELS, build_model

    device = _device(args.cpu)
    configure(False, args.threads)
    config = load_config(REPO / "config" / "paper.yaml")
    transforms = build_transforms(config["evaluate"]["transforms"])
    if args.cpu:  # the smoke run: a tiny model through the same published path
        name, n = "resnet_mini", 4
        prep = Preprocessing((0.5,) * 3, (0.5,) * 3, 64, 72, "bicubic")
    else:
        name, n = EVAL_MODEL, EVAL_IMAGES
        prep = weight_facts(MODELS[name].weights, name).preprocessing
    side = max(prep.crop_size, prep.resize_size or 0)  # stored at least at the model's side
    jpegs, _ = _jpegs(n, side)
    data = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    images = torch.stack(decode_jpegs(data, torch.device("cpu")))
    labels = torch.arange(n) % 10
    keys = [f"k{i:04d}" for i in range(n)]
    torch.manual_seed(0)
    model = build_model(name, 1000).to(device).eval()
    out: dict = {"model": f"{name} (random weights)", "images": n, "transforms": len(transforms),
                 "crop_size": prep.crop_size, "resize_size": prep.resize_size,
                 "interpolation": prep.interpolation}  # fmt: skip
    runs = {}
    for label, published in (("float32", True), ("bf16", False)):

        def run(batch, kinds=transforms, published=published):
            return evaluate_batches(model, [batch], kinds, 0, prep, device,
                                    published=published)  # fmt: skip

        run((images, labels, keys), transforms[:2])  # warm: cuDNN tunes the batch's shapes
        _sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        runs[label] = run((images, labels, keys)).table()
        _sync(device)
        seconds = time.perf_counter() - start
        out[f"{label}_img_per_s"] = round(n * len(transforms) / seconds, 1)
        if device.type == "cuda":
            peak = torch.cuda.max_memory_allocated(device) / (1 << 30)
            out[f"{label}_peak_gib"] = round(peak, 2)
    a, b = runs["bf16"], runs["float32"]
    pred = [c for c in a.column_names if "pred" in c]
    if pred:
        pairs = zip(a[pred[0]].to_pylist(), b[pred[0]].to_pylist(), strict=True)
        same = sum(x == y for x, y in pairs)
        out["prediction_agreement"] = round(same / len(a), 4)
    # what the reference's evaluation takes at this rate (an estimate from this measurement):
    # the 50,000 ILSVRC-2012 validation images under every transformation, one GPU
    rate = out["float32_img_per_s"]
    out["reference_gpu_hours_est"] = round(50_000 * len(transforms) / rate / 3600, 2)
    if device.type != "cuda":
        out["note"] = "on the CPU both run float32 (bf16 autocast is CUDA's only)"
    return out


# ---- embed ----------------------------------------------------------------------------------
def _image_encoder(device, cpu: bool):
    """A CLIP ViT-L/14-shaped image encoder with random weights, ``(encode, prepare, kind)`` as
    ``imagenot.diagnostics.embed.clip_encoder`` gives them: transformers'
    ``CLIPVisionModelWithProjection`` and its ``CLIPImageProcessor`` (OpenAI's defaults: the
    processor ``embed-images`` loads) where transformers imports (it is in the lock), else
    torchvision's ``VisionTransformer`` in the same shape (patch 14, 24 layers, width 1024, 16
    heads, MLP 4096, a 768-wide output) with the resize and normalisation done in torch."""
    import torch
    import torch.nn.functional as F

    side, layers, dim, heads, mlp, out = (
        (56, 2, 64, 4, 128, 32) if cpu else (224, 24, 1024, 16, 4096, 768)
    )
    mean, std = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
    torch.manual_seed(0)
    try:
        from transformers import (
            CLIPImageProcessor,
            CLIPVisionConfig,
            CLIPVisionModelWithProjection,
        )

        config = CLIPVisionConfig(hidden_size=dim, intermediate_size=mlp, projection_dim=out,
                                  num_hidden_layers=layers, num_attention_heads=heads,
                                  image_size=side, patch_size=14, hidden_act="quick_gelu")  # fmt: skip
        with device:  # the weights made where they run
            model = CLIPVisionModelWithProjection(config).eval()
        processor = CLIPImageProcessor(size={"shortest_edge": side},
                                       crop_size={"height": side, "width": side})  # fmt: skip

        def encode(x):
            return model(pixel_values=x).image_embeds

        def prepare(images):
            pixels = processor(images=images, return_tensors="pt")["pixel_values"]
            return pixels.to(device=images.device, dtype=torch.float32)

        return encode, prepare, "transformers.CLIPVisionModelWithProjection"
    except ImportError:
        pass
    from torchvision.models import VisionTransformer

    with device:
        model = VisionTransformer(side, 14, layers, heads, dim, mlp, num_classes=out).eval()
    scale = torch.tensor(std, device=device).view(1, 3, 1, 1)
    shift = torch.tensor(mean, device=device).view(1, 3, 1, 1)

    def prepare_torch(images):
        x = F.interpolate(images.float().div(255), size=(side, side), mode="bicubic",
                          antialias=True)  # fmt: skip
        return (x - shift) / scale

    return model, prepare_torch, "torchvision.models.VisionTransformer"


def step_embed(args) -> dict:
    """Image embedding as ``imagenot embed-images`` runs it (``diagnostics.embed.embed``: the
    schema's batch, float32) with a CLIP ViT-L/14-shaped encoder (:func:`_image_encoder`) over
    stored 256 px JPEGs decoded on the CPU."""
    import torch

    from imagenot.core.config import schema_default
    from imagenot.diagnostics.embed import embed
    from imagenot.train.decode import decode_jpegs
    from imagenot.train.device import configure

    device = _device(args.cpu)
    configure(False, args.threads)
    n, side = (8, 64) if args.cpu else (EMBED_IMAGES, STORED)
    batch = 4 if args.cpu else schema_default("diagnostics.image_similarity.batch_size")
    jpegs, _ = _jpegs(min(n, 256), side)
    data = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    decoded = torch.stack(decode_jpegs(data, torch.device("cpu")))
    images = decoded.repeat((n + len(decoded) - 1) // len(decoded), 1, 1, 1)[:n]
    encode, prepare, kind = _image_encoder(device, args.cpu)
    embed(images[: 2 * batch], encode, prepare, batch, device.type)  # warm
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    vectors = embed(images, encode, prepare, batch, device.type)
    _sync(device)
    seconds = time.perf_counter() - start
    out = {"model": f"CLIP ViT-L/14 shape, random weights ({kind})", "images": n,
           "batch": batch, "img_per_s": round(n / seconds, 1), "dim": int(vectors.shape[1])}  # fmt: skip
    if device.type == "cuda":
        out["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / (1 << 30), 2)
    return out


# ---- caption --------------------------------------------------------------------------------
def _caption_model(device, cpu: bool):
    """A RoBERTa-large-shaped encoder with random weights (``(ids, mask) -> last hidden``):
    Hugging Face's where transformers imports, else torch's layers in the same shape."""
    import torch

    layers, dim, heads, ff = (2, 64, 4, 128) if cpu else (24, 1024, 16, 4096)
    torch.manual_seed(0)
    try:
        from transformers import RobertaConfig, RobertaModel

        config = RobertaConfig(vocab_size=50265, hidden_size=dim, num_hidden_layers=layers,
                               num_attention_heads=heads, intermediate_size=ff,
                               max_position_embeddings=514, type_vocab_size=1)  # fmt: skip
        model = RobertaModel(config, add_pooling_layer=False).to(device).eval()
        return (lambda ids, mask: model(input_ids=ids, attention_mask=mask).last_hidden_state,
                "transformers.RobertaModel")  # fmt: skip
    except ImportError:
        pass
    embed = torch.nn.Embedding(50265, dim).to(device)
    block = torch.nn.TransformerEncoderLayer(dim, heads, ff, activation="gelu", batch_first=True)
    encoder = torch.nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
    encoder = encoder.to(device).eval()
    return (lambda ids, mask: encoder(embed(ids), src_key_padding_mask=~mask.bool()),
            "torch.nn.TransformerEncoder")  # fmt: skip


def step_caption(args) -> dict:
    import numpy as np
    import torch

    from imagenot.curate.encoders import EncoderSpec, TorchEncoder

    device = _device(args.cpu)
    forward, kind = _caption_model(device, args.cpu)
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(5000)]
    n = 64 if args.cpu else 4096
    captions = [" ".join(rng.choice(words, rng.integers(3, 60))) for _ in range(n)]

    class Encoder(TorchEncoder):
        """The project's TorchEncoder (token-count batches, autocast by precision, inference
        mode) over the stand-in model; one token per word, as a tokenizer gives about."""

        dim = 64 if args.cpu else 1024

        def token_lengths(self, texts):
            return np.asarray([min(len(t.split()) + 2, self.spec.max_seq_length) for t in texts])

        def _encode_batch(self, texts):
            longest = int(max(self.token_lengths(texts)))
            ids = torch.zeros((len(texts), longest), dtype=torch.int64)
            mask = torch.zeros((len(texts), longest), dtype=torch.int64)
            for i, t in enumerate(texts):
                k = min(len(t.split()) + 2, longest)
                words = [hash(w) % 50000 + 3 for w in t.split()][: k - 2]
                ids[i, :k] = torch.tensor([*words, 0, 2])[:k]
                mask[i, :k] = 1
            ids, mask = ids.to(self.device), mask.to(self.device)
            hidden = forward(ids, mask).float()
            m = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1)
            return torch.nn.functional.normalize(pooled, dim=1).cpu().numpy()

    out: dict = {"model": f"RoBERTa-large shape, random weights ({kind})", "captions": n}
    vectors = {}
    for precision in ("float16", "float32"):
        spec = EncoderSpec(backend="gpu_check", model="roberta-large-shape", local_path=None,
                           pooling="mean", device=device.type, precision=precision,
                           batch_size=512 if not args.cpu else 16, max_seq_length=128)  # fmt: skip
        encoder = Encoder(spec)
        encoder.encode(captions[:32])  # warm
        _sync(device)
        start = time.perf_counter()
        vectors[precision] = encoder.encode(captions)
        _sync(device)
        out[f"{precision}_captions_per_s"] = round(n / (time.perf_counter() - start), 1)
    cos = (vectors["float16"] * vectors["float32"]).sum(1)
    out |= {"cosine_min": round(float(cos.min()), 5), "cosine_mean": round(float(cos.mean()), 5)}
    if device.type == "cuda":
        out["peak_gib"] = round(torch.cuda.max_memory_allocated(device) / (1 << 30), 2)
    else:
        out["note"] = "on the CPU both run float32 (autocast is CUDA's only)"
    return out


# ---- main -----------------------------------------------------------------------------------
def _python() -> list[str]:
    """This interpreter with its isolation flags (a check run with ``python -S`` stays so)."""
    return [sys.executable, *(["-S"] if sys.flags.no_site else [])]


def _batches(args) -> dict[str, int]:
    table = CPU_BATCHES if args.cpu else BATCHES
    if args.models:
        return {m: table.get(m, 256) for m in args.models.split(",")}
    return dict(table)


STEPS = {
    "env": step_env,
    "plain": step_plain,
    "step": step_step,
    "decode": step_decode,
    "eval": step_eval,
    "caption": step_caption,
    "embed": step_embed,
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("step", choices=sorted(STEPS))
    p.add_argument("--out", required=True, help="the step's JSON")
    p.add_argument("--cpu", action="store_true", help="the smoke run: CPU, tiny sizes")
    p.add_argument("--models", help="comma-separated (default: BATCHES)")
    p.add_argument("--threads", type=int, default=8, help="torch threads (a job's cores)")
    p.add_argument(
        "--plain-loop",
        default=str(PLAIN_LOOP),
        help="the reference plain loop (default: benchmarks/gpu_plain_loop.py)",
    )
    args = p.parse_args()
    start = time.perf_counter()
    result = STEPS[args.step](args)
    result["seconds"] = round(time.perf_counter() - start, 1)
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result, default=str)[:4000])


if __name__ == "__main__":
    main()
