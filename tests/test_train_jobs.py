"""The train stage's CLI jobs end to end on a tiny materialised dataset (acquire's format)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import toy_config, write_toy_dataset

from imagenot.core.io import sha256_file
from imagenot.core.settings import to_json
from imagenot.train import plan
from imagenot.train import settings as train_settings

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    return write_toy_dataset(tmp_path_factory.mktemp("ds") / "toy")


def _cli(*args):
    """Run an ``imagenot`` subcommand in-process (the rules run the same entry point)."""
    from imagenot.cli import main

    assert main(list(args)) == 0


def _config():
    return toy_config(
        {
            "budget": 2,
            "max_epochs": 2,
            "schedule_epochs": 2,
            "halving": {"enabled": True, "min_epochs": 1, "eta": 2},
            "hyperparameters": {"optimizer": {"value": "adam"}, "lr": {"grid": [1e-3, 3e-3]}},
        }
    )


def test_trial_halving_selection_and_final_via_cli(dataset_dir, tmp_path, monkeypatch, capsys):
    from imagenot.core.config import validate_config

    config = validate_config(_config())
    assert plan.slot_counts(config, "toy", "st") == [2, 1]  # a dropped trial gets no job
    run = tmp_path / "toy/st/resnet_mini"
    assert (
        train_settings.TrialSettings.from_config(config, "toy", "st", "resnet_mini", 0).stage_epochs
        == 1
    )
    assert (
        train_settings.TrialSettings.from_config(config, "toy", "st", "resnet_mini", 1).stage_epochs
        is None
    )
    draw = to_json(train_settings.DrawSettings.from_config(config, "toy", "st", "resnet_mini"))
    _cli("train-draw-trials", "--settings", draw, "--record", str(tmp_path / "prereg.json"),
         "--trials", str(run / "trials.parquet"))  # fmt: skip

    def stage(k: int) -> list[str]:
        settings = to_json(
            train_settings.TrialSettings.from_config(config, "toy", "st", "resnet_mini", k)
        )
        return ["--settings", settings, *common]

    common = ["--manifest", str(dataset_dir / "manifest.parquet"), "--classes", str(dataset_dir / "classes.txt"), "--fingerprint", str(dataset_dir / "fingerprint.txt"), "--trials", str(run / "trials.parquet"), "--threads", "1"]  # fmt: skip
    for t in range(2):
        _cli("train-trial", *stage(0), "--stage", "0", "--slot", str(t), "--result", str(run / f"stage-0/slot-{t}.json"))  # fmt: skip
        assert (run / f"trial-{t}/checkpoint.safetensors").is_file()  # paused at the rung
    assert train_settings.HalveSettings.from_config(config, "toy", "st").eta == 2
    _cli("train-halve", "--results", str(run / "stage-0/slot-0.json"), str(run / "stage-0/slot-1.json"),
         "--rung", "0", "--settings", to_json(train_settings.HalveSettings.from_config(config, "toy", "st")),
         "--decision", str(run / "halving/rung-0.json"))  # fmt: skip
    (kept,) = json.loads((run / "halving/rung-0.json").read_text())["promoted"]
    dropped = 1 - kept
    assert not (run / f"trial-{dropped}/checkpoint.safetensors").exists()  # its trial ended
    _cli("train-trial", *stage(1), "--stage", "1", "--slot", "0", "--previous", str(run / "halving/rung-0.json"), "--result", str(run / "stage-1/slot-0.json"))  # fmt: skip
    last = json.loads((run / "stage-1/slot-0.json").read_text())
    assert (last["trial"], last["epochs"], last["stopped_by"]) == (kept, 2, "max_epochs")
    assert not (run / f"trial-{kept}/checkpoint.safetensors").exists()  # ended: deleted
    assert (run / f"trial-{kept}/metrics.csv").read_text().count("\n") == 3
    results = [run / "stage-0/slot-0.json", run / "stage-0/slot-1.json", run / "stage-1/slot-0.json"]  # fmt: skip
    _cli(
        "train-select", "--results", *map(str, results), "--selection", str(run / "selection.json")
    )
    selection = json.loads((run / "selection.json").read_text())
    assert selection["result"]["stage"] == (1 if selection["trial"] == kept else 0)
    out = run / "final/seed-0"

    def final(seed: int) -> list[str]:
        settings = to_json(
            train_settings.FinalSettings.from_config(config, "toy", "st", "resnet_mini", seed)
        )
        return ["train-final", "--settings", settings, *common, "--selection", str(run / "selection.json"), "--run", f"toy/st/resnet_mini/{seed}"]  # fmt: skip

    assert (
        train_settings.FinalSettings.from_config(config, "toy", "st", "resnet_mini", 0).reuse_trial
        is True
    )
    assert (
        train_settings.FinalSettings.from_config(config, "toy", "st", "resnet_mini", 1).reuse_trial
        is False
    )
    _cli(*final(0), "--model", str(out / "model.safetensors"), "--result", str(out / "result.json"))
    result = json.loads((out / "result.json").read_text())
    assert (out / "model.safetensors").is_file()
    # the result names the weights it describes (the evaluate stage checks it)
    assert result["weights_sha256"] == sha256_file(out / "model.safetensors")
    assert not (out / "checkpoint.safetensors").exists()  # finished: nothing left to resume
    assert result["val_accuracy"] > result["chance_accuracy"]
    # no test pass: the test accuracy is the evaluation's Identity row, measured once
    assert "test_accuracy" not in result and "n_test" not in result
    fingerprint = (dataset_dir / "fingerprint.txt").read_text().strip()
    assert result["dataset_fingerprint"] == fingerprint
    assert set(result) >= {"model", "dataset", "protocol", "seed", "val_accuracy", "hyperparameters"}  # fmt: skip
    # the selected trial ran the full schedule: its weights are reused, and they are exactly
    # what retraining with the trial's seed gives (the trial's weights gone: it retrains)
    assert selection["trial"] == kept and result["reused_trial"] is True
    assert result["train_seed"] == selection["result"]["seed"]
    # that copy is a job that never imports torch (its start-up was most of such a job's cost)
    copied = run / "final/copied"
    where = ["--model", str(copied / "model.safetensors"), "--result", str(copied / "result.json")]
    probe = "import sys; from imagenot.cli import main; print(main(sys.argv[1:]), 'torch' in sys.modules)"  # fmt: skip
    job = subprocess.run(
        [sys.executable, "-c", probe, *final(0), *where], capture_output=True, text=True
    )
    assert job.stdout.split()[-2:] == ["0", "False"], job.stderr[-2000:]
    assert (copied / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
    (run / f"trial-{selection['trial']}/best.safetensors").unlink(missing_ok=True)
    again = run / "final/again"
    _cli(
        *final(0),
        "--model",
        str(again / "model.safetensors"),
        "--result",
        str(again / "result.json"),
    )
    retrained = json.loads((again / "result.json").read_text())
    assert retrained["reused_trial"] is False
    assert (again / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
    assert retrained["val_accuracy"] == result["val_accuracy"]
    # another seed is a new run
    _cli(
        *final(1),
        "--model",
        str(run / "final/seed-1" / "model.safetensors"),
        "--result",
        str(run / "final/seed-1" / "result.json"),
    )
    other = json.loads((run / "final/seed-1/result.json").read_text())
    assert other["train_seed"] != result["train_seed"] and other["reused_trial"] is False


def test_a_training_job_reads_the_dataset_files_it_is_handed(dataset_dir, tmp_path):
    """A training job's dataset: the manifest's folder (the shards it lists), its classes and
    fingerprint read from the files handed (roles); a classes file not beside the manifest
    is refused, naming both."""
    from types import SimpleNamespace

    from imagenot.core.dataset import DatasetError, read_classes
    from imagenot.train.identity import dataset_of

    handed = dict(manifest=dataset_dir / "manifest.parquet", classes=dataset_dir / "classes.txt")
    aside = tmp_path / "fingerprint.txt"
    aside.write_text("f" * 64 + "\n")  # the file handed is the one read
    folder, classes, fingerprint = dataset_of(SimpleNamespace(**handed, fingerprint=aside))
    assert (folder, classes, fingerprint) == (dataset_dir, len(read_classes(dataset_dir)), "f" * 64)
    (tmp_path / "classes.txt").write_bytes((dataset_dir / "classes.txt").read_bytes())
    moved = {**handed, "classes": tmp_path / "classes.txt"}
    with pytest.raises(DatasetError, match=r"--manifest .* --classes .*: a dataset's files are"):
        dataset_of(SimpleNamespace(**moved, fingerprint=aside))


def test_a_slot_nothing_was_promoted_into_trains_nothing(tmp_path):
    from trial_records import write_decision

    from imagenot.train.records import read_record

    decision = tmp_path / "halving/rung-0.json"
    write_decision(decision, [3], slots=2)
    out = tmp_path / "stage-1/slot-1.json"
    from imagenot.core.config import validate_config

    job = train_settings.JobSettings.from_config(
        validate_config(_config()), "toy", "st", "resnet_mini"
    )
    settings = to_json(train_settings.TrialSettings(job=job, stage_epochs=None))
    _cli("train-trial", "--settings", settings, "--manifest", str(tmp_path / "manifest.parquet"), "--classes", str(tmp_path / "classes.txt"), "--fingerprint", str(tmp_path / "fingerprint.txt"), "--trials", "none", "--stage", "1", "--slot", "1", "--previous", str(decision), "--threads", "1", "--result", str(out))  # fmt: skip
    written = read_record(out, record_kind="slot")  # sealed, as every slot's result
    assert {k: v for k, v in written.items() if k != "record_sha256"} == {
        "stage": 1, "slot": 1, "trial": None
    }  # fmt: skip


def test_halving_promotes_only_trials_still_training(tmp_path):
    from trial_records import write_slot

    from imagenot.train.trials import halve, select

    rows = [(0, 50.0, None), (1, 90.0, "early_stopping"), (2, 40.0, None), (3, 10.0, None)]
    paths = []
    for t, acc, stopped in rows:
        write_slot(tmp_path / f"stage-0/slot-{t}.json", val_accuracy=acc, stopped_by=stopped)
        (tmp_path / f"trial-{t}").mkdir()
        (tmp_path / f"trial-{t}/checkpoint.safetensors").write_text("x")
    decision = halve(paths := [tmp_path / f"stage-0/slot-{t}.json" for t, *_ in rows], 0, 2, tmp_path / "d.json")  # fmt: skip
    assert decision["promoted"] == [0, 2] and decision["slots"] == 2
    assert not (tmp_path / "trial-3/checkpoint.safetensors").exists()
    assert (tmp_path / "trial-0/checkpoint.safetensors").exists()
    # the trial that ended early still wins selection on its latest result
    assert select(paths, tmp_path / "s.json")["trial"] == 1
