"""A final run's folder as the workflow writes it, for tests of its readers (evaluate, the
diagnostics' backbone, the run summary): ``model.safetensors`` by the one weights writer (its
digest stored) and ``result.json`` by the one record writer (sealed), at the train stage's
path under ``root`` (``root/results/train/{dataset}/{protocol}/{model}/final/seed-{seed}``)."""

from __future__ import annotations

from pathlib import Path

from imagenot.io import sha256_file
from imagenot.train.paths import FINAL_DIR
from imagenot.train.records import write_record

NORMALISATION = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def write_final_run(
    root: Path,
    model,
    *,
    dataset: str = "toy",
    protocol: str = "st",
    name: str = "resnet_mini",
    seed: int = 0,
    num_classes: int = 3,
    image_size: int = 32,
    fingerprint: str = "0" * 64,
    **extra,
) -> Path:
    """Write ``model`` (an nn.Module, or None to leave the weights as they are) and its sealed
    record; return the run's folder."""
    from imagenot.train.checkpoints import save_weights

    run = dict(dataset=dataset, protocol=protocol, model=name, seed=seed)
    folder = root / FINAL_DIR.format(**run)
    if model is not None:
        save_weights(model, folder / "model.safetensors")
    record = {
        **run,
        "num_classes": num_classes,
        "image_size": image_size,
        "normalisation": NORMALISATION,
        "dataset_fingerprint": fingerprint,
        "chance_accuracy": 100.0 / num_classes,
        "weights_sha256": sha256_file(folder / "model.safetensors"),
        **extra,
    }
    write_record(record, folder / "result.json")
    return folder
