"""A result is what its path says, and what its numbers allow: a final
run's record is sealed by its producer and checked wherever it is read (its seal, its identity
against the paths it is read from and beside, its numbers); an evaluation's table is checked by
the accuracy table; a model whose outputs are not finite is refused, never scored at chance.
Each planted case ends in one line naming the file and the key, no traceback."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from final_run import write_final_run, write_toy_dataset
from trial_records import selected, slot_record, write_slot

from imagenot.cli import main
from imagenot.evaluate.paths import PER_IMAGE, ROBUSTNESS
from imagenot.train import records
from imagenot.train.paths import FINAL_DIR
from imagenot.train.records import RecordError, check_record, seal, write_record

RUN = {"dataset": "toy", "protocol": "st", "model": "resnet_mini", "seed": 0}
# What a trained final run records of its trial outside a run's folder (no selection beside it)
TRIAL = selected(None)


def _trained(root: Path, run: dict = RUN) -> dict:
    """What a trained final run of ``run`` under ``root`` records of its trial: its run's
    selection's (written beside it when missing)."""
    return selected((root / FINAL_DIR.format(**run)).parents[1], run["model"])


def _model(seed: int = 0):
    from imagenot.train.registry import build_model

    torch.manual_seed(seed)
    return build_model("resnet_mini", 3)


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> tuple[Path, Path]:
    """A 12-image dataset under ``root/results/datasets/toy`` (6 test images) and the
    workflow's root."""
    root = tmp_path_factory.mktemp("records")
    return root, write_toy_dataset(root / "results" / "datasets" / "toy")


def _fingerprint(ds_dir: Path) -> str:
    from imagenot.core.dataset import read_fingerprint

    return read_fingerprint(ds_dir)


