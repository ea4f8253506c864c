"""A trial's records are what their paths say: a slot result is read only under its own model,
stage and slot; a selection's trial is the trial whose sealed result it copies; a rung's
promoted trials are distinct trials it ranked. Each planted case stops with one line naming
the file, beside the healthy case that passes."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
from trial_records import write_decision, write_slot

from imagenot.cli import main
from imagenot.train import trials
from imagenot.train.records import RecordError
from imagenot.train.trials import JobError


def _slot(root, model="resnet18", stage=0, slot=0, trial=0, acc=50.0):
    path = root / model / f"stage-{stage}" / f"slot-{slot}.json"
    write_slot(path, trial=trial, val_accuracy=acc, n_val=4,
               hyperparameters={"lr": 0.1 * (trial + 1)})  # fmt: skip
    return path


def test_a_slot_result_is_read_only_under_its_own_model_stage_and_slot(tmp_path, capsys):
    exp = tmp_path / "results" / "train" / "toy" / "st"
    healthy = _slot(exp)
    assert trials._read(healthy)["trial"] == 0
    for model, stage, slot, key in [
        ("OTHERMODEL", 0, 0, "model"),
        ("resnet18", 1, 0, "stage"),
        ("resnet18", 0, 3, "slot"),
    ]:
        moved = exp / model / f"stage-{stage}" / f"slot-{slot}.json"
        moved.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(healthy, moved)
        with pytest.raises(RecordError, match=rf"slot-{slot}\.json: records {key} .* path says"):
            trials._read(moved)
        code = main(
            [
                "train-select",
                "--results",
                str(moved),
                "--selection",
                str(tmp_path / "selection.json"),
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and "Traceback" not in err and f"path says {key}" in err
        moved.unlink()
    # the preregistration's evidence is read the same way
    from imagenot.train.prereg import trial_results

    assert [r["trial"] for r in trial_results(exp, "resnet18")] == [0]
    other = _slot(exp, "OTHERMODEL")
    shutil.copyfile(other, other.parent / "slot-1.json")
    with pytest.raises(RecordError, match="records slot 0, but its path says slot '1'"):
        trial_results(exp, "OTHERMODEL")


@pytest.mark.parametrize(
    ("copy", "key"),
    [
        ("backup/resnet18/stage-0/slot-0.json", None),  # the slot's own tail: the same slot
        ("backup/vgg19/stage-0/slot-0.json", "model"),
        ("backup/resnet18/stage-2/slot-0.json", "stage"),
        ("backup/resnet18/stage-0/slot-1.json", "slot"),
        ("results/train/toy/st/vgg19/stage-0/slot-0.json", "model"),
    ],
)
def test_a_slot_copied_anywhere_is_checked_by_its_paths_tail(tmp_path, copy, key):
    """Outside the workflow's results folder too, a path ending as the slot layout does
    (``{model}/stage-{stage}/slot-{slot}.json``) says whose slot it is: a copy into another
    model's, stage's or slot's folder is refused naming the key."""
    path = _slot(tmp_path / "elsewhere", model="resnet18")
    moved = tmp_path / copy
    moved.parent.mkdir(parents=True)
    shutil.copyfile(path, moved)
    if key is None:
        assert trials._read(moved)["model"] == "resnet18"
        return
    with pytest.raises(RecordError, match=rf"{moved.name}: records {key} .* its path says {key}"):
        trials._read(moved)
    with pytest.raises(RecordError, match=rf"records {key} "):  # the selection reads it so
        trials.select([moved], tmp_path / "selection.json")


def test_an_empty_slot_is_checked_for_stage_and_slot(tmp_path):
    path = tmp_path / "m" / "stage-1" / "slot-2.json"
    trials.write_empty_slot(1, 2, path)
    assert trials._read(path)["trial"] is None
    other = path.parent / "slot-0.json"
    shutil.copyfile(path, other)
    with pytest.raises(RecordError, match="records slot 2"):
        trials._read(other)


