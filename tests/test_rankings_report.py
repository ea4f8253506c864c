"""The rankings report's type (imagenot.analyse.report): written, read back, refused when wrong."""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from imagenot.analyse.checks import validate_table
from imagenot.analyse.rankings import rankings_report
from imagenot.analyse.report import (
    DatasetEntry,
    RankingsReport,
    ReportError,
    read_report,
)
from imagenot.analyse.settings import RankingsSettings
from imagenot.analyse.stats import UNDEFINED_P_METHOD
from imagenot.cli import main


def table() -> pd.DataFrame:
    """Six models, three seeds, five datasets: one with every accuracy equal (undefined
    correlations), one with two models only (nothing compared); no model has every dataset."""
    rng = np.random.default_rng(4)
    rows = []
    for i, m in enumerate("abcdef"):
        for d in ("ref", "x", "y", "flat", "pair"):
            if (d == "pair" and m not in "ef") or (d, m) in (("x", "e"), ("y", "f")):
                continue
            for seed in range(3):
                acc = 50.0 if d == "flat" else 30 + 6 * i + rng.normal(0, 2)
                acc = round(acc * 8) / 8  # a count of correct images out of 800
                rows.append({"model": m, "dataset": d, "seed": seed, "accuracy": acc, "n": 800})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def report() -> RankingsReport:
    settings = RankingsSettings.hand_typed(reference="ref", baseline_model="a", reps=40, seed=1)
    return rankings_report(
        validate_table(table()), settings, min_reference_accuracy=40, floors={"*": 1.0}
    )


def test_every_section_is_typed_and_reads_back_to_the_same_bytes(report, tmp_path):
    entry = report.datasets["x"]
    assert isinstance(entry, DatasetEntry) and entry.correlations is not None
    assert entry.ols is not None and entry.ols_subset is not None and entry.bootstrap is not None
    assert entry.seeds == dict.fromkeys("abcdf", 3) and entry.relative_progress["a"] == 1.0
    assert report.datasets["ref"].reference is None and report.datasets["ref"].ols is None
    assert report.datasets["flat"].correlations.p_method == UNDEFINED_P_METHOD
    assert report.datasets["pair"].correlations is None  # two models: listed as not computed
    assert "pair: kendall_tau" in report.not_computed
    assert report.across_datasets is None  # no model has every dataset
    path = tmp_path / "rankings.json"
    path.write_text(report.to_text())
    again = read_report(path)
    assert again == report and again.to_text() == path.read_text()


def test_the_json_keys_are_the_fields_in_order(report):
    data = json.loads(report.to_text())
    assert list(data) == [f.name for f in dataclasses.fields(RankingsReport)]
    x = data["datasets"]["x"]
    # the correlations sit beside the ranks (a flat field), between delta_rank and ols
    keys = list(x)
    assert keys.index("delta_rank") < keys.index("kendall_tau") < keys.index("ols")
    assert "correlations" not in x and data["across_datasets"] == {}
    # a statistic not computed is absent, a NaN one is null
    assert "ols" not in data["datasets"]["ref"]
    assert data["datasets"]["flat"]["kendall_tau"] is None


def test_the_command_writes_what_it_prints_and_read_report_reads_it(tmp_path, capsys):
    path, out = tmp_path / "t.csv", tmp_path / "r.json"
    table().to_csv(path, index=False)
    argv = ["rankings", str(path), "--bootstrap-reps", "20", "--baseline", "b", "--json"]
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed == out.read_text()
    assert read_report(out).to_text() == printed


def test_the_summary_of_a_report_without_across_dataset_means(tmp_path, capsys):
    """No model has every dataset here, so the report has no across-dataset means
    (``across_datasets`` None): the printed summary leaves them out (the workflow's rule
    ``rankings_json`` prints it for a run of one dataset beside the reference)."""
    path, out = tmp_path / "t.csv", tmp_path / "r.json"
    table().to_csv(path, index=False)
    argv = ["rankings", str(path), "--bootstrap-reps", "20", "--baseline", "b", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert read_report(out).across_datasets is None
    assert printed.startswith("6 models, 5 datasets; reference: ref")
    assert "not computed: across_datasets: no model has results on every aggregated" in printed
    assert "size-weighted mean" not in printed


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("reference"), "missing key(s) ['reference']"),
        (
            lambda r: r["datasets"]["x"].pop("kendall_p"),
            "missing key(s) ['datasets.x.kendall_p']",
        ),
        (
            lambda r: r["datasets"]["x"].update(kendal_tau=0.5),
            "unknown key(s) ['datasets.x.kendal_tau']; DatasetEntry takes keys ",
        ),
        (
            lambda r: r["datasets"]["x"]["ols"].update(slope="1.0"),
            'key datasets.x.ols.slope must be a number or null, not "1.0"',
        ),
        (
            lambda r: r["datasets"]["x"]["interval"].update(a=[1.0, True]),
            "key datasets.x.interval.a[1] must be a number or null, not true",
        ),
        (
            lambda r: r["error_spearman"][0].update(n=2.5),
            "key error_spearman[0].n must be an integer, not 2.5",
        ),
        (
            lambda r: r.update(across_datasets=None),
            "key across_datasets must be an object, not null",
        ),
    ],
)
def test_a_wrong_key_is_one_line_naming_the_file_and_the_key(report, tmp_path, change, message):
    data = copy.deepcopy(json.loads(report.to_text()))
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ReportError) as err:
        read_report(path)
    text = str(err.value)
    assert text.startswith(f"{path}: {message}") and "\n" not in text
    # a message ends where the line ends, but for the keys an unknown key's class takes
    assert text == f"{path}: {message}" or message.endswith("takes keys ")
