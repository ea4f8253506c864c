"""Robustness evaluation: identical images for every model, metrics, intervals, outputs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from final_run import write_final_run
from statsmodels.stats.proportion import proportion_confint

from imagenot.core.config import validate_config
from imagenot.core.dataset import DatasetError
from imagenot.evaluate import plan
from imagenot.evaluate.files import RobustnessFiles
from imagenot.evaluate.metrics import robust_accuracy, topk_correct
from imagenot.evaluate.robustness import (
    evaluate_batches,
    evaluate_checkpoint,
    evaluate_tensors,
    summarise,
    tensor_batches,
)
from imagenot.evaluate.settings import RobustnessSettings as Settings
from imagenot.evaluate.transforms import build_transforms, names
from imagenot.train.facts import Preprocessing
from imagenot.train.records import RecordError

torch.set_num_threads(1)

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
N, CLASSES, SIZE = 10, 6, 16
# a model trained here at SIZE: the whole stored (20 px) image resized, ImageNet's statistics
PREP = Preprocessing.trained({"mean": MEAN, "std": STD}, SIZE)


@pytest.fixture(scope="module")
def settings() -> Settings:
    config = validate_config({"seed": 3})
    return Settings.from_config(config)


@pytest.fixture(scope="module")
def data():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (N, 3, 20, 20), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, CLASSES, (N,), generator=g)
    keys = [f"img-{i:03d}" for i in range(N)]
    return images, labels, keys


def tiny_model(seed: int, hidden: int = 4) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, hidden, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * hidden, CLASSES),
    ).eval()


class Recorder(torch.nn.Module):
    """Wraps a model and keeps every input batch it sees."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        self.seen: list[torch.Tensor] = []

    def forward(self, x):
        self.seen.append(x.clone())
        return self.inner(x)


def _sorted_inputs(rec: Recorder) -> torch.Tensor:
    x = torch.cat(rec.seen)
    weights = torch.rand(x[0].numel(), generator=torch.Generator().manual_seed(0))
    return x[torch.argsort(x.flatten(1) @ weights)]  # an order no flip or shuffle preserves


def test_two_models_see_identical_transformed_images(settings, data):
    images, labels, keys = data
    transforms = build_transforms(settings.transforms)
    a, b = Recorder(tiny_model(0)), Recorder(tiny_model(1, hidden=7))
    evaluate_batches(a, tensor_batches(images, labels, keys, 4), transforms, 3, PREP)
    evaluate_batches(b, tensor_batches(images, labels, keys, 3), transforms, 3, PREP)
    xa, xb = _sorted_inputs(a), _sorted_inputs(b)
    assert xa.shape == xb.shape and xa.shape[-2:] == (SIZE, SIZE)
    torch.testing.assert_close(xa, xb, atol=1e-5, rtol=0)
    # a different evaluation seed draws different images
    c = Recorder(tiny_model(0))
    evaluate_batches(c, tensor_batches(images, labels, keys, 4), transforms, 4, PREP)
    xc = _sorted_inputs(c)
    assert xc.shape != xa.shape or not torch.allclose(xc, xa)


def test_per_image_results_do_not_depend_on_batching(settings, data):
    images, labels, keys = data
    model = tiny_model(0)
    one = evaluate_tensors(model, images, labels, keys, settings, PREP)
    other = evaluate_tensors(
        model,
        images,
        labels,
        keys,
        Settings(**{**settings.__dict__, "batch_size": 3}),
        PREP,
    )
    assert one.num_rows == N * len(names())
    assert one.column_names == ["key", "transform", "label", "pred", "correct", "correct_top5"]
    assert one.equals(other)
    assert list(dict.fromkeys(one["transform"].to_pylist())) == list(names())