def test_a_selection_whose_trial_is_not_its_results_is_refused(tmp_path):
    from imagenot.train.files import FinalFiles
    from imagenot.train.finals import run_final

    run = tmp_path / "toy" / "st" / "resnet18"
    paths = [_slot(run.parent, slot=t, trial=t, acc=acc) for t, acc in enumerate((75.0, 25.0))]
    out = run / "selection.json"
    chosen = trials.select(paths, out)
    assert trials.read_selection(out) == chosen and chosen["trial"] == 0
    for key, value in [("trial", 1), ("val_accuracy", 100.0), ("hyperparameters", {"lr": 1})]:
        edited = run / f"edited-{key}.json"
        edited.write_text(json.dumps({**chosen, key: value}))
        with pytest.raises(JobError, match=rf"edited-{key}\.json: {key} is .* records"):
            trials.read_selection(edited)
    # a selection copied under another model's folder selects that model's trial no more
    moved = run.parent / "vgg11" / "selection.json"
    moved.parent.mkdir()
    shutil.copyfile(out, moved)
    with pytest.raises(JobError, match=r"vgg11/selection\.json: selects a trial of model "):
        trials.read_selection(moved)
    # the final run reads it so, before anything else
    with pytest.raises(JobError, match=r"edited-trial\.json: trial is 1, but"):
        files = FinalFiles(
            trials=tmp_path, selection=run / "edited-trial.json", manifest=tmp_path / "m",
            fingerprint=tmp_path / "f", model=tmp_path / "out/m", result=tmp_path / "out/r",
        )  # fmt: skip
        run_final(SimpleNamespace(job=None), 1, None, files, 1, {})


def test_a_rungs_promoted_trials_are_distinct_trials_it_ranked(tmp_path):
    run = tmp_path / "toy" / "st"
    paths = [_slot(run, slot=t, trial=t, acc=25.0 * t) for t in range(4)]
    rung = tmp_path / "rung-0.json"
    decision = trials.halve(paths, 0, 2, rung)
    assert [trials.slot_trial(s, rung) for s in range(3)] == [*decision["promoted"], None]
    for promoted in ([7, 3], [3, 3], [3, 2, 1], ["3"], [-1]):
        rung.write_text(json.dumps({**decision, "promoted": promoted}))
        with pytest.raises(JobError, match=r"rung-0\.json: promoted .* is not a list of distinct"):
            trials.slot_trial(0, rung)


@pytest.mark.parametrize("key", ["rung", "eta", "slots", "val_accuracy", "promoted"])
def test_a_rung_decision_without_a_key_halving_writes_is_refused(tmp_path, capsys, key):
    """A decision lacking its ranking (val_accuracy) or its slot count would let any promoted
    list through: every key train-halve writes must be there, and is named when it is not."""
    rung = tmp_path / "halving" / "rung-0.json"
    decision = write_decision(rung, [3, 1], slots=2)
    assert [trials.slot_trial(s, rung) for s in range(3)] == [3, 1, None]
    del decision[key]
    rung.write_text(json.dumps(decision))
    with pytest.raises(JobError, match=rf"rung-0\.json: lacks key\(s\) {key}, which every"):
        trials.slot_trial(0, rung)


@pytest.mark.parametrize(
    ("key", "value"),
    [("slots", "2"), ("slots", -1), ("rung", 0.5), ("rung", 1), ("val_accuracy", [3, 1]),
     ("val_accuracy", {"best": 50.0}), ("val_accuracy", {"3": 250.0, "1": 50.0})],
)  # fmt: skip
def test_a_rung_decision_with_a_malformed_key_is_refused(tmp_path, key, value):
    """Counts whole, a ranking of trials by accuracy, and the rung its path names (rung 1's
    decision copied to rung-0.json)."""
    rung = tmp_path / "halving" / "rung-0.json"
    write_decision(rung, [3, 1], **{"slots": 2, key: value})
    with pytest.raises(JobError, match=rf"rung-0\.json: ({key} is |records {key} 1, but its path)"):
        trials.slot_trial(0, rung)


def test_an_empty_ranking_promotes_nothing(tmp_path):
    """A rung whose slots were all empty ranks no trial: it can promote none."""
    rung = tmp_path / "halving" / "rung-0.json"
    write_decision(rung, [], slots=2)
    assert trials.slot_trial(0, rung) is None
    write_decision(rung, [3], slots=2, val_accuracy={})
    with pytest.raises(JobError, match=r"promoted \[3\] is not a list of distinct trials"):
        trials.slot_trial(0, rung)


def test_a_rung_ranks_only_the_slots_of_its_own_stage(tmp_path):
    run = tmp_path / "toy" / "st"
    paths = [_slot(run, slot=t, trial=t, acc=25.0 * t) for t in range(2)]
    assert trials.halve(paths, 0, 2, tmp_path / "rung-0.json")["promoted"] == [1]
    later = _slot(run, stage=1, slot=0, trial=1, acc=75.0)
    with pytest.raises(
        JobError, match=r"stage-1/slot-0\.json: a result of stage 1, handed to rung 0"
    ):
        trials.halve([*paths, later], 0, 2, tmp_path / "rung-0.json")
