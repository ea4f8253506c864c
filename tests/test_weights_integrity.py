"""Weights and features are what was written and finite (issue 33): refused at save and at load
naming the file and tensor; result.json records the sha256 of the weights it describes."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from imagenot.io import sha256_file
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
    for read in (load_weights, read_state_dict):
        with pytest.raises(WeightsError, match=rf"model\.safetensors: tensor '{name}'"):
            read(path)
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


def test_evaluation_refuses_non_finite_or_other_weights(tmp_path):
    """The evaluate stage's reader: result.json's weights_sha256 and finite values."""
    from imagenot.evaluate.robustness import load_checkpoint

    run = tmp_path / "final" / "seed-0"
    path = run / "model.safetensors"
    save_weights(_model(), path)
    info = {"model": "resnet_mini", "dataset": "toy", "protocol": "st", "seed": 0,
            "num_classes": 3, "image_size": 32, "weights_sha256": sha256_file(path)}  # fmt: skip
    (run / "result.json").write_text(json.dumps(info))
    _, read_info = load_checkpoint(path)
    assert read_info["weights_sha256"] == info["weights_sha256"]
    state, name = _poisoned_state(float("nan"))
    save_file(state, str(path))
    info["weights_sha256"] = sha256_file(path)
    (run / "result.json").write_text(json.dumps(info))
    with pytest.raises(WeightsError, match=rf"tensor '{name}' holds 1 non-finite"):
        load_checkpoint(path)


def test_features_are_refused_when_non_finite_or_damaged(tmp_path):
    from imagenot.train import features

    meta = features.describe("resnet_mini", "random", "fp", "train", 32)
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