def test_gated_images_reuse_identity_predictions(settings, data):
    images, labels, keys = data
    table = evaluate_tensors(tiny_model(2), images, labels, keys, settings, PREP)
    preds = {
        (k, t): p
        for k, t, p in zip(
            *(table[c].to_pylist() for c in ("key", "transform", "pred")), strict=True
        )
    }
    never = Settings(
        **{**settings.__dict__, "transforms": {**settings.transforms, "Invert": {"p": 0.0}}}
    )
    table0 = evaluate_tensors(tiny_model(2), images, labels, keys, never, PREP)
    for key, t, p in zip(
        *(table0[c].to_pylist() for c in ("key", "transform", "pred")), strict=True
    ):
        if t == "Invert":
            assert p == preds[(key, "Identity")]


def test_topk_on_hand_made_logits():
    logits = torch.tensor(
        [
            [0.9, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0],  # label 0: top-1
            [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7],  # label 2: 5th highest -> top-5 only
            [0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1],  # label 5: 6th highest -> neither
            [0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0],  # label 3: top-1
        ]
    )
    labels = torch.tensor([0, 2, 5, 3])
    assert topk_correct(logits, labels, 1).tolist() == [True, False, False, True]
    assert topk_correct(logits, labels, 5).tolist() == [True, True, False, True]
    # fewer classes than k: top-k is every class
    assert topk_correct(logits[:, :3], torch.tensor([0, 2, 1, 1]), 5).all()


def test_summary_rows_and_robust_accuracy(settings, data):
    images, labels, keys = data
    per_image = evaluate_tensors(tiny_model(0), images, labels, keys, settings, PREP)
    meta = {"model": "tiny", "dataset": "toy", "protocol": "st", "seed": 0, "record_sha256": "ab"}
    table = summarise(per_image, meta, settings.confidence)
    assert table.column_names == [
        "model", "dataset", "protocol", "seed", "transform", "top1", "top5", "n", "ci_low", "ci_high",
        "weights", "published_top1", "record_sha256",
    ]  # fmt: skip
    assert set(table["record_sha256"].to_pylist()) == {"ab"}  # each row names the run's record
    rows = table.to_pylist()
    assert [r["transform"] for r in rows] == list(names())
    correct = np.array(per_image["correct"].to_pylist()).reshape(len(names()), N)
    correct5 = np.array(per_image["correct_top5"].to_pylist()).reshape(len(names()), N)
    for r, c, c5 in zip(rows, correct, correct5, strict=True):
        assert r["n"] == N and r["model"] == "tiny"
        assert r["top1"] == pytest.approx(100 * c.mean())
        assert r["top5"] == pytest.approx(100 * c5.mean())
        assert r["top1"] <= r["top5"]
        low, high = proportion_confint(int(c.sum()), N, method="beta")
        assert r["ci_low"] == pytest.approx(100 * np.nan_to_num(low, nan=0.0))
        assert r["ci_high"] == pytest.approx(100 * np.nan_to_num(high, nan=1.0))
        assert r["ci_low"] <= r["top1"] <= r["ci_high"]
    top1 = [r["top1"] for r in rows]
    assert robust_accuracy(top1) == pytest.approx(sum(top1) / len(names()))
    assert robust_accuracy([50.0, 70.0]) == 60.0
    with pytest.raises(ValueError):
        robust_accuracy([])


def test_plan_builds_paths_from_final_runs(monkeypatch):
    runs = [
        {"dataset": "imagenot", "protocol": "st", "model": "resnet18", "seed": 0},
        {"dataset": "fashion_mnist", "protocol": "ft-imagenot", "model": "alexnet", "seed": 2},
    ]
    monkeypatch.setattr(plan.train_plan, "final_runs", lambda config: runs)
    config = validate_config({"seed": 5})
    assert plan.robustness_files(config) == [
        "results/evaluate/imagenot/st/resnet18/seed-0/robustness.parquet",
        "results/evaluate/fashion_mnist/ft-imagenot/alexnet/seed-2/robustness.parquet",
    ]
    assert plan.targets(config) == plan.robustness_files(config)
    assert plan.per_image_files(config)[1].endswith("alexnet/seed-2/per_image.parquet")
    # evaluate.seed null means the top-level seed; a seed of its own wins
    assert Settings.from_config(config).seed == 5
    assert Settings.from_config(validate_config({"evaluate": {"seed": 9}})).seed == 9


