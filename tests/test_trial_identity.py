"""A trial's records are what their paths say and what their producers wrote: a slot result is
read only under its own model, stage and slot; a selection, sealed, only under its model; a
rung's promoted trials are distinct trials it ranked, which its writer checks. Each planted case
stops with one line naming the file, beside the healthy case that passes."""

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
from imagenot.train.records import RecordError, read_record, seal, write_record
from imagenot.train.trials import JobError


def read_selection(path: Path) -> dict:
    """A selection, read by the one reader of records."""
    return read_record(path, record_kind="selection")


def read_decision(path: Path) -> dict:
    """A rung's decision, read by the one reader of records."""
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
    trials.write_empty_slot(1, 2, path)
    assert trials.read_slot(path)["trial"] is None
    other = path.parent / "slot-0.json"
    shutil.copyfile(path, other)
    with pytest.raises(RecordError, match="records slot 2"):
        trials.read_slot(other)


def test_a_selection_is_sealed_and_read_only_under_its_own_model(tmp_path):
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
        with pytest.raises(RecordError, match=rf"edited-{key}\.json: its contents are not"):
            read_selection(edited)
    # a selection copied under another model's folder selects that model's trial no more
    moved = run.parent / "vgg11" / "selection.json"
    moved.parent.mkdir()
    shutil.copyfile(out, moved)
    with pytest.raises(RecordError, match=r"vgg11/selection\.json: records model .* its path"):
        read_selection(moved)
    # the final run reads it so, before anything else
    with pytest.raises(RecordError, match=r"edited-trial\.json: its contents are not"):
        files = FinalFiles(
            trials=tmp_path, selection=run / "edited-trial.json", manifest=tmp_path / "m",
            classes=tmp_path / "c", fingerprint=tmp_path / "f", init_record=None, features=[],
            model=tmp_path / "out/m", result=tmp_path / "out/r",
        )  # fmt: skip
        run_final(SimpleNamespace(job=None), 1, None, files, 1, {})


def test_a_rungs_promoted_trials_are_distinct_trials_it_ranked(tmp_path):
    """The writer refuses any other promotion (writing nothing); one edited into the written
    decision is refused by its seal where the training job reads it."""
    run = tmp_path / "toy" / "st"
    paths = [_slot(run, slot=t, trial=t, acc=25.0 * t) for t in range(4)]
    rung = tmp_path / "rung-0.json"
    decision = trials.halve(paths, 0, 2, rung)
    assert [trials.slot_trial(s, rung) for s in range(3)] == [*decision["promoted"], None]
    for promoted in ([7, 3], [3, 3], [3, 2, 1], ["3"], [-1]):
        with pytest.raises(RecordError, match=r"r\.json: promoted is .*, not a list of distinct"):
            write_record({**decision, "promoted": promoted}, tmp_path / "r.json", "decision")
        assert not (tmp_path / "r.json").exists()
        rung.write_text(json.dumps({**decision, "promoted": promoted}))
        with pytest.raises(RecordError, match=r"rung-0\.json: its contents are not those"):
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
    """Counts whole and a ranking of trials by accuracy, which the writer checks; the rung its
    path names (rung 1's decision copied to rung-0.json), which the reader checks."""
    rung = tmp_path / "halving" / "rung-0.json"
    decision = {
        k: v for k, v in write_decision(rung, [3, 1], slots=2).items() if k != "record_sha256"
    }
    if (key, value) == ("rung", 1):
        write_record({**decision, key: value}, rung, "decision")
        with pytest.raises(RecordError, match=r"rung-0\.json: records rung 1, but its path"):
            trials.slot_trial(0, rung)
        return
    with pytest.raises(RecordError, match=rf"rung-0\.json: {key} is "):
        write_record({**decision, key: value}, rung, "decision")
    assert trials.slot_trial(0, rung) == 3  # nothing written


def test_an_empty_ranking_promotes_nothing(tmp_path):
    """A rung whose slots were all empty ranks no trial: it can promote none."""
    rung = tmp_path / "halving" / "rung-0.json"
    write_decision(rung, [], slots=2)
    assert trials.slot_trial(0, rung) is None
    decision = {"rung": 0, "eta": 2, "slots": 2, "val_accuracy": {}, "promoted": [3]}
    with pytest.raises(RecordError, match=r"promoted is \[3\], not a list of distinct trials"):
        write_record(decision, rung, "decision")


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


