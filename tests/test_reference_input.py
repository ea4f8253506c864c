"""The published reference's input is torchvision's protocol on the original image.

torchvision measured its published accuracies with ``weights.transforms()`` on the original
validation files, decoded by Pillow (its ImageFolder loader; the reference scripts' default
backend). A dataset published weights are evaluated on keeps its test images' original files
beside the stored square copy (``originals/``, :mod:`imagenot.core.dataset`), and the evaluation of
published weights reads them. Measured here on real-like photos of odd sizes (real photos where
the venv ships them, generated scenes otherwise): the input a weight sees against torchvision's,
in levels of 255, for a 224 px and a 480 px weight; the stored copy's gap is measured too.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import load_benchmark, materialise
from PIL import Image
from torchvision.models import get_weight
from torchvision.transforms import functional as TF

from imagenot.train.facts import weight_facts

torch.set_num_threads(1)

WNIDS = ("n01440764", "n01443537")
# (weights, model), the registry's: a 224 px weight (resize 256, bilinear), one resized to 232
# (ConvNeXt-L), and a 480 px one (EfficientNet-V2-L)
WEIGHTS = (
    ("ResNet18_Weights.IMAGENET1K_V1", "resnet18"),
    ("ConvNeXt_Large_Weights.IMAGENET1K_V1", "convnext_large"),
    ("EfficientNet_V2_L_Weights.IMAGENET1K_V1", "efficientnet_v2_l"),
)
GOAL_MEAN, GOAL_P99 = 0.5, 4.0  # levels of 255


@pytest.fixture(scope="module")
def photos() -> list[bytes]:
    from photos import jpeg, photo

    bench = load_benchmark("bench_reference_input")  # its photos: the same inputs it times
    generated = [jpeg(photo(w, h, seed=i), 90) for i, (w, h) in enumerate(bench.SIZES)]
    return bench.shipped_photos() + generated


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, photos):
    """An ILSVRC-2012 folder of the photos (validation images: the test split), materialised as
    the paper's reference dataset is: 480 px copies, originals kept."""
    root = tmp_path_factory.mktemp("ilsvrc")
    for i, data in enumerate(photos):
        wnid = WNIDS[i % 2]
        for split in ("train", "val"):
            folder = root / split / wnid
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{split}_{i:04d}.JPEG").write_bytes(data)
    out = tmp_path_factory.mktemp("datasets") / "imagenet"
    materialise("imagenet", root, out, image_size=480, jpeg_quality=95, keep_originals=True)
    return root, out


def _reference(data: bytes, preprocessing) -> torch.Tensor:
    """torchvision's input (uint8 levels as float, before normalisation) for an original file:
    ``weights.transforms()`` on the Pillow image its ImageFolder loader decodes."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    p = preprocessing
    image = TF.center_crop(
        TF.resize(image, [p.resize_size], TF.InterpolationMode(p.interpolation)), [p.crop_size]
    )
    return TF.pil_to_tensor(image).float()


def _inputs(out: Path, preprocessing, originals: bool) -> dict[str, torch.Tensor]:
    """The image each test key's model sees (levels of 255, before normalisation), as the
    evaluation makes it: from the originals, or the weight's protocol on the stored copy."""
    from imagenot.evaluate.robustness import dataset_batches

    seen = {}
    batches = dataset_batches(out, "test", 4, originals=preprocessing if originals else None)
    for x, _labels, keys in batches:
        if originals:
            assert x.dtype == torch.uint8  # the workers made the model's image
            x = x.float()
        else:
            x = preprocessing.geometry(x.float() / 255) * 255
        seen |= dict(zip(keys, x, strict=True))
    return seen


@pytest.mark.parametrize("weights, model", WEIGHTS)
def test_the_reference_sees_torchvisions_input_of_the_original_image(dataset, weights, model):
    """Goal: mean <= 0.5 and 99th percentile <= 4 levels against torchvision's input, for a 224
    px and a 480 px weight. The originals meet it (exactly); the stored square copy does not."""
    import pyarrow.parquet as pq

    root, out = dataset
    p = weight_facts(weights, model).preprocessing
    # the reference's own check: torchvision's whole transform is this input, normalised
    sample = next(root.glob("val/*/*.JPEG")).read_bytes()
    full = get_weight(weights).transforms()(Image.open(io.BytesIO(sample)).convert("RGB"))
    mean, std = torch.tensor(p.mean).view(3, 1, 1), torch.tensor(p.std).view(3, 1, 1)
    torch.testing.assert_close(full, (_reference(sample, p) / 255 - mean) / std)

    manifest = pq.read_table(out / "manifest.parquet").to_pandas()
    test = manifest[manifest.split == "test"]
    expected = {
        k: _reference((root / s).read_bytes(), p)
        for k, s in zip(test.key, test.source, strict=True)
    }
    gaps = {}
    for originals in (True, False):
        seen = _inputs(out, p, originals)
        assert set(seen) == set(expected)
        d = torch.cat([(seen[k] - expected[k]).abs().flatten() for k in expected]).numpy()
        gaps[originals] = (float(d.mean()), float(np.quantile(d, 0.99)))
    print(f"{weights}: originals {gaps[True]}, stored copy {gaps[False]} (mean, p99 levels)")
    assert gaps[True][0] <= GOAL_MEAN and gaps[True][1] <= GOAL_P99
    assert gaps[True] == (0.0, 0.0)  # the same decoder and the same resize: exact
    assert gaps[False][0] > GOAL_MEAN or gaps[False][1] > GOAL_P99  # what the copy costs


