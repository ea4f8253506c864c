"""A trial's records are what their paths say: a slot result is read only under its own model,
stage and slot; a selection's trial is the trial whose sealed result it copies; a rung's
promoted trials are distinct trials it ranked. Each planted case stops with one line naming
the file, beside the healthy case that passes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from trial_records import draw_run, write_decision, write_slot

from imagenot.cli import main
from imagenot.train import trials
from imagenot.train.records import RecordError, read_record, seal
from imagenot.train.trials import JobError


def read_selection(path: Path) -> dict:
    """A selection, read by the one reader of records (traced in its run's files)."""
    return read_record(path, record_kind="selection")


def read_decision(path: Path) -> dict:
    """A rung's decision, read by the one reader of records (recomputed from its slots)."""
    return read_record(path, record_kind="decision")


# A search of four trials over a learning-rate range, halved once (two stages).
SPACE = {
    "budget": 4,
    "max_epochs": 2,
    "halving": {"enabled": True, "min_epochs": 1, "eta": 2},
    "hyperparameters": {"lr": {"log_uniform": [0.001, 0.1]}},
}


def _slot(root, model="resnet18", stage=0, slot=0, trial=0, acc=50.0):
    path = root / model / f"stage-{stage}" / f"slot-{slot}.json"
    write_slot(path, trial=trial, val_accuracy=acc, n_val=4)
    return path


def test_a_slot_result_is_read_only_under_its_own_model_stage_and_slot(tmp_path, capsys):
    exp = draw_run(tmp_path, SPACE, "resnet18").parent
    healthy = _slot(exp)
    assert trials.read_slot(healthy)["trial"] == 0
    for model, stage, slot, key in [
        ("OTHERMODEL", 0, 0, "model"),
        ("resnet18", 1, 0, "stage"),
        ("resnet18", 0, 3, "slot"),
    ]:
        moved = exp / model / f"stage-{stage}" / f"slot-{slot}.json"
        moved.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(healthy, moved)
        with pytest.raises(RecordError, match=rf"slot-{slot}\.json: records {key} .* path says"):
            trials.read_slot(moved)
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
    with pytest.raises(RecordError, match="records slot 0, but its path says slot 1"):
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
    if key is None:  # a copy of the run's folder: its trials table lies beside it
        shutil.copyfile(path.parents[1] / "trials.parquet", moved.parents[1] / "trials.parquet")
        assert trials.read_slot(moved)["model"] == "resnet18"
        return
    with pytest.raises(RecordError, match=rf"{moved.name}: records {key} .* its path says {key}"):
        trials.read_slot(moved)
    with pytest.raises(RecordError, match=rf"records {key} "):  # the selection reads it so
        trials.select([moved], tmp_path / "selection.json")


def test_an_empty_slot_is_checked_for_stage_and_slot(tmp_path):
    path = tmp_path / "m" / "stage-1" / "slot-2.json"
    write_decision(tmp_path / "m" / "halving" / "rung-0.json", [0])  # one trial, into slot 0
    trials.write_empty_slot(1, 2, path)
    assert trials.read_slot(path)["trial"] is None
    other = path.parent / "slot-0.json"
    shutil.copyfile(path, other)
    with pytest.raises(RecordError, match="records slot 2"):
        trials.read_slot(other)


def test_a_selection_whose_trial_is_not_its_results_is_refused(tmp_path):
    from imagenot.train.files import FinalFiles
    from imagenot.train.finals import run_final

    run = tmp_path / "toy" / "st" / "resnet18"
    paths = [_slot(run.parent, slot=t, trial=t, acc=acc) for t, acc in enumerate((75.0, 25.0))]
    out = run / "selection.json"
    chosen = trials.select(paths, out)
    assert read_selection(out) == chosen and chosen["trial"] == 0
    for key, value in [("trial", 1), ("val_accuracy", 100.0), ("hyperparameters", {"lr": 1})]:
        edited = run / f"edited-{key}.json"
        edited.write_text(json.dumps({**chosen, key: value}))
        with pytest.raises(RecordError, match=rf"edited-{key}\.json: {key} is .* records"):
            read_selection(edited)
    # a selection copied under another model's folder selects that model's trial no more
    moved = run.parent / "vgg11" / "selection.json"
    moved.parent.mkdir()
    shutil.copyfile(out, moved)
    with pytest.raises(RecordError, match=r"vgg11/selection\.json: records model .* its path"):
        read_selection(moved)
    # the final run reads it so, before anything else
    with pytest.raises(RecordError, match=r"edited-trial\.json: trial is 1, but"):
        files = FinalFiles(
            trials=tmp_path, selection=run / "edited-trial.json", manifest=tmp_path / "m",
            classes=tmp_path / "c", fingerprint=tmp_path / "f", init_record=None,
            model=tmp_path / "out/m", result=tmp_path / "out/r",
        )  # fmt: skip
        run_final(SimpleNamespace(job=None), 1, None, files, 1, {})


def test_a_rungs_promoted_trials_are_distinct_trials_it_ranked(tmp_path):
    run = tmp_path / "toy" / "st"
    paths = [_slot(run, slot=t, trial=t, acc=25.0 * t) for t in range(4)]
    rung = tmp_path / "rung-0.json"
    decision = trials.halve(paths, 0, 2, rung)
    assert [trials.slot_trial(s, rung) for s in range(3)] == [*decision["promoted"], None]
    for promoted in ([7, 3], [3, 3], [3, 2, 1], ["3"], [-1]):
        _reseal(rung, promoted=promoted)
        with pytest.raises(
            RecordError, match=r"rung-0\.json: promoted is .*, not a list of distinct"
        ):
            trials.slot_trial(0, rung)


@pytest.mark.parametrize("key", ["rung", "eta", "slots", "val_accuracy", "promoted"])
def test_a_rung_decision_without_a_key_halving_writes_is_refused(tmp_path, capsys, key):
    """A decision lacking its ranking (val_accuracy) or its slot count would let any promoted
    list through: every key train-halve writes must be there, and is named when it is not."""
    rung = tmp_path / "halving" / "rung-0.json"
    decision = write_decision(rung, [3, 1], slots=2)
    assert [trials.slot_trial(s, rung) for s in range(3)] == [3, 1, None]
    del decision[key]
    rung.write_text(json.dumps(seal(decision)))
    with pytest.raises(RecordError, match=rf"rung-0\.json: lacks key\(s\) {key}, which every"):
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
    with pytest.raises(
        RecordError, match=rf"rung-0\.json: ({key} is |records {key} 1, but its path)"
    ):
        trials.slot_trial(0, rung)


def test_an_empty_ranking_promotes_nothing(tmp_path):
    """A rung whose slots were all empty ranks no trial: it can promote none."""
    rung = tmp_path / "halving" / "rung-0.json"
    write_decision(rung, [], slots=2)
    assert trials.slot_trial(0, rung) is None
    write_decision(rung, [3], slots=2, val_accuracy={})
    with pytest.raises(RecordError, match=r"promoted is \[3\], not a list of distinct trials"):
        trials.slot_trial(0, rung)


def test_a_rung_ranks_only_the_slots_of_its_own_stage(tmp_path):
    run = tmp_path / "toy" / "st"
    paths = [_slot(run, slot=t, trial=t, acc=25.0 * t) for t in range(2)]
    rung = run / "resnet18" / "halving" / "rung-0.json"
    assert trials.halve(paths, 0, 2, rung)["promoted"] == [1]
    later = _slot(run, stage=1, slot=0, trial=1, acc=75.0)
    with pytest.raises(
        JobError, match=r"stage-1/slot-0\.json: a result of stage 1, handed to rung 0"
    ):
        trials.halve([*paths, later], 0, 2, tmp_path / "rung-0.json")


# ------------------------------------------------------------------------------ provenance


def _searched(root):
    """A run's search as its producers write it, under the workflow's layout: its trials drawn
    and pre-registered (``train-draw-trials``), stage 0's four slots, rung 0's decision, stage
    1's two slots (the promoted trials') and the selection; (run folder, slot paths)."""
    run = draw_run(root, SPACE)
    stage0 = [
        _slot(run.parent, "resnet_mini", 0, t, t, acc)
        for t, acc in enumerate((50.0, 100.0, 25.0, 75.0))
    ]
    rung = run / "halving" / "rung-0.json"
    promoted = trials.halve(stage0, 0, 2, rung)["promoted"]
    assert promoted == [1, 3]
    stage1 = [
        _slot(run.parent, "resnet_mini", 1, s, trials.slot_trial(s, rung), 50.0 * (s + 1))
        for s in range(2)
    ]
    assert trials.select([*stage0, *stage1], run / "selection.json")["trial"] == 3
    return run, [*stage0, *stage1]


def _reseal(path, **change) -> None:
    """Edit the record at ``path`` and seal it again, as anyone can (the digest is public)."""
    path.write_text(json.dumps(seal({**json.loads(path.read_text()), **change})))


def _refused(capsys, run, slots, planted, words, where=None) -> None:
    """The selection (through its command) and the halving of ``planted``'s stage stop in one
    line naming ``where`` (``planted`` by default) and ``words``."""
    where = where or planted
    assert main(["train-select", "--results", *map(str, slots), "--selection", str(run / "s.json")]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith(f"imagenot train-select: error: {where}") and words in err[0], err
    assert not (run / "s.json").exists()
    stage = [p for p in slots if p.parent == planted.parent]
    with pytest.raises((RecordError, JobError), match=re.escape(words)):
        trials.halve(stage, int(planted.parent.name.removeprefix("stage-")), 2, run / "r.json")


def test_every_record_of_a_search_its_producers_wrote_is_read(tmp_path):
    run, slots = _searched(tmp_path)
    assert [trials.read_slot(p)["trial"] for p in slots] == [0, 1, 2, 3, 1, 3]
    assert read_selection(run / "selection.json")["trial"] == 3
    rows = trials.read_trials(run / "trials.parquet")
    assert [r["trial"] for r in rows] == [0, 1, 2, 3] and all(0.001 <= r["lr"] <= 0.1 for r in rows)
    # an empty slot (no trial left to promote) is what its producer writes too
    empty = run / "stage-1" / "slot-2.json"
    trials.write_empty_slot(1, 2, empty)
    assert trials.read_slot(empty)["trial"] is None
    # the preregistration's evidence reads the slot results alone, not a failed job's status
    from imagenot.train import failfast
    from imagenot.train.prereg import trial_results

    failfast.record_failure(failfast.status_for(slots[0]), "from an earlier run")
    assert [r["trial"] for r in trial_results(run.parent, "resnet_mini")] == [0, 1, 2, 3]


def test_a_slot_whose_seal_is_no_digest_is_refused(tmp_path, capsys):
    """An edited accuracy under a seal that is not a digest would change the winner."""
    run, slots = _searched(tmp_path)
    edited = {**json.loads(slots[0].read_text()), "val_accuracy": 100.0}
    del edited["record_sha256"]
    for mark, shown in [(None, "None"), ("sealed", "'sealed'"), (0, "0"), ("", "''"),
                        ("A" * 64, f"'{'A' * 36}...")]:  # fmt: skip
        slots[0].write_text(json.dumps({**edited, "record_sha256": mark}))
        _refused(capsys, run, slots, slots[0], f"its record_sha256 is {shown}, not a sha256 digest")
    slots[0].write_text(json.dumps(edited))
    _refused(capsys, run, slots, slots[0], "has no record_sha256")


def test_a_resealed_slot_its_producer_could_not_have_written_is_refused(tmp_path, capsys):
    run, slots = _searched(tmp_path)
    table = run / "trials.parquet"
    healthy = {p: p.read_text() for p in slots}
    rows = trials.read_trials(table)
    planted = [
        # a hyperparameter the trial was not drawn with (outside the space's range, too)
        (slots[0], {"hyperparameters": {**json.loads(healthy[slots[0]])["hyperparameters"],
                                        "lr": 0.5}}, "records hyperparameters lr 0.5, but trial 0 of"),
        (slots[0], {"seed": rows[0]["seed"] + 1}, "records seed"),
        # another trial's result in a slot of stage 0, which trains the slot's own trial
        (slots[0], {"trial": 2, "hyperparameters": json.loads(healthy[slots[2]])["hyperparameters"],
                    "seed": rows[2]["seed"]}, "records trial 2, but stage 0 trains trial 0"),
        # a trial the rung dropped, in a slot of stage 1, with its own hyperparameters and seed
        (slots[4], {"trial": 0, "hyperparameters": json.loads(healthy[slots[0]])["hyperparameters"],
                    "seed": rows[0]["seed"]}, "rung-0.json promoted 1 into slot 0"),
    ]  # fmt: skip
    for path, change, words in planted:
        _reseal(path, **change)
        _refused(capsys, run, slots, path, words)
        path.write_text(healthy[path])
    # a trial the table does not hold, in a slot of its own
    extra = run / "stage-0" / "slot-9.json"
    extra.write_text(healthy[slots[0]])
    _reseal(extra, stage=0, slot=9, trial=9)
    _refused(capsys, run, [*slots, extra], extra, f"records trial 9, which {table} does not hold")


def test_a_trials_table_the_space_could_not_have_drawn_is_refused(tmp_path, capsys):
    """A table edited with the slot resealed to agree: the table is what the registered space
    draws, each value of its hyperparameter's type and domain."""
    import pyarrow as pa

    from imagenot.core.io import read_parquet, write_parquet

    run, slots = _searched(tmp_path)
    table = run / "trials.parquet"
    drawn, healthy = read_parquet(table).to_pylist(), slots[0].read_text()
    for column, value, words in [
        ("lr", 0.5, "trial 0's lr is 0.5, but the space draws it from [0.001, 0.1]"),
        ("lr", -1.0, "trial 0's lr is -1.0, outside its domain"),
        ("momentum", 0.5, "trial 0's momentum is 0.5, but the space fixes it at 0.9"),
        ("optimizer", "lbfgs", "trial 0's optimizer is 'lbfgs', not one of"),
        ("warmup_steps", 2, "trial 0's warmup_steps is 2, but the space fixes it at 0"),
        ("seed", 7, "trial 0's seed is 7, but the registered search gives it"),
    ]:
        write_parquet(pa.Table.from_pylist([{**drawn[0], column: value}, *drawn[1:]]), table)
        slots[0].write_text(healthy)
        if column == "seed":
            _reseal(slots[0], seed=value)
        else:
            hyperparameters = json.loads(healthy)["hyperparameters"]
            _reseal(slots[0], hyperparameters={**hyperparameters, column: value})
        _refused(capsys, run, slots, slots[0], words, where=table)  # the table is what is wrong
        with pytest.raises(JobError, match=rf"{table}: {re.escape(words)}"):
            trials.read_trial(table, 1)  # the training jobs read it so too


def test_a_selection_resealed_with_another_result_is_refused(tmp_path):
    """The selection copies the winner's slot result: a copy resealed with another accuracy is
    not that result."""
    run, _ = _searched(tmp_path)
    path = run / "selection.json"
    chosen = json.loads(path.read_text())
    result = seal({**chosen["result"], "val_accuracy": 75.0})
    path.write_text(json.dumps({**chosen, "val_accuracy": 75.0, "result": result}))
    with pytest.raises(JobError, match=rf"{path}: its result is not the slot result it copies"):
        read_selection(path)
    result = seal({**chosen["result"], "trial": 0, "stage": 0, "slot": 0})
    path.write_text(json.dumps({**chosen, "trial": 0, "result": result}))
    with pytest.raises(
        RecordError, match=r"selection\.json \(its result\): records hyperparameter"
    ):
        read_selection(path)


# ---------------------------------------------------------------------------- rung decisions


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"record_sha256": None}, "its record_sha256 is None, not a sha256 digest"),
        ({"record_sha256": "sealed"}, "its record_sha256 is 'sealed', not a sha256 digest"),
        ({"record_sha256": "A" * 64}, "not a sha256 digest"),
        (None, "has no record_sha256"),
    ],
)
def test_a_rung_decision_whose_seal_is_no_digest_is_refused(tmp_path, capsys, change, words):
    """An edited promotion under a seal that is not a digest (or none) would train another
    trial: the rung's decision is refused wherever it is read (the training job's promotion,
    the halving and selection that trace a slot's trial to it)."""
    run, slots = _searched(tmp_path)
    rung = run / "halving" / "rung-0.json"
    assert read_decision(rung)["promoted"] == [1, 3]  # the healthy run's
    edited = {**json.loads(rung.read_text()), "promoted": [0, 3]}
    if change is None:
        del edited["record_sha256"]
    rung.write_text(json.dumps({**edited, **(change or {})}))
    with pytest.raises(RecordError, match=re.escape(words)):
        trials.slot_trial(0, rung)
    _refused(capsys, run, slots, slots[4], words, where=rung)