def _evaluate(root: Path, run: dict, model_dir: Path, ds_dir: Path, capsys) -> tuple[int, str]:
    """`imagenot evaluate-robustness` as the rule runs it (outputs at the run's evaluate
    paths); (exit status, the error lines)."""
    from imagenot.core.config import validate_config
    from imagenot.core.settings import to_json
    from imagenot.evaluate.settings import RobustnessSettings

    settings = RobustnessSettings.from_config(
        validate_config({"seed": 3, "train": {"device": "cpu"}})
    )
    code = main([
        "evaluate-robustness", "--model", str(model_dir / "model.safetensors"),
        "--result", str(model_dir / "result.json"), "--manifest", str(ds_dir / "manifest.parquet"),
        "--classes", str(ds_dir / "classes.txt"), "--fingerprint", str(ds_dir / "fingerprint.txt"),
        "--robustness", str(root / ROBUSTNESS.format(**run)),
        "--per-image", str(root / PER_IMAGE.format(**run)),
        "--settings", to_json(settings), "--threads", "1",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if "error:" in line]


# ------------------------------------------------------------------------------- records


def test_a_sealed_record_reads_back_and_an_edit_is_refused(tmp_path):
    path = tmp_path / "results/train/toy/st/resnet_mini/final/seed-0/result.json"
    record = {**RUN, "num_classes": 3, "image_size": 32, "dataset_fingerprint": "a" * 64,
              "weights_sha256": "b" * 64, "val_accuracy": 50.0, "n_val": 6,
              "chance_accuracy": 100 / 3, "path": Path("x"), **_trained(tmp_path)}  # fmt: skip
    written = write_record(record, path)
    assert records.is_sealed(written) and written["path"] == "x"  # as JSON holds it
    assert records.read_record(path) == written
    edited = {**written, "val_accuracy": 99.0}
    with pytest.raises(RecordError, match=r"result\.json: its contents are not those its producer"):
        check_record(edited, path)


def test_a_final_record_is_typed_and_reads_back_as_written(tmp_path):
    """Its readers' fields by name, the rest of its producer's keys as details, the file one
    flat JSON object: what is read is what was written, seal included."""
    from imagenot.core.io import write_json

    keys = {**RUN, "num_classes": 10, "image_size": 32, "dataset_fingerprint": "a" * 64,
            "weights_sha256": "b" * 64, "chance_accuracy": 10.0, **_trained(tmp_path)}  # fmt: skip
    record = records.FinalRecord.of(keys)
    assert (record.model, record.seed, record.chance_accuracy) == ("resnet_mini", 0, 10.0)
    assert record.details == _trained(tmp_path) and record.val_accuracy is None
    assert dict(record) == keys  # an absent optional field stays absent
    path = tmp_path / FINAL_DIR.format(**RUN) / "result.json"
    written = records.write_final(record, path)
    assert written.record_sha256 == records.record_digest(keys)
    read = records.read_final(path)
    assert read == written and dict(read) == json.loads(path.read_text())
    assert isinstance(read, records.FinalRecord) and read.details == record.details
    # the same keys through the plain writer give the same bytes: one format
    plain = tmp_path / "plain.json"
    write_json(seal(keys), plain)
    assert plain.read_bytes() == path.read_bytes()
    # written only under its own run's path
    other = tmp_path / FINAL_DIR.format(**{**RUN, "seed": 1}) / "result.json"
    with pytest.raises(
        RecordError, match=r"seed-1/result\.json: records seed 0, but its path says seed 1"
    ):
        records.write_final(record, other)
    assert not other.exists()
    with pytest.raises(TypeError, match="weights_sha256"):  # a producer that omits a field
        records.FinalRecord.of({k: v for k, v in keys.items() if k != "weights_sha256"})


def test_the_producer_logs_the_digest_of_the_record_it_wrote(tmp_path, caplog):
    """The digest a summary names is in the producer's job log; a record refused before
    writing logs none."""
    keys = {**RUN, "num_classes": 10, "image_size": 32, "dataset_fingerprint": "a" * 64,
            "weights_sha256": "b" * 64, "chance_accuracy": 10.0, "val_accuracy": 55.0,
            "n_val": 200, **_trained(tmp_path)}  # fmt: skip
    path = tmp_path / FINAL_DIR.format(**RUN) / "result.json"
    caplog.set_level("INFO", logger="imagenot.train.records")
    written = records.write_final(records.FinalRecord.of(keys), path)
    assert f"{path} written: {records.SEAL_KEY} {written.record_sha256}" in caplog.text
    caplog.clear()
    other = tmp_path / FINAL_DIR.format(**{**RUN, "seed": 1}) / "result.json"
    with pytest.raises(RecordError):
        records.write_final(records.FinalRecord.of(keys), other)
    assert records.SEAL_KEY not in caplog.text


def test_an_unsealed_final_or_slot_record_is_refused(tmp_path):
    """Every result record the workflow writes is sealed (a final run's, a trained slot's, an
    empty slot's): one without a seal is refused, naming the file, wherever it is read."""
    keys = {**RUN, "num_classes": 10, "image_size": 32, "dataset_fingerprint": "a" * 64,
            "weights_sha256": "b" * 64, "chance_accuracy": 10.0, **_trained(tmp_path)}  # fmt: skip
    path = tmp_path / FINAL_DIR.format(**RUN) / "result.json"
    check_record(seal(keys), path)
    with pytest.raises(RecordError, match=rf"result\.json: has no {records.SEAL_KEY}, so it was"):
        check_record(keys, path)
    trained_path = tmp_path / "m" / "stage-0" / "slot-0.json"
    trained = slot_record(trained_path)
    assert check_record(seal(trained), trained_path, record_kind="slot")["trial"] == 0
    empty = {"stage": 1, "slot": 1, "trial": None}  # rung 0 promoted one trial, into slot 0
    empty_path = tmp_path / "e" / "stage-1" / "slot-1.json"
    assert check_record(seal(empty), empty_path, record_kind="slot")["trial"] is None
    for record, where in ((trained, trained_path), (empty, empty_path)):
        with pytest.raises(RecordError, match=rf"slot-\d\.json: has no {records.SEAL_KEY}"):
            check_record(record, where, record_kind="slot")
    # where the workflow reads slots: the halving, the selection, the preregistration's evidence
    from imagenot.train import trials
    from imagenot.train.prereg import trial_results

    trained_path.parent.mkdir(parents=True)
    trained_path.write_text(json.dumps(trained))
    for read in (
        lambda: trials.halve([trained_path], 0, 2, tmp_path / "rung-0.json"),
        lambda: trials.select([trained_path], tmp_path / "selection.json"),
        lambda: trial_results(tmp_path, "m"),
    ):
        with pytest.raises(RecordError, match=rf"slot-0\.json: has no {records.SEAL_KEY}"):
            read()
    write_slot(trained_path)
    assert trials.select([trained_path], tmp_path / "selection.json")["trial"] == 0


@pytest.mark.parametrize("key", ["stage", "trial", "model", "val_accuracy", "stopped_by"])
def test_a_slot_record_without_a_key_the_workflow_writes_is_refused(tmp_path, key):
    """Every key train_trial writes is there (halving ranks by val_accuracy and stopped_by, the
    identity check reads model): a sealed record that lacks one is refused naming it."""
    path = tmp_path / "m" / "stage-0" / "slot-0.json"
    record = slot_record(path)
    del record[key]
    with pytest.raises(
        RecordError, match=rf"slot-0\.json: lacks key\(s\) {key}, which every trial"
    ):
        check_record(seal(record), path, record_kind="slot")
    with pytest.raises(RecordError, match=rf"lacks key\(s\) {key}"):  # and never written
        write_record(record, path, "slot")
    assert not path.exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("val_accuracy", float("nan")),
        ("val_accuracy", 250.0),
        ("val_accuracy", -3.0),
        ("chance_accuracy", 50.0),  # 3 classes give 33.3
        ("num_classes", 0),
        ("n_val", 2.5),
        ("seed", True),
        ("dataset_fingerprint", ""),
    ],
)
def test_numbers_out_of_their_range_are_never_written_and_an_edit_is_refused(tmp_path, key, value):
    """The writer refuses a number out of its range (a producer's bug), naming it, and writes
    nothing; one edited into a written record is refused by its seal, which the reader checks
    instead of the numbers its writer checked."""
    base = {**RUN, "num_classes": 3, "image_size": 32, "dataset_fingerprint": "a" * 64,
            "weights_sha256": "b" * 64, "chance_accuracy": 100 / 3, **TRIAL}  # fmt: skip
    with pytest.raises(RecordError, match=rf"out\.json: {key} is "):
        write_record({**base, key: value}, tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()
    written = write_record(base, tmp_path / "result.json")
    assert check_record(written, tmp_path / "result.json") == written
    with pytest.raises(RecordError, match=r"result\.json: its contents are not those its producer"):
        check_record({**written, key: value}, tmp_path / "result.json")


@pytest.mark.parametrize(
    ("counts", "refused"),
    [
        ({"val_accuracy": 100 / 3, "n_val": 3}, None),  # 1 of 3, as the loop computes it
        ({"val_accuracy": 33.3, "n_val": 3}, None),  # the same, rounded
        ({"val_accuracy": 0.0, "n_val": 0}, None),  # an empty validation split
        ({"val_accuracy": 55.0, "n_val": 3}, "val_accuracy 55 cannot be a share of n_val=3"),
        ({"val_accuracy": 50.0, "n_val": 0}, "val_accuracy 50 cannot be a share of n_val=0"),
        ({"val_accuracy": 12.5, "n_val": 3}, "val_accuracy 12.5 cannot be a share of n_val=3"),
    ],
)
def test_an_accuracy_its_image_count_cannot_give_is_refused(tmp_path, counts, refused):
    """The toolbox's check of a table's rows (imagenot.core.counts), applied by the writer of a
    final run's record and of a slot's."""
    base = {**RUN, "num_classes": 3, "image_size": 32, "dataset_fingerprint": "a" * 64,
            "weights_sha256": "b" * 64, "chance_accuracy": 100 / 3, **TRIAL}  # fmt: skip
    path = tmp_path / "result.json"
    if refused is None:
        write_record({**base, **counts}, path)
        write_record(slot_record(path, **counts), path, "slot")
        return
    with pytest.raises(RecordError, match=rf"result\.json: {refused} "):
        write_record({**base, **counts}, path)
    with pytest.raises(RecordError, match=refused):
        write_record(slot_record(path, **counts), path, "slot")
    assert not path.exists()


def test_the_record_of_another_run_is_refused_naming_both_paths(tmp_path):
    """A final run's folder copied from protocol st into ft-other's path."""
    record = seal({**RUN, "num_classes": 3, "image_size": 32, "dataset_fingerprint": "a" * 64,
                   "weights_sha256": "b" * 64, **TRIAL})  # fmt: skip
    there = tmp_path / FINAL_DIR.format(**{**RUN, "protocol": "ft-other"}) / "result.json"
    with pytest.raises(RecordError, match=r"ft-other/.*: records protocol 'st', but its path says"):
        check_record(record, there)
    # a path outside the workflow's results folder says nothing; one inside it does
    check_record(record, tmp_path / "elsewhere" / "result.json")
    assert records.run_identity(there) == {**RUN, "protocol": "ft-other"}
    assert records.run_identity(tmp_path / "results/datasets/toy") == {"dataset": "toy"}
    assert records.run_identity(tmp_path / "results/train/toy/st/m/final/seed-x/r.json") is None


# ---------------------------------------------------------------------------- evaluation


def test_a_sealed_run_is_evaluated_and_an_unsealed_one_is_refused(toy, capsys):
    root, ds_dir = toy
    run_dir = write_final_run(root, _model(), fingerprint=_fingerprint(ds_dir))
    code, errors = _evaluate(root, RUN, run_dir, ds_dir, capsys)
    assert code == 0, errors
    table = pq.read_table(root / ROBUSTNESS.format(**RUN))
    assert set(table["protocol"].to_pylist()) == {"st"}
    # the workflow seals every final record it writes: one without a seal is not its producer's
    path = run_dir / "result.json"
    unsealed = json.loads(path.read_text())
    del unsealed[records.SEAL_KEY]
    path.write_text(json.dumps(unsealed))
    (root / ROBUSTNESS.format(**RUN)).unlink()
    code, errors = _evaluate(root, RUN, run_dir, ds_dir, capsys)
    assert code == 2 and len(errors) == 1, errors
    assert f"{path}: has no {records.SEAL_KEY}, so it was not written by this workflow" in errors[0]
    assert not (root / ROBUSTNESS.format(**RUN)).exists()


def test_a_run_copied_into_another_protocols_path_is_not_evaluated(toy, capsys):
    root, ds_dir = toy
    source = write_final_run(root, _model(), fingerprint=_fingerprint(ds_dir))
    other = {**RUN, "protocol": "ft-imagenet"}
    target = root / FINAL_DIR.format(**other)
    shutil.copytree(source, target, dirs_exist_ok=True)
    code, errors = _evaluate(root, other, target, ds_dir, capsys)
    assert code == 2 and len(errors) == 1, errors
    assert f"{target / 'result.json'}: records protocol 'st'" in errors[0]
    assert "ft-imagenet" in errors[0]
    assert not (root / ROBUSTNESS.format(**other)).exists()


def test_a_run_made_on_other_data_is_not_evaluated(toy, capsys):
    root, ds_dir = toy
    run = {**RUN, "model": "resnet_mini", "seed": 1}
    run_dir = write_final_run(root, _model(), seed=1, fingerprint="f" * 64)
    code, errors = _evaluate(root, run, run_dir, ds_dir, capsys)
    assert code == 2 and len(errors) == 1, errors
    assert "result.json: the run was made on dataset fingerprint ffffffffffffffff" in errors[0]
    assert str(ds_dir) in errors[0]


def test_finite_weights_with_non_finite_outputs_are_refused_not_scored_at_chance(toy, capsys):
    """A batch norm's running variance of -1: every weight finite, every logit NaN."""
    root, ds_dir = toy
    model = _model()
    with torch.no_grad():
        next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)).running_var[0] = -1
    run = {**RUN, "seed": 2}
    run_dir = write_final_run(root, model, seed=2, fingerprint=_fingerprint(ds_dir))
    code, errors = _evaluate(root, run, run_dir, ds_dir, capsys)
    assert code == 2 and len(errors) == 1, errors
    assert f"{run_dir / 'model.safetensors'}: the model's outputs are not finite" in errors[0]
    assert "under Identity" in errors[0] and not (root / ROBUSTNESS.format(**run)).exists()


