"""Image similarity from class sums, checked against a brute-force Gram matrix; encoders."""

from __future__ import annotations

import dataclasses
import functools
import json

import numpy as np
import pytest

from imagenot.diagnostics import embed
from imagenot.diagnostics import image_similarity as sim


def brute_force(x: np.ndarray, labels: np.ndarray, n_classes: int):
    """Per-class intra/inter means from the full N x N similarity matrix."""
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    gram = x @ x.T
    same = labels[:, None] == labels[None, :]
    off_diagonal = ~np.eye(len(x), dtype=bool)
    intra, inter = [], []
    for c in range(n_classes):
        rows = labels == c
        intra.append(gram[rows][:, rows][off_diagonal[rows][:, rows]].mean())
        inter.append(gram[rows][:, ~rows].mean())
    cross = gram[~same].mean()
    return np.array(intra), np.array(inter), cross


@pytest.fixture
def clustered():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(5, 16)) * 3
    labels = np.repeat(np.arange(5), [3, 4, 5, 6, 7])
    x = centres[labels] + rng.normal(size=(len(labels), 16))
    return x, labels


def test_class_sums_agree_with_brute_force(clustered):
    x, labels = clustered
    per_class = sim.class_similarity(x, labels, 5)
    intra, inter, pooled = brute_force(x, labels, 5)
    np.testing.assert_allclose(per_class["intra"], intra, rtol=1e-10)
    np.testing.assert_allclose(per_class["inter"], inter, rtol=1e-10)
    summary = sim.summarise(per_class)
    assert summary["intra_class_similarity"] == pytest.approx(intra.mean())
    assert summary["inter_class_similarity"] == pytest.approx(inter.mean())
    assert summary["inter_class_similarity_pooled"] == pytest.approx(pooled)
    assert summary["intra_class_similarity"] > summary["inter_class_similarity"]
    assert summary["n_images"] == 25 and summary["n_classes"] == 5


def test_identical_and_orthogonal_embeddings():
    x = np.array([[1.0, 0], [2.0, 0], [0, 1.0], [0, 3.0]])
    per_class = sim.class_similarity(x, np.array([0, 0, 1, 1]), None)
    np.testing.assert_allclose(per_class["intra"], [1.0, 1.0])
    np.testing.assert_allclose(per_class["inter"], [0.0, 0.0])


def test_singleton_and_empty_classes_are_nan():
    x = np.eye(3)
    per_class = sim.class_similarity(x, np.array([0, 0, 2]), 4)
    assert per_class["n"].tolist() == [2, 0, 1, 0]
    assert np.isnan(per_class["intra"][[1, 2, 3]]).all()
    assert np.isnan(per_class["inter"][[1, 3]]).all()
    table = sim.per_class_table(per_class, ["a", "b", "c", "d"])
    assert table.column("class").to_pylist() == ["a", "b", "c", "d"]
    assert sim.summarise(per_class)["n_classes"] == 2


def test_first_per_class_keeps_input_order():
    labels = np.array([2, 0, 2, 1, 0, 2, 0])
    assert embed.first_per_class(labels, 2).tolist() == [0, 1, 2, 3, 4]
    assert embed.first_per_class(labels, None).tolist() == list(range(7))


def test_penultimate_features_are_the_last_linear_input():
    import torch

    torch.manual_seed(0)
    body = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()
    )
    model = torch.nn.Sequential(body, torch.nn.Linear(4, 7)).eval()
    x = torch.rand(2, 3, 8, 8)
    encode = embed.penultimate_encoder(model)
    with torch.no_grad():
        torch.testing.assert_close(encode(x), body(x))