def test_the_originals_are_the_files_byte_for_byte(dataset):
    """The stored originals are the source files (their sha256 in the manifest, part of the
    dataset's fingerprint); other splits keep none. Their disk and decode cost against the
    copies' is benchmarks/bench_reference_input.py's (docs/contracts.md)."""
    import hashlib

    import pyarrow.parquet as pq

    from imagenot.core.dataset import has_originals

    root, out = dataset
    manifest = pq.read_table(out / "manifest.parquet").to_pandas()
    test, train = manifest[manifest.split == "test"], manifest[manifest.split == "train"]
    for source, digest, length in zip(
        test.source, test.original_sha256, test.original_length, strict=True
    ):
        data = (root / source).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest and len(data) == length
    assert train.original_shard.isna().all()
    assert has_originals(out, "test") and not has_originals(out, "train")


def test_published_weights_are_evaluated_on_the_originals(dataset, monkeypatch, tmp_path, caplog):
    """evaluate_checkpoint on a published run reads the originals (the workers make the image
    the model sees: torchvision's); a run trained here reads the stored copy; a published run on
    a dataset without originals is warned about and reads the copy."""
    import json
    import logging

    import pyarrow.parquet as pq

    from imagenot.core.config import validate_config
    from imagenot.evaluate import robustness
    from imagenot.evaluate.files import RobustnessFiles
    from imagenot.evaluate.settings import RobustnessSettings

    root, out = dataset
    weights, model = WEIGHTS[0]
    p = weight_facts(weights, model).preprocessing

    class Recorder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seen, self.fc = [], torch.nn.Linear(3, 1000)

        def forward(self, x):
            self.seen.append(x)
            return self.fc(x.mean(dim=(2, 3)))

    recorder = Recorder()
    info = {
        "model": model, "dataset": "imagenet", "protocol": "st", "seed": 0,
        "num_classes": 1000, "image_size": 224, "source": "published", "weights": weights,
        "preprocessing": p.to_dict(), "normalisation": p.normalisation(),
        "published_top1": 69.758, "published_source": "torchvision",
    }  # fmt: skip

    def load_checkpoint(path, result, beside=()):
        """The recorder as the run's network; its record names the data it is evaluated on
        (``beside``: the outputs, then the dataset folder), as a run made on it does."""
        from imagenot.core.dataset import read_fingerprint

        return recorder, {**info, "dataset_fingerprint": read_fingerprint(beside[-1])}

    monkeypatch.setattr(robustness, "load_checkpoint", load_checkpoint)
    config = validate_config({"evaluate": {"transforms": {}}})
    settings = RobustnessSettings.from_config(config)
    settings = RobustnessSettings(**{**settings.__dict__, "batch_size": 64, "device": "cpu"})
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps(info))

    def files(dataset, name):
        return RobustnessFiles(
            model=run / "model.safetensors", result=run / "result.json",
            manifest=dataset / "manifest.parquet", classes=dataset / "classes.txt",
            fingerprint=dataset / "fingerprint.txt", robustness=tmp_path / f"r{name}.parquet",
            per_image=tmp_path / f"p{name}.parquet",
        )  # fmt: skip

    robustness.evaluate_checkpoint(files(out, ""), settings, workers=0, gpu_job=False)
    test = pq.read_table(out / "manifest.parquet").to_pandas().query("split == 'test'")
    mean, std = torch.tensor(p.mean).view(3, 1, 1), torch.tensor(p.std).view(3, 1, 1)
    expected = torch.stack(
        [(_reference((root / s).read_bytes(), p) / 255 - mean) / std for s in test.source]
    )
    torch.testing.assert_close(recorder.seen[0], expected, rtol=0, atol=1e-5)

    # the same published run on a copy without originals: the copy, and a warning
    bare = tmp_path / "bare"
    materialise("imagenet", root, bare, image_size=480, jpeg_quality=95)
    recorder.seen.clear()
    with caplog.at_level(logging.WARNING, logger="imagenot.evaluate.reference"):
        robustness.evaluate_checkpoint(files(bare, "2"), settings, workers=0, gpu_job=False)
    assert any("stores no originals" in r.getMessage() for r in caplog.records)
    assert (recorder.seen[0] - expected).abs().mean() > 0.5 / 255 / min(p.std)
