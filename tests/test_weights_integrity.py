"""Weights and features are what was written and finite: refused at save and at load
naming the file and tensor; result.json records the sha256 of the weights it describes."""

from __future__ import annotations

import json

import pytest
import torch
from final_run import write_final_run, write_toy_dataset
from safetensors.torch import save_file

from imagenot.core.io import sha256_file
from imagenot.train.checkpoints import (
    WeightsError,
    load_tensors,
    load_weights,
    save_tensors,
    save_weights,
)
from imagenot.train.registry import build_model, read_state_dict


def _model():
    torch.manual_seed(0)
    return build_model("resnet_mini", 3)


def _poisoned_state(value: float) -> tuple[dict, str]:
    state = {k: v.clone() for k, v in _model().state_dict().items()}
    name = next(k for k, v in state.items() if v.is_floating_point() and v.numel() > 4)
    state[name].view(-1)[3] = value
    return state, name


def _flip_last_bytes(path) -> None:
    """Damage the tensor data in place (same size): its last bytes."""
    data = bytearray(path.read_bytes())
    for i in range(len(data) - 16, len(data) - 8):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused_at_save_naming_the_tensor(tmp_path, value):
    model = _model()
    state, name = _poisoned_state(value)
    model.load_state_dict(state)
    path = tmp_path / "best.safetensors"
    with pytest.raises(WeightsError, match=rf"best\.safetensors: tensor '{name}' holds 1 non"):
        save_weights(model, path)
    assert not path.exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_at_load_naming_the_tensor(tmp_path, value):
    """Written by anything else (an older version, another tool): refused where read."""
    state, name = _poisoned_state(value)
    path = tmp_path / "model.safetensors"
    save_file(state, str(path))
    for read in (load_tensors, read_state_dict):
        with pytest.raises(WeightsError, match=rf"model\.safetensors: tensor '{name}'"):
            read(path)
    # where the workflow always stores a digest (a run's weights), a file without one is refused
    with pytest.raises(WeightsError, match=r"model\.safetensors: lacks the digest"):
        load_weights(path)
    pth = tmp_path / "published.pth"
    torch.save(state, pth)
    with pytest.raises(WeightsError, match=rf"published\.pth: tensor '{name}'"):
        read_state_dict(pth)


def test_weights_damaged_after_writing_are_refused(tmp_path):
    path = tmp_path / "model.safetensors"
    save_weights(_model(), path)
    assert load_weights(path).keys() == _model().state_dict().keys()
    _flip_last_bytes(path)
    with pytest.raises(WeightsError, match=r"model\.safetensors: its tensors do not match"):
        load_weights(path)


def test_weights_other_than_those_result_json_describes_are_refused(tmp_path):
    path = tmp_path / "model.safetensors"
    save_weights(_model(), path)
    digest = sha256_file(path)
    load_weights(path, digest)
    torch.manual_seed(1)
    save_weights(build_model("resnet_mini", 3), path)  # intact, finite, but other weights
    with pytest.raises(WeightsError, match=r"not the .* that its result\.json records"):
        load_weights(path, digest)


def _save_poisoned(state: dict, path) -> None:
    """Non-finite weights with their digest stored, as no writer of the workflow makes them."""
    from imagenot.train.checkpoints import DIGEST_KEY, tensors_digest

    save_file(state, str(path), metadata={DIGEST_KEY: tensors_digest(state)})


def test_evaluation_refuses_non_finite_or_other_weights(tmp_path):
    """The evaluate stage's reader: result.json's weights_sha256, the weights' digest and
    finite values."""
    from imagenot.evaluate.robustness import load_checkpoint

    run = write_final_run(tmp_path, _model())
    path = run / "model.safetensors"
    _, read_info = load_checkpoint(path, run / "result.json")
    assert read_info["weights_sha256"] == sha256_file(path)
    state, name = _poisoned_state(float("nan"))
    _save_poisoned(state, path)
    write_final_run(tmp_path, None)  # its record, sealed, names these weights
    with pytest.raises(WeightsError, match=rf"tensor '{name}' holds 1 non-finite"):
        load_checkpoint(path, run / "result.json")
    save_file(_model().state_dict(), str(path))  # finite, but without the digest
    write_final_run(tmp_path, None)
    with pytest.raises(WeightsError, match=r"model\.safetensors: lacks the digest"):
        load_checkpoint(path, run / "result.json")