def test_a_resealed_rung_decision_its_slots_do_not_give_is_refused(tmp_path, capsys):
    """A seal catches damage, not forgery: a decision resealed to promote a trial its rung did
    not rank first (the stage-1 slot resealed to agree), to promote in another order, or to
    halve by another eta, is not what halving computes from the rung's own slots."""
    run, slots = _searched(tmp_path)
    rung = run / "halving" / "rung-0.json"
    healthy = {p: p.read_text() for p in [rung, *slots]}
    table = trials.read_trials(run / "trials.parquet")
    dropped = json.loads(healthy[slots[0]])  # trial 0 at 50 %: ranked third, dropped
    planted = [
        ({"promoted": [0, 3]}, {"trial": 0, "hyperparameters": dropped["hyperparameters"],
                                "seed": table[0]["seed"]},
         "records promoted [0, 3], but the 4 slot results of stage 0 give promoted [1, 3]"),
        ({"promoted": [3, 1]}, None, "but the 4 slot results of stage 0 give promoted [1, 3]"),
        ({"eta": 4, "slots": 1, "promoted": [1]}, None,
         "records eta 4, but the registered search halves with eta 2"),
        ({"val_accuracy": {"0": 50.0, "1": 100.0, "2": 25.0, "3": 99.0}}, None,
         "records val_accuracy"),
    ]  # fmt: skip
    for decision, slot, words in planted:
        for path, text in healthy.items():
            path.write_text(text)
        _reseal(rung, **decision)
        if slot is not None:
            _reseal(slots[4], **slot)
        with pytest.raises(RecordError, match=re.escape(words)):
            read_decision(rung)
        _refused(capsys, run, slots, slots[4], words, where=rung)
    for path, text in healthy.items():  # the run as written reads again
        path.write_text(text)
    assert read_selection(run / "selection.json")["trial"] == 3