@pytest.mark.parametrize("carried", [True, False])
def test_a_trials_table_the_space_could_not_have_drawn_is_refused(tmp_path, carried):
    """An edited table: the training jobs read it as what the registered space draws (the
    search it carries; for a table that carries none, drawn by imagenot 0.6.1 or earlier, the
    preregistration record's), each value of its hyperparameter's type and domain."""
    import pyarrow as pa

    from imagenot.core.io import read_parquet, write_parquet

    run, _ = _searched(tmp_path)
    table = run / "trials.parquet"
    drawn = read_parquet(table).to_pylist()
    metadata = read_parquet(table).schema.metadata if carried else None
    assert not carried or trials.SEARCH_KEY in metadata
    assert trials.read_trial(table, 1) == drawn[1]
    for column, value, words in [
        ("lr", 0.5, "trial 0's lr is 0.5, but the space draws it from [0.001, 0.1]"),
        ("lr", -1.0, "trial 0's lr is -1.0, outside its domain"),
        ("momentum", 0.5, "trial 0's momentum is 0.5, but the space fixes it at 0.9"),
        ("optimizer", "lbfgs", "trial 0's optimizer is 'lbfgs', not one of"),
        ("warmup_steps", 2, "trial 0's warmup_steps is 2, but the space fixes it at 0"),
        ("seed", 7, "trial 0's seed is 7, but the registered search gives it"),
    ]:
        rows = [{**drawn[0], column: value}, *drawn[1:]]
        write_parquet(pa.Table.from_pylist(rows, metadata=metadata), table)
        with pytest.raises(JobError, match=rf"{table}: {re.escape(words)}"):
            trials.read_trial(table, 1)  # the training jobs read it so too


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
    trial: the rung's decision is refused where the training job reads its promotion."""
    run, _ = _searched(tmp_path)
    rung = run / "halving" / "rung-0.json"
    assert read_decision(rung)["promoted"] == [1, 3]  # the healthy run's
    edited = {**json.loads(rung.read_text()), "promoted": [0, 3]}
    if change is None:
        del edited["record_sha256"]
    rung.write_text(json.dumps({**edited, **(change or {})}))
    with pytest.raises(RecordError, match=re.escape(words)):
        trials.slot_trial(0, rung)


def test_a_rung_decision_is_sealed_and_reads_back_as_written(tmp_path):
    from imagenot.train.records import is_sealed

    run, _ = _searched(tmp_path)
    rung = run / "halving" / "rung-0.json"
    assert is_sealed(json.loads(rung.read_text()))
    assert read_decision(rung) == json.loads(rung.read_text())


def test_halving_selection_and_a_final_run_read_only_their_rules_inputs(tmp_path, monkeypatch):
    """Halving reads its stage's slot results, selection every slot result, a final run's start
    its selection: each an input of their rule (imagenot.train.plan), so that Snakemake runs
    them after, and again on a change of, each. Nothing beside them is read (a sealed record is
    trusted, not traced in its run's other files)."""
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
    for module, name in ((trials, "read_parquet"), (io, "read_json")):
        real = getattr(module, name)
        monkeypatch.setattr(
            module,
            name,
            lambda path, *a, _real=real, **k: read.append(path) or _real(path, *a, **k),
        )

    def files_read(job) -> set[str]:
        read.clear()
        job()
        return {str(Path(p).resolve().relative_to(tmp_path)) for p in read}

    stage0 = plan.stage_results(config, *where, 0)
    halved = files_read(lambda: trials.halve([Path(p) for p in stage0], 0, 2, Path("r.json")))
    assert halved == set(stage0)
    results = plan.all_results(config, *where)
    selected = files_read(lambda: trials.select([Path(p) for p in results], Path("s.json")))
    assert selected == set(results)
    selection = str((run / "selection.json").relative_to(tmp_path))
    assert files_read(lambda: read_selection(Path(selection))) == {selection}
    # a trial's and a final run's trials table: it carries its registered search
    table = plan.TRIALS.format(dataset="toy", protocol="st", model="resnet_mini")
    assert files_read(lambda: trials.read_trials(Path(table))) == {table}
    # the planted case: a read beside the inputs (the preregistration record, an argument of
    # its own: imagenot.train.files) is seen, for a table that carries no search
    _without_search(Path(table))
    assert files_read(lambda: trials.read_trials(Path(table))) == {table, PREREGISTRATION}


# ----------------------------------------------------------------- a table's registered search


def _without_search(table: Path, search: bytes | None = None) -> None:
    """Rewrite the trials table at ``table`` without the search it carries (as imagenot 0.6.1
    and earlier drew it), or carrying ``search`` in its place."""
    from imagenot.core.io import read_parquet, write_parquet

    metadata = {trials.SEARCH_KEY: search} if search is not None else None
    write_parquet(read_parquet(table).replace_schema_metadata(metadata), table)