def test_features_are_refused_when_non_finite_or_damaged(tmp_path):
    from types import SimpleNamespace

    from imagenot.train import features

    settings = SimpleNamespace(
        model="resnet_mini", image_size=32, normalisation={"mean": [0.5] * 3, "std": [0.5] * 3}
    )
    job = SimpleNamespace(settings=settings, init="random")
    meta = features.describe(job, "fp", "train")
    path = tmp_path / "train.safetensors"
    values = torch.randn(50, 8)
    features.write(features.Features(values, torch.arange(50)), meta, path)
    assert torch.equal(features.read(path, meta).images, values)
    _flip_last_bytes(path)
    with pytest.raises(WeightsError, match=r"train\.safetensors: its tensors do not match"):
        features.read(path, meta)
    values[7, 2] = float("nan")
    with pytest.raises(WeightsError, match=r"train\.safetensors: tensor 'features' holds 1"):
        features.write(features.Features(values, torch.arange(50)), meta, path)


def test_a_truncated_weights_file_is_one_line_naming_it(tmp_path):
    path = tmp_path / "model.safetensors"
    save_tensors({"w": torch.ones(1000)}, path)
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(WeightsError, match=r"model\.safetensors: not a readable safetensors"):
        load_tensors(path)


def _toy_run(tmp_path):
    """A 12-image dataset (6 test images in one shard) and a final run's folder beside it."""
    from imagenot.core.dataset import read_fingerprint

    ds_dir = write_toy_dataset(tmp_path / "results" / "datasets" / "toy")
    run = write_final_run(tmp_path, _model(), fingerprint=read_fingerprint(ds_dir))
    return ds_dir, run


def _evaluate(ds_dir, run, out) -> int:
    from imagenot.cli import main
    from imagenot.core.config import validate_config
    from imagenot.core.settings import to_json
    from imagenot.evaluate.settings import RobustnessSettings

    settings = RobustnessSettings.from_config(
        validate_config({"seed": 3, "train": {"device": "cpu"}})
    )
    return main([
        "evaluate-robustness", "--model", str(run / "model.safetensors"),
        "--result", str(run / "result.json"), "--manifest", str(ds_dir / "manifest.parquet"),
        "--classes", str(ds_dir / "classes.txt"), "--fingerprint", str(ds_dir / "fingerprint.txt"),
        "--robustness", str(out / "robustness.parquet"), "--per-image",
        str(out / "per_image.parquet"), "--settings", to_json(settings), "--threads", "2",
    ])  # fmt: skip


@pytest.mark.parametrize("damage", ["bits", "random"])
def test_evaluation_on_a_damaged_shard_stops_in_one_line_naming_shard_and_key(
    tmp_path, capsys, damage
):
    """The case this guards against: image bytes changed after writing (same size, same mtime), through the
    evaluate command with a DataLoader worker: exit 2, one line, nothing written."""
    import os

    import numpy as np

    from imagenot.core.dataset import read_manifest

    ds_dir, run = _toy_run(tmp_path)
    row = read_manifest(ds_dir, "test").slice(2, 1).to_pylist()[0]
    shard = ds_dir / row["shard"]
    stat = shard.stat()
    data = bytearray(shard.read_bytes())
    start, length = row["offset"], row["length"]
    if damage == "bits":
        for i in range(start + length // 2, start + length // 2 + 4):
            data[i] ^= 0x21
    else:
        data[start : start + length] = np.random.default_rng(0).bytes(length)
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    out = tmp_path / "out"
    assert _evaluate(ds_dir, run, out) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1, err
    assert str(shard) in err[0] and repr(row["key"]) in err[0]
    assert "Traceback" not in err[0] and not out.exists()


def test_evaluation_of_non_finite_weights_stops_in_one_line(tmp_path, capsys):
    ds_dir, run = _toy_run(tmp_path)
    state, name = _poisoned_state(float("nan"))
    _save_poisoned(state, run / "model.safetensors")
    write_final_run(
        tmp_path,
        None,
        fingerprint=json.loads((run / "result.json").read_text())["dataset_fingerprint"],
    )
    out = tmp_path / "out"
    assert _evaluate(ds_dir, run, out) == 2
    err = capsys.readouterr().err
    assert f"model.safetensors: tensor '{name}' holds 1 non-finite" in err and not out.exists()