def test_a_rung_decision_is_sealed_and_recomputed_from_its_own_slots(tmp_path):
    """What halving writes is sealed and is what its slots give; a decision whose rung lacks a
    slot result, or whose earlier rung lacks its decision, cannot be traced."""
    from imagenot.train.records import is_sealed

    run, slots = _searched(tmp_path)
    rung = run / "halving" / "rung-0.json"
    assert is_sealed(json.loads(rung.read_text()))
    assert read_decision(rung) == json.loads(rung.read_text())
    slots[3].rename(slots[3].with_suffix(".bak"))
    with pytest.raises(
        RecordError,
        match=r"rung-0\.json: the rung it decides lacks a slot result \(.*slot-3\.json\)",
    ):
        read_decision(rung)
    slots[3].with_suffix(".bak").rename(slots[3])
    later = run / "halving" / "rung-1.json"
    later.write_text(json.dumps(seal({**json.loads(rung.read_text()), "rung": 1})))
    rung.unlink()
    with pytest.raises(RecordError, match=r"rung-1\.json: a decision of rung 1, but the rung"):
        read_decision(later)


def test_halving_selection_and_a_final_run_read_only_their_rules_inputs(tmp_path, monkeypatch):
    """Every file halving, selection and a final run's start read (slot results, the trials
    table, rung decisions) is an input of their rule (imagenot.train.plan), so that Snakemake
    runs them after, and again on a change of, each; the preregistration record alone travels
    as an argument (imagenot.train.files)."""
    from conftest import toy_config

    from imagenot.core import io
    from imagenot.core.config import validate_config
    from imagenot.train import plan
    from imagenot.train.paths import PREREGISTRATION

    run, _ = _searched(tmp_path)
    monkeypatch.chdir(tmp_path)
    config = validate_config(toy_config(SPACE))
    where = ("toy", "st", "resnet_mini")
    read = []
    # the jobs' own reads, and the one reader of records' (which imports read_json as it runs)
    for module, name in ((trials, "read_json"), (trials, "read_parquet"), (io, "read_json")):
        real = getattr(module, name)
        monkeypatch.setattr(
            module,
            name,
            lambda path, *a, _real=real, **k: read.append(path) or _real(path, *a, **k),
        )

    def files_read(job) -> set[str]:
        read.clear()
        trials._CHECKED.clear()  # a job is a process of its own: nothing checked before it
        job()
        return {str(Path(p).resolve().relative_to(tmp_path)) for p in read} - {PREREGISTRATION}

    stage0 = plan.stage_results(config, *where, 0)
    halved = files_read(lambda: trials.halve([Path(p) for p in stage0], 0, 2, Path("r.json")))
    assert halved == {*stage0, plan.TRIALS.format(dataset="toy", protocol="st",
                                                  model="resnet_mini")}  # fmt: skip
    assert halved <= {*stage0, *plan.traced_files(config, *where, 0)}
    results = plan.all_results(config, *where)
    selected = files_read(lambda: trials.select([Path(p) for p in results], Path("s.json")))
    assert plan.decision_file(*where, 0) in selected
    assert selected <= {*results, *plan.traced_files(config, *where, results=False)}
    selection = str((run / "selection.json").relative_to(tmp_path))
    final = files_read(lambda: read_selection(Path(selection)))
    assert final <= {selection, plan.TRIALS.format(dataset="toy", protocol="st",
                                                   model="resnet_mini"),
                     *plan.traced_files(config, *where, table=False)}  # fmt: skip
    # the planted case: a rule that listed the stage's slots alone would miss what halving reads
    assert not halved <= set(stage0)


