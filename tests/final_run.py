"""A final run's folder as the workflow writes it, for tests of its readers (evaluate, the
diagnostics' backbone, the run summary): ``model.safetensors`` by the one weights writer (its
digest stored) and ``result.json`` by the one record writer (sealed), at the train stage's
path under ``root`` (``root/results/train/{dataset}/{protocol}/{model}/final/seed-{seed}``)."""

from __future__ import annotations

from pathlib import Path

from imagenot.core.io import sha256_file
from imagenot.train.paths import FINAL_DIR
from imagenot.train.records import FinalRecord, write_final

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
    record; return the run's folder. A trained run (``extra`` has no ``source: published``)
    records the trial its run's selection selected, with its hyperparameters, as
    ``train-final`` does: the selection is written beside the run when missing
    (:func:`trial_records.selected`)."""
    from trial_records import selected

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
    }
    if extra.get("source") != "published":
        record |= selected(folder.parents[1], name)
    record |= extra
    write_final(FinalRecord.of(record), folder / "result.json")
    return folder


def write_toy_dataset(ds_dir: Path) -> Path:
    """A 12-image dataset of 3 classes at ``ds_dir`` (6 test images in one shard)."""
    import torch
    from torchvision.io import encode_jpeg

    from imagenot.acquire.dataset import Record, write_dataset

    g = torch.Generator().manual_seed(1)
    records = []
    for i in range(12):
        img = torch.randint(0, 256, (3, 20, 20), dtype=torch.uint8, generator=g)
        jpeg = bytes(encode_jpeg(img, quality=90).numpy())
        records.append(Record(f"k{i:03d}", f"c{i % 3}", "test" if i % 2 else "train", jpeg))
    write_dataset(ds_dir, records, ["c0", "c1", "c2"], shard_size=5000)
    return ds_dir
