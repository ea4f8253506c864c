"""Step 7 calibration: classes passing each threshold, the score summary, the figure, the CLI,
and the rule's plan functions."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import snakemake_rules

from imagenot.core.config import load_config
from imagenot.core.settings import Style, parse, to_json
from imagenot.curate import plan
from imagenot.curate.calibration import (
    CalibrationError,
    calibrate,
    check_grid,
    read_scores,
)
from imagenot.curate.settings import CalibrationSettings

SCORES = [0.95, 0.9, 0.85, 0.82, 0.81, 0.6, math.nan]


def _scores_table(scores=SCORES) -> pa.Table:
    n = len(scores)
    return pa.table(
        {
            "wnid": [f"n{i:08d}" for i in range(n)],
            "score": pa.array(scores, pa.float64()),
            "n_selectable": pa.array(
                [0 if math.isnan(s) else 10 + i for i, s in enumerate(scores)]
            ),
            "status": [("kept" if i < 3 else "removed") for i in range(n)],
        }
    )


def _settings(**overrides) -> CalibrationSettings:
    values = {
        "threshold": 0.82,
        "n_classes": 3,
        "start": 0.5,
        "stop": 0.95,
        "step": 0.01,
        "encoder": "transformers: roberta-large, mean pooling",
        "figure_options": dataclasses.replace(Style.schema_defaults(), dpi=40),
        **overrides,
    }
    settings = CalibrationSettings(**values)
    check_grid(settings)
    return settings


def test_grid_runs_from_start_to_stop_inclusive():
    grid = _settings().grid()
    assert len(grid) == 46 and grid[0] == 0.5 and grid[-1] == 0.95
    assert 0.82 in grid.tolist()  # the paper's threshold is a grid point, exactly
    assert _settings(start=0.0, stop=1.0, step=0.25).grid().tolist() == [0, 0.25, 0.5, 0.75, 1]


def test_classes_passing_each_threshold():
    per_threshold, summary = calibrate(_scores_table(), _settings())
    rows = per_threshold.to_pylist()
    scored = np.array([s for s in SCORES if not math.isnan(s)])
    for row in rows:  # score >= threshold passes, as in the selection step
        assert row["classes_passing"] == int((scored >= row["threshold"]).sum())
        assert row["fraction_passing"] == pytest.approx(row["classes_passing"] / 6)
        assert row["fills_n_classes"] == (row["classes_passing"] >= 3)
    by_t = {round(r["threshold"], 2): r["classes_passing"] for r in rows}
    assert (by_t[0.5], by_t[0.6], by_t[0.61], by_t[0.82], by_t[0.83], by_t[0.95]) == (
        6, 6, 5, 4, 3, 1,
    )  # fmt: skip

    stats = dict(zip(*summary.to_pydict().values(), strict=True))
    assert stats["classes"] == 7 and stats["classes_with_score"] == 6
    assert stats["classes_without_caption"] == 1 and stats["classes_kept_by_selection"] == 3
    assert (stats["score_min"], stats["score_max"]) == (0.6, 0.95)
    assert stats["score_median"] == pytest.approx(np.median(scored))
    assert stats["score_q25"] == pytest.approx(np.quantile(scored, 0.25))
    assert stats["score_mean"] == pytest.approx(scored.mean())
    assert stats["classes_at_or_above_threshold"] == 4
    assert stats["max_threshold_for_n_classes"] == 0.85  # the 3rd highest score
    assert stats["mean_score_of_kept"] == pytest.approx((0.95 + 0.9 + 0.85) / 3)


def test_too_few_or_no_scored_classes():
    _, summary = calibrate(_scores_table(), _settings(n_classes=1000))
    stats = dict(zip(*summary.to_pydict().values(), strict=True))
    assert math.isnan(stats["max_threshold_for_n_classes"])
    assert stats["mean_score_of_kept"] == pytest.approx(np.mean([0.95, 0.9, 0.85, 0.82]))
    per_threshold, summary = calibrate(_scores_table([math.nan]), _settings())
    assert set(per_threshold.column("classes_passing").to_pylist()) == {0}
    stats = dict(zip(*summary.to_pydict().values(), strict=True))
    assert stats["classes_with_score"] == 0 and math.isnan(stats["score_mean"])


def test_bad_scores_table_is_named(tmp_path):
    path = tmp_path / "class_scores.parquet"
    pq.write_table(_scores_table().drop_columns(["status"]), path)
    with pytest.raises(ValueError, match=r"class_scores\.parquet: lacks column\(s\) status"):
        read_scores(path)
    bad = _scores_table().set_column(
        1, "score", pa.array([0.9, math.nan, 0.8, 0.8, 0.8, 0.8, math.nan])
    )
    pq.write_table(bad, path)
    with pytest.raises(CalibrationError, match=r"row 1 \(wnid n00000001\): score is NaN") as err:
        read_scores(path)
    assert "\n" not in str(err.value)
    pq.write_table(_scores_table().set_column(1, "score", pa.array([1.5] * 6 + [math.nan])), path)
    with pytest.raises(CalibrationError, match=r"row 0 .*not a cosine similarity"):
        read_scores(path)


def _cli(tmp_path, settings: dict, rc=0) -> dict:
    """``imagenot curate-calibration`` on the planted scores (exit status ``rc``): its outputs
    by name."""
    from imagenot.cli import main

    scores = tmp_path / "class_scores.parquet"
    pq.write_table(_scores_table(), scores)
    names = ("calibration.csv", "summary.csv", "calibration.pdf", "calibration.png")
    out = {n: tmp_path / n for n in names}
    args = {"--class-scores": scores, "--settings": json.dumps(settings)}
    args.update({"--csv": out["calibration.csv"], "--summary": out["summary.csv"]})
    args.update({"--pdf": out["calibration.pdf"], "--png": out["calibration.png"]})
    assert main(["curate-calibration", *(str(x) for pair in args.items() for x in pair)]) == rc
    return out


def test_settings_json_names_a_wrong_key(tmp_path):
    good = json.loads(to_json(_settings()))
    for bad, words in (
        ({**good, "treshold": 0.8}, r"unknown key\(s\) \['treshold'\]"),
        ({k: v for k, v in good.items() if k != "encoder"}, r"missing key\(s\) \['encoder'\]"),
        ({**good, "n_classes": 2.5}, r"--settings: key n_classes must be an integer, not 2\.5"),
    ):
        with pytest.raises(SystemExit, match=words):
            _cli(tmp_path, bad)
    _cli(tmp_path, {**good, "start": 0.9, "stop": 0.5}, rc=2)  # one line, no traceback
    with pytest.raises(CalibrationError, match=r"grid .* is empty"):
        check_grid(_settings(start=0.9, stop=0.5))


def test_cli_writes_tables_and_figure(tmp_path):
    out = _cli(tmp_path, json.loads(to_json(_settings())))
    table = pacsv.read_csv(out["calibration.csv"])
    assert table.column_names == [
        "threshold",
        "classes_passing",
        "fraction_passing",
        "fills_n_classes",
    ]
    assert table.num_rows == 46
    summary = pacsv.read_csv(out["summary.csv"]).to_pydict()
    assert dict(zip(summary["statistic"], summary["value"], strict=True))["classes"] == 7
    assert out["calibration.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out["calibration.pdf"].read_bytes()[:5] == b"%PDF-"


def test_plan_targets_and_settings(repo_root):
    demo = load_config(repo_root / "config" / "config.yaml")
    targets = plan.targets(demo)
    for dataset in plan.laion_datasets(demo):
        assert set(plan.calibration_outputs(dataset)) <= set(targets)
    assert "results/curate/imagenot/calibration.png" in targets
    built = CalibrationSettings.from_config(demo, dataset="imagenot")
    settings = parse(CalibrationSettings, to_json(built))
    assert settings == built
    assert settings.threshold == demo["curate"]["threshold"]
    own = demo["datasets"]["imagenot"]
    assert settings.n_classes == own.get("n_classes", demo["curate"]["n_classes"])
    assert (settings.start, settings.stop, settings.step) == (0.5, 0.95, 0.01)  # schema defaults
    assert settings.encoder.startswith("sentence_transformers: ")
    paper = load_config(repo_root / "config" / "paper.yaml")
    label = CalibrationSettings.from_config(paper, dataset="imagenot").encoder
    assert label == "transformers: FacebookAI/roberta-large, mean pooling"


def test_rule_writes_the_planned_files():
    """Read on rule curate_calibration as Snakemake holds it (tests/snakemake_rules.py): its
    outputs are the stage's planned files, its report entries are under Curation, and its
    settings are CalibrationSettings' for its dataset."""
    from snakemake.iocontainers import Wildcards

    from imagenot.core.settings import to_arg

    # one dataset with a class count of its own: a rule that read another dataset's settings
    # would differ
    workflow = snakemake_rules.loaded(overlay={"datasets": {"imagenet": {"n_classes": 7}}})
    rule = workflow.rules["curate_calibration"]
    names = ("CALIBRATION", "CALIBRATION_SUMMARY", "CALIBRATION_FIGURE", "CALIBRATION_PDF")
    assert tuple(getattr(plan, name) for name in names) == plan.CALIBRATION_FILES
    reports = [f.flags["report"] for f in rule.output if "report" in f.flags]
    assert reports and {r.category for r in reports} == {"Curation"}
    curated = [n for n, spec in workflow.config["datasets"].items() if spec["kind"] == "laion"]
    for dataset in curated:
        # the rule's outputs are the stage's patterns
        outputs = {f.apply_wildcards({"dataset": dataset}) for f in rule.output}
        assert outputs == set(plan.calibration_outputs(dataset)), dataset
        settings = workflow.evaluate(
            rule.params.settings, wildcards=Wildcards(fromdict={"dataset": dataset})
        )
        expected = CalibrationSettings.from_config(workflow.config, dataset=dataset)
        assert settings == to_arg(expected), dataset