def test_a_slot_is_traced_to_the_registered_draw_while_its_table_is_drawn_again(tmp_path):
    """An amendment reruns the drawing job, and Snakemake removes its trials table first, while
    registering reads the run's slots as evidence: a slot is then traced to what the registered
    definition draws (the table the job writes again), so a resealed one is still refused; with
    no record registering the search, nothing traces it."""
    from imagenot.train.paths import PREREGISTRATION

    exp = draw_run(tmp_path, SPACE, "resnet18").parent
    healthy = _slot(exp)
    (exp / "resnet18" / "trials.parquet").unlink()
    assert trials.read_slot(healthy)["trial"] == 0
    record = json.loads(healthy.read_text())
    record.pop("record_sha256")
    record["hyperparameters"] = {**record["hyperparameters"], "lr": 0.05}
    forged = exp / "resnet18" / "stage-0" / "slot-1.json"
    forged.write_text(json.dumps(seal({**record, "slot": 1, "trial": 1})))
    with pytest.raises(RecordError, match=r"slot-1\.json: .*producer could not have written"):
        trials.read_slot(forged)
    (tmp_path / PREREGISTRATION).unlink()
    with pytest.raises(RecordError, match=r"slot-0\.json: .*has no trials table"):
        trials.read_slot(healthy)