def test_evaluate_checkpoint_end_to_end(tmp_path, settings):
    """A materialised dataset and a saved checkpoint -> both parquet files."""
    from torchvision.io import encode_jpeg

    from imagenot.acquire.dataset import Record, write_dataset
    from imagenot.core.dataset import read_fingerprint
    from imagenot.train.registry import build_model

    g = torch.Generator().manual_seed(1)
    records = []
    for i in range(12):
        img = torch.randint(0, 256, (3, 20, 20), dtype=torch.uint8, generator=g)
        jpeg = bytes(encode_jpeg(img, quality=90).numpy())
        split = "test" if i % 2 else "train"
        records.append(Record(key=f"k{i:03d}", wnid=f"c{i % 3}", split=split, jpeg=jpeg))
    ds_dir = tmp_path / "results" / "datasets" / "toy"
    write_dataset(ds_dir, records, ["c0", "c1", "c2"], shard_size=5000)

    name = "resnet_mini"
    model = build_model(name, 3)
    run = write_final_run(
        tmp_path, model, name=name, image_size=SIZE, fingerprint=read_fingerprint(ds_dir),
        normalisation={"mean": list(MEAN), "std": list(STD)},
    )  # fmt: skip

    small = Settings(**{**settings.__dict__, "batch_size": 4, "device": "cpu"})
    out = tmp_path / "out"
    files = RobustnessFiles(
        model=run / "model.safetensors", result=run / "result.json",
        manifest=ds_dir / "manifest.parquet", classes=ds_dir / "classes.txt",
        fingerprint=ds_dir / "fingerprint.txt", robustness=out / "robustness.parquet",
        per_image=out / "per_image.parquet",
    )  # fmt: skip
    table = evaluate_checkpoint(files, small, workers=0, gpu_job=False)
    robustness = pq.read_table(out / "robustness.parquet")
    per_image = pq.read_table(out / "per_image.parquet")
    assert robustness.equals(table)
    assert robustness.num_rows == len(names()) and set(robustness["n"].to_pylist()) == {6}
    # each row names the record it was made from: the digest its producer sealed it with
    sealed = json.loads((run / "result.json").read_text())["record_sha256"]
    assert set(robustness["record_sha256"].to_pylist()) == {sealed}
    assert per_image.num_rows == len(names()) * 6
    assert set(per_image["key"].to_pylist()) == {f"k{i:03d}" for i in range(1, 12, 2)}
    assert sorted(p.name for p in out.iterdir()) == ["per_image.parquet", "robustness.parquet"]

    # the record handed is the weights' own run's: another seed's is refused, nothing written
    other = write_final_run(
        tmp_path, model, name=name, image_size=SIZE, fingerprint=read_fingerprint(ds_dir),
        normalisation={"mean": list(MEAN), "std": list(STD)}, seed=1,
    )  # fmt: skip
    mixed = dataclasses.replace(
        files, result=other / "result.json", robustness=tmp_path / "r.parquet",
        per_image=tmp_path / "p.parquet",
    )  # fmt: skip
    with pytest.raises(RecordError, match=r"seed-1/result\.json: records seed 1, but .*seed-0/"):
        evaluate_checkpoint(mixed, small, workers=0, gpu_job=False)
    assert not (tmp_path / "r.parquet").exists() and not (tmp_path / "p.parquet").exists()

    # the dataset's files are read as handed: a classes file not beside the manifest (the
    # folder the shards are read from) is refused, and the fingerprint is the file handed
    aside = tmp_path / "aside"
    aside.mkdir()
    for name in ("classes.txt", "fingerprint.txt"):
        (aside / name).write_bytes((ds_dir / name).read_bytes())
    moved = dataclasses.replace(files, classes=aside / "classes.txt")
    moved = dataclasses.replace(moved, robustness=tmp_path / "r.parquet")
    with pytest.raises(DatasetError, match=r"aside/classes\.txt: a dataset's files are"):
        evaluate_checkpoint(moved, small, workers=0, gpu_job=False)
    (aside / "fingerprint.txt").write_text("e" * 64 + "\n")  # another dataset's
    rebuilt = dataclasses.replace(files, fingerprint=aside / "fingerprint.txt")
    rebuilt = dataclasses.replace(rebuilt, robustness=tmp_path / "r.parquet")
    with pytest.raises(RecordError, match=r"but .* has eeeeeeeeeeeeeeee\.\.\. \(the dataset"):
        evaluate_checkpoint(rebuilt, small, workers=0, gpu_job=False)
    assert not (tmp_path / "r.parquet").exists()