def squash(images, size: int, mean, std):
    """uint8 N x 3 x H x W -> float normalised N x 3 x size x size: the whole image squashed
    bilinearly (a stand-in preparation for tests of the batching, not an encoder's protocol)."""
    import torch
    import torch.nn.functional as F

    x = images.float().div_(255.0)
    if x.shape[-2:] != (size, size):
        x = F.interpolate(
            x, size=(size, size), mode="bilinear", antialias=True, align_corners=False
        )
    mean_t = torch.tensor(mean, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    std_t = torch.tensor(std, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    return (x - mean_t) / std_t


def test_embed_preprocesses_in_batches():
    import torch

    images = torch.randint(0, 256, (5, 3, 6, 6), dtype=torch.uint8)
    seen = []

    def encode(x):
        seen.append(tuple(x.shape))
        return x.mean(dim=(2, 3))

    prepare = functools.partial(squash, size=4, mean=(0.5,) * 3, std=(0.5,) * 3)
    out = embed.embed(images, encode, prepare, 2, "cpu")
    assert out.shape == (5, 3) and out.dtype == np.float32
    assert seen == [(2, 3, 4, 4), (2, 3, 4, 4), (1, 3, 4, 4)]


def _tiny_clip(path, processor: dict | None) -> None:
    """A tiny random CLIP saved at ``path`` (16 px images), with ``processor`` written as its
    image processor config where given: offline, nothing downloaded."""
    import json

    transformers = pytest.importorskip("transformers")
    config = transformers.CLIPConfig(
        text_config={"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
                     "num_attention_heads": 2, "vocab_size": 50},
        vision_config={"hidden_size": 8, "intermediate_size": 16, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 16, "patch_size": 8},
        projection_dim=6,
    )  # fmt: skip
    transformers.CLIPModel(config).save_pretrained(path)
    if processor is not None:
        (path / embed.PROCESSOR_CONFIG).write_text(json.dumps(processor))


# a processor config as OpenAI's CLIP ships it, at the tiny model's 16 px and with statistics
# of its own (so a hard-coded mean/std or a squashed resize cannot pass for it)
PROCESSOR = {
    "image_processor_type": "CLIPImageProcessor",
    "do_resize": True,
    "size": {"shortest_edge": 20},
    "resample": 3,
    "do_center_crop": True,
    "crop_size": {"height": 16, "width": 16},
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "image_mean": [0.3, 0.4, 0.5],
    "image_std": [0.2, 0.25, 0.3],
    "do_convert_rgb": True,
}


def test_clip_encoder_loads_from_a_local_directory(tmp_path):
    """The CLIP path offline: a tiny random CLIP and its processor config saved locally, loaded
    by path; without the processor config the error says how to save it."""
    import torch

    _tiny_clip(tmp_path / "clip", PROCESSOR)
    encode, prepare = embed.clip_encoder(str(tmp_path / "clip"), "cpu")
    images = torch.randint(0, 256, (3, 3, 20, 20), dtype=torch.uint8)
    out = embed.embed(images, encode, prepare, 2, "cpu")
    assert out.shape == (3, 6)
    _tiny_clip(tmp_path / "bare", None)
    with pytest.raises(FileNotFoundError, match=r"preprocessor_config\.json"):
        embed.clip_encoder(str(tmp_path / "bare"), "cpu")


def test_a_clip_processor_larger_than_the_stored_side_is_refused(tmp_path, capsys):
    """The splits CLIP alone reads are stored at diagnostics.encoder.clip_image_size: a
    processor that takes that side or less passes; one whose crop (or, without a crop, its
    resize) is larger is refused in one line naming the key and both sides, before the model
    loads (a processor config alone, no model beside it)."""
    from imagenot.cli import main
    from imagenot.core.config import validate_config
    from imagenot.diagnostics.settings import EmbedSettings

    folder = tmp_path / "processor"
    folder.mkdir()
    (folder / embed.PROCESSOR_CONFIG).write_text(json.dumps(PROCESSOR))
    config = validate_config({"diagnostics": {"encoder": {"kind": "clip"}}})
    config["diagnostics"]["encoder"]["clip_model"] = str(folder)
    settings = EmbedSettings.from_config(config, split="test")
    assert settings.clip_image_size == config["diagnostics"]["encoder"]["clip_image_size"]
    for side in (16, 224):  # the crop's side, or larger
        embed.check_clip_input(dataclasses.replace(settings, clip_image_size=side))
    uncropped = {**PROCESSOR, "do_center_crop": False, "size": {"shortest_edge": 20}}
    assert embed.processor_side(embed.clip_processor(str(folder))) == 16
    (folder / embed.PROCESSOR_CONFIG).write_text(json.dumps(uncropped))
    assert embed.processor_side(embed.clip_processor(str(folder))) == 20
    (folder / embed.PROCESSOR_CONFIG).write_text(json.dumps(PROCESSOR))
    planted = dataclasses.replace(settings, clip_image_size=12)
    with pytest.raises(ValueError, match=r"diagnostics\.encoder\.clip_image_size: 12 px .* 16 px"):
        embed.check_clip_input(planted)
    argv = ["embed-images", "--manifest", str(tmp_path / "m.parquet"), "--classes", "c.txt"]
    argv += ["--settings", json.dumps(dataclasses.asdict(planted)), "--device", "cpu"]
    capsys.readouterr()
    assert main([*argv, "--workers", "0", "--embeddings", str(tmp_path / "e.npz")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "clip_image_size: 12 px" in err and "16 px" in err


def test_clip_images_are_prepared_by_clips_processor_config(tmp_path):
    """CLIP's preprocessing is its processor config's: the shorter edge resized bicubically,
    the centre cropped (whole pixels, the offset rounded down), its mean/std; not a square
    squash with OpenAI's statistics."""
    import torch
    from torchvision.transforms.v2 import functional as F

    _tiny_clip(tmp_path / "clip", PROCESSOR)
    _encode, prepare = embed.clip_encoder(str(tmp_path / "clip"), "cpu")
    images = torch.randint(0, 256, (2, 3, 30, 47), dtype=torch.uint8)  # landscape, odd
    got = prepare(images)
    assert got.shape == (2, 3, 16, 16) and got.dtype == torch.float32
    resized = F.resize(images, [20], F.InterpolationMode.BICUBIC, antialias=True)
    assert resized.shape[-2:] == (20, 31)
    top, left = (20 - 16) // 2, (31 - 16) // 2
    crop = resized[..., top : top + 16, left : left + 16].float() / 255
    mean = torch.tensor(PROCESSOR["image_mean"]).view(1, 3, 1, 1)
    std = torch.tensor(PROCESSOR["image_std"]).view(1, 3, 1, 1)
    torch.testing.assert_close(got, (crop - mean) / std, rtol=0, atol=1e-5)
    openai = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
    squashed = squash(images, 16, *openai)  # a square squash, OpenAI's statistics
    assert (got - squashed).abs().mean() > 0.1


def test_embed_images_and_similarity_cli_with_a_trained_backbone(tmp_path, capsys):
    """A dataset on disk, a registry model checkpoint, then the two CLI steps of the rules."""
    import io
    import json

    import pyarrow.parquet as pq
    import torch
    from final_run import write_final_run
    from PIL import Image

    from imagenot.acquire.dataset import Record, write_dataset
    from imagenot.cli import main
    from imagenot.train.registry import build_model

    rng = np.random.default_rng(0)
    classes = ["n00000001", "n00000002", "n00000003"]
    records = []
    for c, wnid in enumerate(classes):
        for i in range(4):
            pixels = np.clip(rng.normal(60 * (c + 1), 20, (32, 32, 3)), 0, 255).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(pixels).save(buf, format="JPEG")
            records.append(Record(f"{wnid}-{i}", wnid, "test", buf.getvalue()))
    write_dataset(tmp_path / "ds", records, classes, shard_size=5000)

    torch.manual_seed(0)
    run = write_final_run(tmp_path, build_model("resnet_mini", 3))

    npz = tmp_path / "emb.npz"
    settings = {
        "kind": "backbone",
        "clip_model": None,
        "clip_image_size": None,
        "split": "test",
        "batch_size": 4,
    }
    dataset = ["--manifest", str(tmp_path / "ds/manifest.parquet")]
    dataset += ["--classes", str(tmp_path / "ds/classes.txt")]
    argv = ["embed-images", *dataset, "--settings", json.dumps(settings)]
    backbone = [
        "--checkpoint",
        str(run / "model.safetensors"),
        "--result",
        str(run / "result.json"),
    ]
    argv += [*backbone, "--workers", "0", "--device", "cpu"]
    assert main([*argv, "--embeddings", str(npz)]) == 0
    arrays = embed.read_embeddings(npz)
    assert arrays["embeddings"].shape[0] == 12  # every image of the split
    assert sorted(np.bincount(arrays["labels"]).tolist()) == [4, 4, 4]
    assert str(arrays["split"]) == "test"
    assert arrays["classes"].tolist() == classes

    # finite weights whose outputs are not (a batch norm's running variance below 0): refused
    broken = build_model("resnet_mini", 3)
    with torch.no_grad():
        next(m for m in broken.modules() if isinstance(m, torch.nn.BatchNorm2d)).running_var[0] = -1
    bad = write_final_run(tmp_path, broken, seed=1)
    argv_bad = ["embed-images", *dataset, "--settings", json.dumps(settings)]
    argv_bad += ["--checkpoint", str(bad / "model.safetensors")]
    argv_bad += ["--result", str(bad / "result.json"), "--workers", "0", "--device", "cpu"]
    capsys.readouterr()
    assert main([*argv_bad, "--embeddings", str(tmp_path / "bad.npz")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "embeddings of 12 of 12 image(s) are not finite" in err
    assert not (tmp_path / "bad.npz").exists()

    # the record handed is the checkpoint's run's own, and the classes the manifest's own
    mixed = [*argv_bad[:-6], "--result", str(run / "result.json"), *argv_bad[-4:]]
    assert main([*mixed, "--embeddings", str(tmp_path / "mixed.npz")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "result.json" in err, err
    apart = [*argv[:4], str(tmp_path / "classes.txt"), *argv[5:]]
    assert main([*apart, "--embeddings", str(tmp_path / "apart.npz")]) == 2
    assert "a dataset's files are" in capsys.readouterr().err
    assert not (tmp_path / "mixed.npz").exists() and not (tmp_path / "apart.npz").exists()

    out_json, out_table = tmp_path / "sim.json", tmp_path / "sim.parquet"
    argv = ["image-similarity", "--embeddings", str(npz), "--stats", str(out_json)]
    argv += ["--settings", json.dumps({"max_images_per_class": 3})]
    assert main([*argv, "--per-class", str(out_table)]) == 0
    summary = json.loads(out_json.read_text())
    assert summary["n_images"] == 9 and summary["encoder"].startswith("backbone:")
    kept = embed.first_per_class(arrays["labels"], 3)  # 3 classes x 3 kept
    per_class = sim.class_similarity(arrays["embeddings"][kept], arrays["labels"][kept], 3)
    assert summary["intra_class_similarity"] == pytest.approx(np.mean(per_class["intra"]))
    assert pq.read_table(out_table)["class"].to_pylist() == classes
