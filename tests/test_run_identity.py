"""The demo, then the paper, in one clone: results of another study are recognised as such.

README's order is `make demo`, then the paper. The paper's config shares dataset names with the
demo (imagenot, imagenet), so in the demo's working directory it would read the demo's
preregistration record (and ask for an amendment nobody made) and take the demo's `imagenet`
manifest for the real ImageNet. These tests build a demo-like results folder (the demo's
preregistration record, trial results, an `imagenet` manifest) without running the demo, and
check what the workflow's config check (`imagenot validate-config` and the Snakefile call the
same function) says there: another study is refused in one line saying where to run it, every
data path of the paper is still checked, and a true amendment of the demo still gets the
amendment message.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from trial_records import write_slot

from imagenot.core.config import validate_config
from imagenot.core.stages import check_workflow_config
from imagenot.run import run_identity

REPO = Path(__file__).resolve().parents[1]


def _demo() -> dict:
    return validate_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))


def _paper(tmp_path) -> dict:
    """The paper's config, every data path on disk except ImageNet's (its placeholders, as
    `imagenot plan` makes them), the published class lists read from the clone."""
    from imagenot.core.config import merge_configs
    from imagenot.plan.planning import placeholder_overlay

    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    overlay = placeholder_overlay(tmp_path / "inputs", paper)
    overlay["datasets"]["imagenet"]["path"] = str(tmp_path / "no-imagenet-here")
    lists = paper["diagnostics"]["class_lists"]
    paper["diagnostics"]["class_lists"] = {k: str(REPO / v) for k, v in lists.items()}
    return merge_configs(paper, overlay)


def _demo_results(work: Path, demo: dict, record: bool) -> None:
    """What `make demo` leaves that the checks read: the preregistration record of every
    trials-drawing job, one at-chance trial result of vgg_mini in imagenot/st, the demo world's
    folder, an `imagenet` manifest and (``record``) results/run.json as the run's start writes
    it."""
    from imagenot.train import plan as train_plan
    from imagenot.train.paths import PREREGISTRATION, TRAIN
    from imagenot.train.prereg import register
    from imagenot.train.settings import DrawSettings

    for dataset, protocol, model in train_plan._drawn(demo):
        s = DrawSettings.from_config(demo, dataset, protocol, model)
        register(
            work / PREREGISTRATION,
            s.experiment,
            s.definition,
            s.model,
            s.amendments,
            work / TRAIN / s.experiment,
            s.model_settings,
        )
    slot = work / TRAIN / "imagenot/st/vgg_mini/stage-0/slot-0.json"
    write_slot(slot, val_accuracy=9.0, num_classes=10, n_val=100)
    (work / "results/demo_world").mkdir(parents=True)
    manifest = work / "results/datasets/imagenet/manifest.parquet"
    manifest.parent.mkdir(parents=True)
    manifest.write_bytes(b"")
    if record:
        run_identity.record(run_identity.identity(demo, ["config/config.yaml"]))


@pytest.fixture
def work(tmp_path, monkeypatch):
    folder = tmp_path / "clone"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


@pytest.mark.parametrize("record", [True, False], ids=["recorded", "before-the-record"])
def test_the_paper_beside_the_demos_results_is_told_to_use_its_own_directory(
    tmp_path, work, record
):
    _demo_results(work, _demo(), record)
    with pytest.raises(ValueError) as refused:
        check_workflow_config(_paper(tmp_path))
    message = str(refused.value)
    assert "amendment" not in message, message
    (line,) = [ln for ln in message.splitlines() if "another study" in ln]
    assert "--directory" in line and "the demo world there" in line
    # the command it names runs as printed, without an activated venv
    assert "`.venv/bin/imagenot validate-config FILES --directory ../imagenot-run`" in line
    if record:
        assert "made by config/config.yaml" in line
        assert "dataset imagenet of kind laion there, imagenet here" in line
    # the demo's imagenet manifest is not the real ImageNet's: its path is still checked
    assert f"datasets.imagenet.path: {tmp_path}/no-imagenet-here does not exist" in message


def test_in_its_own_directory_the_paper_is_valid(tmp_path, work, monkeypatch):
    _demo_results(work, _demo(), record=True)
    paper = _paper(tmp_path)
    paper["datasets"]["imagenet"]["path"] = paper["datasets"]["cifar10"]["path"]
    own = tmp_path / "imagenot-run"
    own.mkdir()
    monkeypatch.chdir(own)
    check_workflow_config(paper)


def test_a_true_amendment_of_the_demo_still_gets_the_amendment_message(work):
    demo = _demo()
    _demo_results(work, demo, record=True)
    check_workflow_config(copy.deepcopy(demo))  # the demo itself: nothing changed
    changed = copy.deepcopy(demo)
    changed["train"]["spaces"]["st_halving"]["budget"] = 3
    with pytest.raises(ValueError, match="record a new amendment") as refused:
        check_workflow_config(changed)
    assert "another study" not in str(refused.value)


def test_a_change_within_the_study_keeps_the_record_and_a_new_dataset_extends_it(work):
    demo = _demo()
    _demo_results(work, demo, record=True)
    grown = copy.deepcopy(demo)
    grown["datasets"]["extra"] = {"kind": "laion", "classes": "discover"}
    grown["curate"]["threshold"] = 0.6
    check_workflow_config(grown)
    run_identity.record(run_identity.identity(grown, ["config/config.yaml", "extra.yaml"]))
    saved = json.loads((work / run_identity.RUN_RECORD).read_text())
    assert saved["configfiles"] == ["config/config.yaml"]  # the study's first run
    assert saved["datasets"]["extra"] == "laion" and saved["world"] == "demo"


def test_validate_config_names_the_folder_to_use_and_checks_there(tmp_path, work):
    """The command the refusal prints: `imagenot validate-config --directory DIR` reads results/
    (and the config's relative paths) in DIR, creating it."""
    _demo_results(work, _demo(), record=True)
    paper = _paper(tmp_path)
    paper["datasets"]["imagenet"]["path"] = paper["datasets"]["cifar10"]["path"]
    files = tmp_path / "paper.yaml"
    files.write_text(yaml.safe_dump(paper))

    def validate(*extra):
        return subprocess.run(
            [sys.executable, "-m", "imagenot.cli", "validate-config", str(files), *extra],
            capture_output=True,
            text=True,
            cwd=work,
        )

    here = validate()
    assert here.returncode == 2 and "another study" in here.stderr, here.stderr
    there = validate("--directory", "../imagenot-run")
    assert there.returncode == 0 and "valid" in there.stdout, there.stderr
    assert (tmp_path / "imagenot-run").is_dir()


def test_the_record_is_read_by_its_type_and_a_damaged_one_is_written_again(tmp_path, monkeypatch):
    """results/run.json is read by the one JSON reader against its declaration: a healthy record
    is the study's; one whose keys are wrong (or whose JSON is cut short) is no record, so the
    next run's start writes it again."""
    monkeypatch.chdir(tmp_path)
    current = run_identity.identity(_demo(), ["config/config.yaml"])
    run_identity.record(current)
    path = tmp_path / run_identity.RUN_RECORD
    assert run_identity._read(path)["world"] == "demo"
    path.write_text(json.dumps({**current, "datasets": ["imagenot"]}))
    assert run_identity._read(path) is None
    path.write_text('{"world": "de')
    assert run_identity._read(path) is None
    run_identity.record(current)
    assert run_identity._read(path)["datasets"] == current["datasets"]