# ------------------------------------------------------------------- the accuracy table


def _robustness(root: Path, run: dict, top1=(50.0, 25.0), correct=None, record=None) -> Path:
    """An evaluation's two tables for ``run`` (transforms Identity and Blur, 4 images) made
    from the run's record of digest ``record``."""
    from imagenot.evaluate.robustness import PER_IMAGE_SCHEMA, ROBUSTNESS_SCHEMA

    rows = [
        {**run, "transform": t, "top1": a, "top5": 100.0, "n": 4, "ci_low": 0.0, "ci_high": 100.0,
         "record_sha256": record}
        for t, a in zip(("Identity", "Blur"), top1, strict=True)
    ]  # fmt: skip
    path = root / ROBUSTNESS.format(**run)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, ROBUSTNESS_SCHEMA), path)
    if correct is None:
        correct = [[i < a / 25 for i in range(4)] for a in top1]
    per = [
        {"key": f"k{i}", "transform": t, "label": 0, "pred": 0, "correct": c[i],
         "correct_top5": True}
        for t, c in zip(("Identity", "Blur"), correct, strict=True)
        for i in range(4)
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(per, PER_IMAGE_SCHEMA), root / PER_IMAGE.format(**run))
    return path


def _accuracy_table(root: Path, paths: list[Path], capsys) -> tuple[int, list[str]]:
    from imagenot.analyse.settings import AccuracySettings
    from imagenot.core.config import validate_config
    from imagenot.core.settings import to_json

    published = root / "published.csv"
    published.write_text("model,weights,top1,top5,source\nresnet_mini,x,70.0,90.0,s\n")
    settings = to_json(AccuracySettings.from_config(validate_config({})))
    per_image = [str(Path(p).with_name(Path(PER_IMAGE).name)) for p in paths]  # as the rule lists
    code = main([
        "accuracy-table", "--robustness", *map(str, paths), "--per-image", *per_image,
        "--published", str(published), "--settings", settings,
        "--accuracy", str(root / "accuracy.csv"),
        "--per-image-table", str(root / "per_image.parquet"),
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, [line for line in err.splitlines() if "error:" in line]


def test_the_accuracy_table_reads_each_evaluation_only_under_its_own_path(tmp_path, capsys):
    healthy = _robustness(tmp_path, RUN, record="c" * 64)
    assert _accuracy_table(tmp_path, [healthy], capsys) == (0, [])
    # every row names the record it was made from; the publisher's rows none
    table = pd.read_csv(tmp_path / "accuracy.csv")
    ours = table[table.dataset == RUN["dataset"]]
    assert len(ours) == 2 and set(ours["record_sha256"]) == {"c" * 64}
    assert table[table.dataset != RUN["dataset"]]["record_sha256"].isna().all()
    # the same table copied into another protocol's evaluation folder
    other = {**RUN, "protocol": "ft-imagenet"}
    copy = tmp_path / ROBUSTNESS.format(**other)
    copy.parent.mkdir(parents=True)
    shutil.copy(healthy, copy)
    shutil.copy(tmp_path / PER_IMAGE.format(**RUN), tmp_path / PER_IMAGE.format(**other))
    code, errors = _accuracy_table(tmp_path, [healthy, copy], capsys)
    assert code == 2 and len(errors) == 1, errors
    assert (
        f"{copy}: row 0: records protocol 'st', but its path says protocol 'ft-imagenet'"
        in errors[0]
    )


@pytest.mark.parametrize(
    ("top1", "correct", "expected"),
    [
        ((float("nan"), 25.0), None, "row 0: top1 is nan, not a percentage"),
        ((250.0, 25.0), None, "row 0: top1 is 250.0, not a percentage"),
        # a share that 4 test images cannot give (1 of 4 is 25%, 2 of 4 is 50%)
        ((50.0, 30.0), None, "row 1: top1 30 cannot be a share of n=4 test images"),
        # a published run's recorded top-1, carried into its evaluation
        ((50.0, 25.0), "published", "row 0: published_top1 is 170.0, not a percentage"),
        # an edited top-1 that its per-image rows do not give
        ((50.0, 25.0), [[True] * 4, [False] * 4], "transform 'Identity' has 4 image(s), 4 correct"),
    ],
)
def test_the_accuracy_table_refuses_numbers_out_of_range_or_not_its_producers(
    tmp_path, capsys, top1, correct, expected
):
    published = correct == "published"
    path = _robustness(tmp_path, RUN, top1, None if published else correct)
    if published:
        rows = [
            {**row, "weights": "W", "published_top1": 170.0}
            for row in pq.read_table(path).to_pylist()
        ]
        pq.write_table(pa.Table.from_pylist(rows, pq.read_schema(path)), path)
    code, errors = _accuracy_table(tmp_path, [path], capsys)
    assert code == 2 and len(errors) == 1, errors
    assert expected in errors[0] and ".parquet" in errors[0]


@pytest.mark.parametrize(("top5", "refused"), [(75.0, False), (90.0, True)])
def test_the_accuracy_table_refuses_a_top5_its_image_count_cannot_give(
    tmp_path, capsys, top5, refused
):
    path = _robustness(tmp_path, RUN)
    rows = [{**row, "top5": top5} for row in pq.read_table(path).to_pylist()]
    pq.write_table(pa.Table.from_pylist(rows, pq.read_schema(path)), path)
    code, errors = _accuracy_table(tmp_path, [path], capsys)
    if not refused:
        assert (code, errors) == (0, [])
        return
    assert code == 2 and len(errors) == 1, errors
    assert f"{path}: row 0: top5 90 cannot be a share of n=4 test images" in errors[0]


# -------------------------------------------------------------------------- the summary


def _layout(root: Path) -> dict:
    from imagenot.train.paths import FINAL_RESULT

    runs = [{**RUN, "result": FINAL_RESULT.format(**RUN), "evaluation": ROBUSTNESS.format(**RUN)}]
    return {"description": "", "datasets": {}, "runs": runs}


def _summary_record(root: Path, written: dict | None = None, **change) -> Path:
    """The final run's record of ``RUN`` under ``root``, written sealed with ``written``
    (a producer writing other keys), then edited with ``change`` (unsealed)."""
    record = {**RUN, "num_classes": 10, "image_size": 32, "dataset_fingerprint": "a" * 64,
              "weights_sha256": "b" * 64, "val_accuracy": 60.0, "chance_accuracy": 10.0,
              **_trained(root), **(written or {})}  # fmt: skip
    path = root / FINAL_DIR.format(**RUN) / "result.json"
    write_record(record, path)
    if change:
        edited = {**json.loads(path.read_text()), **change}
        path.write_text(json.dumps(edited))
    return path


def test_the_summary_shows_a_runs_numbers_only_as_its_producer_wrote_them(tmp_path):
    """The validation accuracy as the final run's sealed record holds it, the test accuracy as
    the evaluation of that record measured it (its Identity row), each checked as read."""
    from imagenot.run.run_summary import collect, format_text

    healthy = _summary_record(tmp_path)
    digest = json.loads(healthy.read_text())[records.SEAL_KEY]
    assert digest == records.record_digest(json.loads(healthy.read_text()))
    evaluation = _robustness(tmp_path, RUN, top1=(75.0, 50.0), record=digest)
    summary = collect(_layout(tmp_path), tmp_path)
    assert summary["problems"] == [] and summary["models"][0]["best_test_accuracy"] == 75.0
    assert summary["models"][0]["best_val_accuracy"] == 60.0
    # the number shown names the evaluation it was read from and the digest of the record that
    # evaluation measured, which its producer sealed
    assert summary["models"][0]["best_test_record"] == {
        "path": str(evaluation.relative_to(tmp_path)),
        records.SEAL_KEY: digest,
    }
    # an evaluation of another record of this run (the run trained again since): not shown
    _robustness(tmp_path, RUN, top1=(75.0, 50.0), record="c" * 64)
    summary = collect(_layout(tmp_path), tmp_path)
    (warning,) = [p["message"] for p in summary["problems"]]
    assert f"{evaluation} measured another record of this run" in warning
    assert summary["models"][0]["best_test_accuracy"] is None
    # an Identity row its image count cannot give: an error naming the evaluation
    _robustness(tmp_path, RUN, top1=(55.0, 50.0), record=digest)
    summary = collect(_layout(tmp_path), tmp_path)
    (error,) = [p["message"] for p in summary["problems"] if p["level"] == "error"]
    assert f"{evaluation}: row 0: top1 55 cannot be a share of n=4" in error
    assert summary["models"][0]["best_test_accuracy"] is None
    _robustness(tmp_path, RUN, top1=(75.0, 50.0), record=digest)
    for written, change, words in [
        (None, {"val_accuracy": 99.0}, "its contents are not those its producer wrote"),
        (None, {"val_accuracy": float("nan")}, "its contents are not those its producer wrote"),
        (None, {"val_accuracy": 250.0}, "its contents are not those its producer wrote"),
        ({"protocol": "ft-imagenet"}, {}, "records protocol 'ft-imagenet'"),  # another's, sealed
    ]:
        path = _summary_record(tmp_path, written, **change)
        summary = collect(_layout(tmp_path), tmp_path)
        errors = [p["message"] for p in summary["problems"] if p["level"] == "error"]
        assert len(errors) == 1 and f"{path}: " in errors[0] and words in errors[0], errors
        assert summary["models"] == [] and "-1.00" not in format_text(summary)
    # an unsealed record (not written by the workflow's producer) is an error, not shown
    path = _summary_record(tmp_path)
    text = json.loads(path.read_text())
    del text[records.SEAL_KEY]
    path.write_text(json.dumps(text))
    summary = collect(_layout(tmp_path), tmp_path)
    errors = [p["message"] for p in summary["problems"] if p["level"] == "error"]
    assert len(errors) == 1 and f"{path}: has no {records.SEAL_KEY}" in errors[0], errors
    assert summary["models"] == [] and summary["errors"] == 1


def test_an_edited_final_record_under_a_seal_that_is_no_digest_is_refused(tmp_path):
    """A seal that is not a digest (null, a word, a number, a digest its producer does not
    write) seals nothing: an edited accuracy under it is an error naming the file, never shown,
    in the summary and wherever the record is read (the evaluation, diagnostics, an FT job)."""
    from imagenot.run.run_summary import collect, format_text

    healthy = _summary_record(tmp_path)
    _robustness(
        tmp_path, RUN, top1=(75.0, 50.0), record=json.loads(healthy.read_text())[records.SEAL_KEY]
    )
    summary = collect(_layout(tmp_path), tmp_path)
    assert summary["problems"] == [] and summary["models"][0]["best_val_accuracy"] == 60.0
    assert records.read_final(healthy).val_accuracy == 60.0
    for stored in (None, "sealed", 0, "", "A" * 64):
        path = _summary_record(tmp_path, val_accuracy=90.0, **{records.SEAL_KEY: stored})
        # the evaluation of that record names the same seal
        _robustness(
            tmp_path, RUN, top1=(75.0, 50.0), record=stored if isinstance(stored, str) else None
        )
        summary = collect(_layout(tmp_path), tmp_path)
        errors = [p["message"] for p in summary["problems"] if p["level"] == "error"]
        assert len(errors) == 1 and errors[0].startswith(f"{path}: its {records.SEAL_KEY} is ")
        assert "not a sha256 digest" in errors[0]
        text = format_text(summary)
        assert summary["models"] == [] and "**UNUSABLE RESULTS: 1 error(s)" in text
        assert "90.00" not in text and "\nnone\n" not in text.split("## Problems")[1]
        with pytest.raises(
            RecordError, match=rf"result\.json: its {records.SEAL_KEY} is .*, not a"
        ):
            records.read_final(path)


@pytest.mark.parametrize(("top1", "n"), [(float("nan"), 4), (250.0, 4), (50.0, 0)])
def test_the_summary_checks_a_published_runs_measured_top1_as_read(tmp_path, top1, n):
    """The published check reads the evaluation's Identity row: a top-1 that is no percentage
    (or of no image) is an error naming the evaluation, never shown as a deviation."""
    from imagenot.run.run_summary import collect

    layout = _layout(tmp_path)
    record = json.loads(_summary_record(tmp_path).read_text())
    del record[records.SEAL_KEY]
    published = {"weights": "W", "published_top1": 70.0, "published_source": "s"}
    result = tmp_path / FINAL_DIR.format(**RUN) / "result.json"
    written = write_record({**record, **published}, result)
    path = _robustness(tmp_path, RUN, top1=(100.0, 50.0), record=written[records.SEAL_KEY])
    summary = collect(layout, tmp_path)
    assert summary["problems"] == [] and summary["published_check"][0]["measured_top1"] == 100.0
    table = pq.read_table(path).to_pylist()
    table[0].update(top1=top1, n=n)
    pq.write_table(pa.Table.from_pylist(table, pq.read_schema(path)), path)
    summary = collect(layout, tmp_path)
    errors = [p["message"] for p in summary["problems"] if p["level"] == "error"]
    assert len(errors) == 1 and f"{path}: row 0: " in errors[0], errors
    assert ("not a percentage" if n else "not an integer of at least 1") in errors[0]
    assert summary["published_check"] == []


def test_a_trial_result_out_of_range_stops_the_selection_in_one_line(tmp_path, capsys):
    slot = tmp_path / "stage-0" / "slot-0.json"
    write_slot(slot)
    out = tmp_path / "selection.json"
    assert main(["train-select", "--results", str(slot), "--selection", str(out)]) == 0
    text = json.loads(slot.read_text())
    text["val_accuracy"] = float("nan")
    slot.write_text(json.dumps(text))
    assert main(["train-select", "--results", str(slot), "--selection", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{slot}: its contents are not those its producer wrote" in err
    del text[records.SEAL_KEY]  # an unsealed one: not its producer's
    slot.write_text(json.dumps(text))
    assert main(["train-select", "--results", str(slot), "--selection", str(out)]) == 2
    assert f"{slot}: has no {records.SEAL_KEY}" in capsys.readouterr().err
    assert np.isfinite(json.loads(out.read_text())["val_accuracy"])


def test_an_ft_job_starts_only_from_the_run_its_path_names(tmp_path):
    """The starting weights of an FT/TL job are a final run's: read as the evaluation reads
    them, with the record the job is handed (its record against its path and the weights', the
    weights it names, their digest); never without it, and no record derived from their path."""
    from imagenot.train.checkpoints import WeightsError
    from imagenot.train.registry import RegistryError, read_state_dict

    source = write_final_run(tmp_path, _model())
    weights, record = source / "model.safetensors", source / "result.json"
    assert set(read_state_dict(weights, record)) == set(_model().state_dict())
    with pytest.raises(RegistryError, match=r"a final run's weights, read only with its record"):
        read_state_dict(weights)  # its result.json beside it is not read unless handed
    torch.save(_model().state_dict(), tmp_path / "w.pth")
    with pytest.raises(RegistryError, match=r"w\.pth: weights read with a run's record"):
        read_state_dict(tmp_path / "w.pth", record)
    other = {**RUN, "dataset": "other"}  # the st run of another dataset, copied in
    target = tmp_path / FINAL_DIR.format(**other)
    shutil.copytree(source, target)
    with pytest.raises(RecordError, match=r"records dataset 'toy', but .* says dataset 'other'"):
        read_state_dict(target / "model.safetensors", target / "result.json")
    with pytest.raises(RecordError, match=r"records dataset 'toy', but .* says dataset 'other'"):
        read_state_dict(target / "model.safetensors", record)  # another run's record handed
    write_final_run(tmp_path, _model(seed=1), dataset="other")
    shutil.copy(weights, target / "model.safetensors")  # other weights
    with pytest.raises(WeightsError, match=r"not the .* that its result\.json records"):
        read_state_dict(target / "model.safetensors", target / "result.json")


def test_a_final_record_names_its_trial_as_its_source_says_and_reads_alone(tmp_path):
    """The writer refuses a trained run's record without its trial and a published weights'
    record naming one; a sealed record is read alone, without the selection of its run (no
    input of the jobs that read it), and so is in the summary."""
    from imagenot.run.run_summary import collect

    healthy = _summary_record(tmp_path)
    _robustness(
        tmp_path, RUN, top1=(75.0, 50.0), record=json.loads(healthy.read_text())[records.SEAL_KEY]
    )
    (healthy.parents[2] / "selection.json").unlink()
    assert collect(_layout(tmp_path), tmp_path)["problems"] == []
    assert records.read_final(healthy)["trial"] == 0
    record = {k: v for k, v in json.loads(healthy.read_text()).items() if k != records.SEAL_KEY}
    for change, words in [
        ({"trial": None}, "lacks key(s) trial, which every trained final run's"),
        ({"source": "published"}, "a published weights' record (source published) that"),
    ]:
        planted = {k: v for k, v in {**record, **change}.items() if v is not None}
        with pytest.raises(RecordError, match=re.escape(f"{healthy}: {words}")):
            write_record(planted, healthy)
    assert records.read_final(healthy)["trial"] == 0  # nothing written
