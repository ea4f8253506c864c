"""The train stage's CLI jobs end to end on a tiny materialised dataset (acquire's format)."""

from __future__ import annotations

import io
import json

import pytest
import torch

from imagenot.train import plan

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    from PIL import Image

    from imagenot.acquire.dataset import Record, write_dataset

    out = tmp_path_factory.mktemp("ds") / "toy"
    colours = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]
    records = []
    for i in range(60):
        c, split = i % 3, ["train", "train", "train", "val", "test"][(i // 3) % 5]
        buf = io.BytesIO()
        Image.new("RGB", (32, 32), colours[c]).save(buf, format="JPEG")
        records.append(Record(f"k{i:03d}", f"c{c}", split, buf.getvalue()))
    write_dataset(out, records, ["c0", "c1", "c2"])
    return out


def _cli(*args):
    """Run an ``imagenot`` subcommand in-process (the rules run the same entry point)."""
    from imagenot.cli import main

    assert main(list(args)) == 0


def test_trial_halving_selection_and_final_via_cli(dataset_dir, tmp_path):
    config = {
        "seed": 0,
        "datasets": {"toy": {"kind": "imagefolder", "path": "x"}},
        "resources": {"gpus": 0},
        "train": {
            "models": ["resnet_mini"],
            "image_size": 32,
            "experiments": [{"dataset": "toy", "protocol": "st", "space": "s"}],
            "spaces": {
                "s": {
                    "budget": 2,
                    "max_epochs": 2,
                    "halving": {"enabled": True, "min_epochs": 1, "eta": 2},
                    "hyperparameters": {
                        "optimizer": {"value": "adam"},
                        "lr": {"choice": [1e-3, 3e-3]},
                    },
                }
            },
        },
    }
    from imagenot.config import validate_config

    validate_config(config)
    run = tmp_path / "toy/st/resnet_mini"
    job = json.loads(plan.job_options(config, "toy", "st", "resnet_mini")[6:].strip("'"))
    defn = json.dumps(plan.definition(config, "toy", "st"))
    _cli("train-draw-trials", "--experiment", "toy/st", "--model", "resnet_mini", "--definition",
         defn, "--record", str(tmp_path / "prereg.json"), "--out", str(run / "trials.parquet"))  # fmt: skip
    common = ["--job", json.dumps(job), "--dataset-dir", str(dataset_dir), "--trials", str(run / "trials.parquet")]  # fmt: skip
    for t in range(2):
        _cli("train-trial", *common, "--trial", str(t), "--rung-epochs", "1", "--out", str(run / f"trial-{t}/rung-0.json"))  # fmt: skip
    _cli("train-halve", str(run / "trial-0/rung-0.json"), str(run / "trial-1/rung-0.json"),
         "--rung", "0", "--eta", "2", "--out", str(run / "halving/rung-0.json"))  # fmt: skip
    promoted = json.loads((run / "halving/rung-0.json").read_text())["promoted"]
    assert len(promoted) == 1
    for t in range(2):
        _cli("train-trial", *common, "--trial", str(t), "--promoted", str(run / "halving/rung-0.json"), "--out", str(run / f"trial-{t}/result.json"))  # fmt: skip
    results = [json.loads((run / f"trial-{t}/result.json").read_text()) for t in range(2)]
    assert [r["epochs"] for r in results if r["promoted"]] == [2]
    assert [r["stopped_by"] for r in results if not r["promoted"]] == ["halving"]
    assert (run / f"trial-{promoted[0]}/metrics.csv").read_text().count("\n") == 3
    _cli("train-select", str(run / "trial-0/result.json"), str(run / "trial-1/result.json"), "--out", str(run / "selection.json"))  # fmt: skip
    out = run / "final/seed-0"
    _cli("train-final", *common, "--selection", str(run / "selection.json"), "--run",
         "toy/st/resnet_mini/0", "--master-seed", "0", "--out-dir", str(out))  # fmt: skip
    result = json.loads((out / "result.json").read_text())
    assert (out / "model.safetensors").is_file()
    assert not (out / "checkpoint.safetensors").exists()  # finished: nothing left to resume
    assert result["test_accuracy"] > result["chance_accuracy"]
    fingerprint = (dataset_dir / "fingerprint.txt").read_text().strip()
    assert result["dataset_fingerprint"] == fingerprint
    assert set(result) >= {
        "model",
        "dataset",
        "protocol",
        "seed",
        "val_accuracy",
        "hyperparameters",
    }
