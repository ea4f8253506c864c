"""Jobs that need no torch stay torch-free (issue 19): importing torch costs about 2 CPU-seconds
and torchvision (with the torch._dynamo its ops package pulls in) about 3.5 per process, paid by
every Snakemake job that imports them. Only the modules that train, evaluate or fetch images
(img2dataset imports torch through webdataset) may import torch when imported."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import imagenot

# Modules whose import may pull in torch: their jobs run torch anyway.
TORCH_MODULES = {
    "imagenot.acquire.guarded",  # img2dataset's downloader (webdataset imports torch)
    "imagenot.evaluate.metrics",
    "imagenot.evaluate.robustness",
    "imagenot.evaluate.transforms",
    "imagenot.train.checkpoints",
    "imagenot.train.device",
    "imagenot.train.distributed",
    "imagenot.train.feed",
    "imagenot.train.jobs",
    "imagenot.train.loop",
    "imagenot.train.schedules",
}
HEAVY = ("torch", "torchvision", "timm")

CHECK = """
import importlib, sys
heavy = {heavy!r}
for name in sys.argv[1:]:
    importlib.import_module(name)
    pulled = [m for m in heavy if m in sys.modules]
    if pulled:
        print(name, *pulled)
        break
"""


def all_modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(imagenot.__path__, "imagenot."))


def test_the_allowlist_names_existing_modules():
    assert set(all_modules()) >= TORCH_MODULES


def test_modules_outside_training_and_evaluation_import_no_torch():
    light = [name for name in all_modules() if name not in TORCH_MODULES]
    assert "imagenot.cli" in light and "imagenot.acquire.dataset" in light
    run = subprocess.run(
        [sys.executable, "-c", CHECK.format(heavy=HEAVY), *light],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # the first module (in this order) after whose import torch, torchvision or timm is loaded
    assert run.stdout.strip() == "", f"imports a heavy module: {run.stdout.strip()}"