def _on_and_off(model, settings, data, option: str) -> list:
    """Per-image tables of ``model`` evaluated with ``evaluate_batches`` option on, then off."""
    images, labels, keys = data
    transforms = build_transforms(settings.transforms)
    return [
        evaluate_batches(
            model, tensor_batches(images, labels, keys, 4), transforms, 3, PREP,
            **{option: flag},
        ).table()
        for flag in (True, False)
    ]  # fmt: skip


def test_channels_last_gives_the_same_results_and_leaves_the_model_alone(settings, data):
    model = tiny_model(4)
    before = {k: (v.clone(), v.stride()) for k, v in model.state_dict().items()}
    tables = _on_and_off(model, settings, data, "channels_last")
    assert tables[0].equals(tables[1])
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k][0]) and v.stride() == before[k][1], k
    # the weights are still ordinary (not inference-mode) tensors: the model can be trained on
    assert not any(p.is_inference() for p in model.parameters())
    model(torch.rand(2, 3, SIZE, SIZE)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_decoded_batches_equal_per_image_conversion(tmp_path):
    """The whole-batch uint8 -> float conversion equals converting image by image."""
    from torchvision.io import encode_jpeg

    from imagenot.acquire.dataset import Record, write_dataset
    from imagenot.core.dataset import ManifestDataset
    from imagenot.evaluate.robustness import dataset_batches, to_model_input

    g = torch.Generator().manual_seed(2)
    records = []
    for i in range(5):
        pixels = torch.randint(0, 256, (3, SIZE, SIZE), dtype=torch.uint8, generator=g)
        jpeg = bytes(encode_jpeg(pixels).numpy())
        records.append(Record(key=f"k{i:03d}", wnid=f"c{i % 2}", split="test", jpeg=jpeg))
    write_dataset(tmp_path, records, ["c0", "c1"], shard_size=5000)
    ds = ManifestDataset(tmp_path, "test")
    expected = torch.stack([to_model_input(ds[i][0].unsqueeze(0), SIZE)[0] for i in range(5)])
    got = list(dataset_batches(tmp_path, "test", 3))
    assert [len(k) for _, _, k in got] == [3, 2]
    assert torch.equal(torch.cat([x.float() / 255.0 for x, _, _ in got]), expected)
    assert [k for _, _, ks in got for k in ks] == ds.keys


def test_keep_freed_memory_is_harmless():
    from imagenot.core.io import keep_freed_memory

    assert isinstance(keep_freed_memory(), bool)
    assert torch.ones(1 << 22).sum().item() == float(1 << 22)


def _with_batch_norm(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    c = torch.nn
    model = c.Sequential(
        c.Conv2d(3, 8, 3, padding=1), c.BatchNorm2d(8), c.ReLU(),
        c.Conv2d(8, 8, 3, padding=1), c.BatchNorm2d(8), c.ReLU(),
        c.AdaptiveAvgPool2d(1), c.Flatten(), c.Linear(8, CLASSES),
    )  # fmt: skip
    with torch.no_grad():  # running statistics far from the identity, as after training
        for m in model.modules():
            if isinstance(m, c.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return model.eval()


def test_folded_batch_norms_give_the_same_results_and_leave_the_model_alone(settings, data):
    from imagenot.evaluate.robustness import fold_batch_norms

    model = _with_batch_norm(5)
    folded = fold_batch_norms(model)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.modules())
    assert sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()) == 2
    tables = _on_and_off(model, settings, data, "fold_batch_norm")
    for column in ("key", "transform", "pred", "correct", "correct_top5"):
        assert tables[0][column].equals(tables[1][column]), column


def test_a_model_fx_cannot_trace_is_evaluated_unfused(caplog):
    from imagenot.evaluate.robustness import fold_batch_norms

    class DataDependent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = _with_batch_norm(6)

        def forward(self, x):
            return self.body(x) if x.sum() > 0 else -self.body(x)

    model = DataDependent().eval()
    assert fold_batch_norms(model) is model
    assert "unfused" in caplog.text


def test_published_weights_run_float32_unfolded_and_trained_runs_keep_their_protocol(
    tmp_path, settings, monkeypatch
):
    """The published reference is evaluated as it was published (float32, TF32 off, batch norms
    unfolded); a model trained here as it trained (folded; bf16 autocast on CUDA)."""
    from torchvision.io import encode_jpeg

    from imagenot.acquire.dataset import Record, write_dataset
    from imagenot.core.dataset import read_fingerprint
    from imagenot.evaluate.reference import Numerics, numerics
    from imagenot.train.registry import build_model

    assert numerics(True, "cuda") == Numerics(autocast=None, fold_batch_norm=False, tf32=False)
    assert numerics(True, "cpu") == numerics(True, "cuda")
    assert numerics(False, "cuda") == Numerics(torch.bfloat16, fold_batch_norm=True, tf32=True)
    assert numerics(False, "cpu").autocast is None  # the CPU evaluates trained runs in float32

    g = torch.Generator().manual_seed(3)
    records = []
    for i in range(4):
        img = torch.randint(0, 256, (3, 24, 24), dtype=torch.uint8, generator=g)
        jpeg = bytes(encode_jpeg(img, quality=90).numpy())
        records.append(Record(key=f"k{i:03d}", wnid=f"c{i % 3}", split="test", jpeg=jpeg))
    ds_dir = tmp_path / "ds"
    write_dataset(ds_dir, records, ["c0", "c1", "c2"], shard_size=5000)
    common = dict(
        image_size=SIZE, fingerprint=read_fingerprint(ds_dir),
        normalisation={"mean": list(MEAN), "std": list(STD)},
    )  # fmt: skip
    published = {
        "source": "published", "weights": "file:w.pt", "published_top1": 50.0,
        "published_source": "test",
        "preprocessing": {"mean": list(MEAN), "std": list(STD), "crop_size": SIZE,
                          "resize_size": 18, "interpolation": "bilinear"},
    }  # fmt: skip
    model = build_model("resnet_mini", 3)

    seen: list[tuple] = []
    batch_norm = torch.nn.modules.batchnorm._BatchNorm.forward

    def spy(self, x):
        precision = torch.backends.cudnn.conv.fp32_precision
        seen.append((x.dtype, torch.is_autocast_enabled(x.device.type), precision))
        return batch_norm(self, x)

    monkeypatch.setattr(torch.nn.modules.batchnorm._BatchNorm, "forward", spy)
    small = Settings(**{**settings.__dict__, "batch_size": 4, "device": "cpu"})
    out = {}
    for name, extra in (("published", published), ("trained", {})):
        # the weights once, each run's record over the last (written as the workflow does)
        run = write_final_run(tmp_path, model if extra else None, **common, **extra)
        seen.clear()
        files = RobustnessFiles(
            model=run / "model.safetensors", result=run / "result.json",
            manifest=ds_dir / "manifest.parquet", classes=ds_dir / "classes.txt",
            fingerprint=ds_dir / "fingerprint.txt", robustness=tmp_path / name / "r.parquet",
            per_image=tmp_path / name / "p.parquet",
        )  # fmt: skip
        out[name] = evaluate_checkpoint(files, small, workers=0, gpu_job=False)
        if name == "published":  # unfolded: every batch norm ran, in float32, TF32 off
            assert seen and set(seen) == {(torch.float32, False, "ieee")}
        else:  # folded into the convolutions: no batch norm left to run
            assert seen == []
    assert torch.backends.cudnn.conv.fp32_precision == "tf32"  # restored after the reference
    assert out["published"]["published_top1"].to_pylist() == [50.0] * len(names())
    assert out["trained"]["published_top1"].to_pylist() == [None] * len(names())