def test_a_trials_table_carries_its_registered_search_sealed(tmp_path):
    """The draw writes the registered definition into the table, sealed; the training jobs read
    it there (the preregistration record aside: an edit of it changes nothing they read)."""
    from imagenot.core.io import open_parquet, read_json, write_json
    from imagenot.train.paths import PREREGISTRATION
    from imagenot.train.records import is_sealed

    run = draw_run(tmp_path, SPACE)
    table = run / "trials.parquet"
    rows = trials.read_trials(table)
    record = tmp_path / PREREGISTRATION
    definition = read_json(record)["experiments"]["toy/st"]["definition"]
    dataset, protocol, carried = trials.registered_search(table)
    assert (dataset, protocol, carried) == ("toy", "st", definition)
    assert is_sealed(json.loads(open_parquet(table).schema_arrow.metadata[trials.SEARCH_KEY]))
    record.unlink()
    assert trials.read_trials(table) == rows
    # a table that carries no search (imagenot 0.6.1 or earlier) is read against the record
    _without_search(table)
    with pytest.raises(JobError, match="registers no search of toy/st"):
        trials.read_trials(table)
    write_json({"experiments": {"toy/st": {"definition": definition}}}, record)
    assert trials.read_trials(table) == rows


def test_a_trials_table_whose_carried_search_is_damaged_is_refused(tmp_path):
    """A search edited in the table (a wider space), unsealed, copied from another experiment
    or short of a key is refused where a training job reads the table, naming the file."""
    from imagenot.core.io import open_parquet

    table = draw_run(tmp_path, SPACE) / "trials.parquet"
    sealed = json.loads(open_parquet(table).schema_arrow.metadata[trials.SEARCH_KEY])
    wider = {**sealed["definition"], "hyperparameters": {"lr": {"log_uniform": [0.001, 1.0]}}}
    for search, words in [
        ({**sealed, "definition": wider}, "its contents are not those its producer wrote"),
        ({k: v for k, v in sealed.items() if k != "record_sha256"}, "has no record_sha256"),
        (seal({**sealed, "protocol": "ft-x"}), "records protocol 'ft-x', but its path says"),
        (seal({"dataset": "toy", "protocol": "st"}), "lacks key(s) definition"),
    ]:
        _without_search(table, json.dumps(search).encode())
        with pytest.raises(RecordError, match=rf"{re.escape(str(table))}: {re.escape(words)}"):
            trials.read_trial(table, 0)
    _without_search(table, b"{not json")
    with pytest.raises(RecordError, match=r"imagenot\.registered_search is not JSON"):
        trials.read_trial(table, 0)


def test_a_trials_table_leaving_its_carried_space_is_refused_outside_the_layout_too(tmp_path):
    """A copy of the table outside the results folder is still read against its search."""
    import pyarrow as pa

    from imagenot.core.io import read_parquet, write_parquet

    table = draw_run(tmp_path, SPACE) / "trials.parquet"
    copy = tmp_path / "elsewhere" / "trials.parquet"
    copy.parent.mkdir()
    read = read_parquet(table)
    rows = read.to_pylist()
    write_parquet(pa.Table.from_pylist(rows, metadata=read.schema.metadata), copy)
    assert trials.read_trials(copy) == rows
    rows[2]["lr"] = 0.5
    write_parquet(pa.Table.from_pylist(rows, metadata=read.schema.metadata), copy)
    with pytest.raises(JobError, match=r"trial 2's lr is 0\.5, but the space draws it from"):
        trials.read_trials(copy)
    write_parquet(pa.Table.from_pylist(rows[:3], metadata=read.schema.metadata), copy)
    with pytest.raises(JobError, match="holds 3 trials, but the registered search of toy/st"):
        trials.read_trials(copy)


def test_a_draw_refuses_a_record_whose_definition_is_not_the_one_it_carries(tmp_path):
    """The draw checks that the definition its table carries is the record's: a record whose
    definition was edited under its hash is refused, naming the record, and no table written."""
    from imagenot.core.io import read_json, write_json
    from imagenot.train.paths import PREREGISTRATION
    from imagenot.train.prereg import PreregistrationError

    run = draw_run(tmp_path, SPACE)
    record = tmp_path / PREREGISTRATION
    edited = read_json(record)
    edited["experiments"]["toy/st"]["definition"]["budget"] = 8
    write_json(edited, record)
    with pytest.raises(PreregistrationError, match=rf"{re.escape(str(record))}: the definition"):
        draw_run(tmp_path, SPACE, "vgg_mini")
    assert not (run.parent / "vgg_mini" / "trials.parquet").exists()


def test_a_trials_table_without_a_column_its_draw_writes_says_to_draw_again(tmp_path):
    """A table lacking a column (another tool's, or cut by hand) is refused naming the file and
    the column, with what to do; the table the draw wrote is read."""
    import pyarrow.parquet as pq

    run, _ = _searched(tmp_path)
    table = run / "trials.parquet"
    assert [r["trial"] for r in trials.read_trials(table)] == [0, 1, 2, 3]
    cut = tmp_path / "cut.parquet"
    pq.write_table(pq.read_table(table).drop_columns(["lr"]), cut)
    with pytest.raises(
        JobError, match=r"cut\.parquet: lacks column\(s\) lr .*draws the trials again"
    ):
        trials.read_trials(cut)
