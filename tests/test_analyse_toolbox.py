"""The rankings toolbox on anyone's table: input refusals, the neighbouring papers' analyses
(against scipy/statsmodels), the compact summary, `imagenot ci`, and the report's figures and
tables for a table without workflow columns."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from PIL import Image
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from imagenot.analyse import stats
from imagenot.analyse.checks import validate_table
from imagenot.analyse.rankings import BOOTSTRAP_OVER, DELTA_RANK_SIGN, rankings_report
from imagenot.analyse.report import RankingsReport
from imagenot.analyse.settings import RankingsSettings
from imagenot.analyse.table import TableError, read_table
from imagenot.cli import build_parser, main
from imagenot.core.settings import Style
from imagenot.figures import rank_changes, registry, report, tables
from imagenot.figures.rankings_cli import summary_text

SSL = "ssl_resnet50_imagenet_variants.csv"
NEW = "new_test_sets_excerpt.csv"


def random_table(rng, models=8, datasets=("ref", "a", "b", "c"), n=10_000, missing=0.0):
    """Accuracy = dataset-specific linear map of a latent quality plus noise, in percent."""
    quality = rng.uniform(40, 90, models)
    rows = []
    for j, d in enumerate(datasets):
        slope, shift = 1.0 - 0.08 * j, -5.0 * j
        for i in range(models):
            if j and rng.uniform() < missing:
                continue
            acc = float(np.clip(shift + slope * quality[i] + rng.normal(0, 3), 1, 99))
            acc = round(acc / 100 * n) / n * 100  # a count of correct images out of n
            rows.append({"model": f"m{i}", "dataset": d, "accuracy": acc, "n": n})
    return pd.DataFrame(rows)


COMMAND_ONLY = ("per_image", "min_reference_accuracy", "aggregate", "floors")
"""The options of ``rankings_report`` that are the command's, not settings fields."""


def typed_report_of(df, reference="ref", **kw) -> RankingsReport:
    """The report of ``df`` under the settings typed by hand, ``kw`` replacing fields."""
    options = {k: kw.pop(k) for k in COMMAND_ONLY if k in kw}
    settings = RankingsSettings.hand_typed(reference=reference, **kw)
    return rankings_report(validate_table(df), settings, **options)


def report_of(df, reference="ref", **kw) -> dict:
    """:func:`typed_report_of` as its JSON file holds it (what most tests here check)."""
    return typed_report_of(df, reference, **kw).to_json()


def small_style(**changes) -> Style:
    """The report's style of a config that sets nothing, at 40 dpi, with ``changes``."""
    return dataclasses.replace(Style.schema_defaults(), dpi=40, **changes)


def cli(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


# ------------------------------------------------------------------------------ refusals


def test_fractions_are_refused_with_a_hint_unless_declared(tmp_path, capsys):
    rng = np.random.default_rng(0)
    df = random_table(rng)
    frac = df.assign(accuracy=df.accuracy / 100)
    with pytest.raises(TableError, match="pass --fractions"):
        validate_table(frac)
    path = tmp_path / "frac.csv"
    frac.to_csv(path, index=False)
    code, _, err = cli(["rankings", str(path)], capsys)
    assert code == 2 and "75.1, not 0.751" in err and len(err.strip().splitlines()) == 1
    as_pct = report_of(df, reps=0)
    as_frac = rankings_report(
        validate_table(frac, scale_of={"*": "fraction"}),
        RankingsSettings.hand_typed(reference="ref", reps=0),
    ).to_json()
    assert as_frac["datasets"]["a"]["accuracy"] == pytest.approx(
        as_pct["datasets"]["a"]["accuracy"]
    )
    assert as_frac["datasets"]["a"]["interval"]["m1"] == pytest.approx(
        as_pct["datasets"]["a"]["interval"]["m1"]
    )
    with pytest.raises(TableError, match="not a fraction in 0-1"):
        validate_table(df, scale_of={"*": "fraction"})


def test_confidence_must_lie_between_0_and_1(tmp_path, capsys):
    rng = np.random.default_rng(1)
    with pytest.raises(TableError, match=r"did you mean 0\.95"):
        report_of(random_table(rng), confidence=95)
    path = tmp_path / "t.csv"
    random_table(rng).to_csv(path, index=False)
    with pytest.raises(SystemExit) as exit_:
        main(["rankings", str(path), "--confidence", "95"])
    assert exit_.value.code == 2
    assert "strictly between 0 and 1" in capsys.readouterr().err
    assert main(["ci", "--accuracy", "75", "--n", "100", "--confidence", "0"]) == 2
    assert "strictly between 0 and 1" in capsys.readouterr().err


def test_unreadable_files_give_one_line_without_traceback(tmp_path, capsys):
    header = tmp_path / "header.csv"
    header.write_text("model,dataset,accuracy\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("name,score\na,1\n")
    for path, message in (
        (tmp_path / "missing.csv", "no such file"),
        (header, "header only, no data rows"),
        (empty, "the file is empty"),
        (wrong, "lacks column(s) model, dataset, accuracy"),
    ):
        code, _, err = cli(["rankings", str(path)], capsys)
        assert code == 2, path
        assert message in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
        assert str(path) in err


def test_sizes_differing_within_a_dataset_use_each_models_n(capsys):
    rng = np.random.default_rng(2)
    df = random_table(rng, datasets=("ref", "a", "b"))
    df.loc[(df.dataset == "a") & (df.model == "m3"), "n"] = 500
    df.loc[(df.dataset == "a") & (df.model == "m3"), "accuracy"] = 37.4  # 187 of 500
    rep = report_of(df, reps=0)
    assert any("a: test-set size n differs" in w for w in rep["warnings"])
    acc = rep["datasets"]["a"]["accuracy"]["m3"]
    lo, hi = proportion_confint(round(acc / 100 * 500), 500, 0.05, method="beta")
    assert rep["datasets"]["a"]["interval"]["m3"] == pytest.approx([100 * lo, 100 * hi])
    assert rep["datasets"]["a"]["n"]["m3"] == 500
    # the size-weighted mean weighs m3's accuracy on a by its own n
    wide = df.pivot(index="model", columns="dataset", values="accuracy")[["ref", "a", "b"]]
    w = df.pivot(index="model", columns="dataset", values="n")[["ref", "a", "b"]]
    wm = (wide * w).sum(axis=1) / w.sum(axis=1)
    assert rep["across_datasets"]["weighted_mean"]["m3"] == pytest.approx(wm["m3"])
    assert rep["across_datasets"]["weights"]["a"] == "per model"


def test_missing_models_and_near_duplicate_names_are_reported():
    rng = np.random.default_rng(3)
    df = random_table(rng, models=6)
    df = df[~((df.dataset == "b") & df.model.isin(["m1", "m4"]))]
    df.loc[(df.dataset == "c") & (df.model == "m2"), "model"] = "M 2"
    rep = report_of(df, reps=0)
    assert rep["datasets"]["b"]["missing_models"] == ["m1", "m4", "M 2"]
    assert rep["datasets"]["ref"]["missing_models"] == ["M 2"]
    assert any("m2, M 2" in w for w in rep["warnings"])
    assert any(w.startswith("b: 3 model(s) of the table missing") for w in rep["warnings"])
    assert rep["datasets"]["b"]["common_models"] == 4


def test_wide_tables_with_sizes_equal_their_long_form(tmp_path, published_tables):
    long = pd.read_csv(published_tables / SSL)
    wide = long.pivot(index="model", columns="dataset", values="accuracy")
    order = list(dict.fromkeys(long["dataset"]))
    wide = wide[order[::-1]].reset_index()  # a different column order: kept as given
    path = tmp_path / "wide.csv"
    wide.to_csv(path, index=False)
    sizes = long.drop_duplicates("dataset").set_index("dataset")["n"]
    argv = [f"{d}={int(n)}" for d, n in sizes.items()]
    from imagenot.analyse.table import parse_sizes

    got = read_table(path, "wide", parse_sizes(argv))
    assert list(dict.fromkeys(got["dataset"])) == order[::-1]
    a = report_of(got, "imagenet-val", reps=0)
    b = report_of(long, "imagenet-val", reps=0)
    assert list(a["datasets"]) == order[::-1]
    for d in order:
        for m, bounds in b["datasets"][d]["interval"].items():
            assert a["datasets"][d]["interval"][m] == pytest.approx(bounds)
        assert a["datasets"][d].get("kendall_tau") == b["datasets"][d].get("kendall_tau")
    with pytest.raises(TableError, match="--n names dataset"):
        read_table(path, "wide", {"imagenet-x": 10.0})
    with pytest.raises(TableError, match="expected DATASET=N"):
        parse_sizes(["imagenet-a"])


# ----------------------------------------------------- every option and cell in its domain


def domain_table() -> pd.DataFrame:
    """A healthy long table: four datasets, accuracies that are counts of each test set."""
    rng = np.random.default_rng(20)
    df = random_table(rng, models=10, datasets=("ref", "a", "b", "c"), n=2_000)
    df["seed"] = 0
    return df


def one_line_refusal(argv, capsys) -> str:
    code, _, err = cli(argv, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_a_healthy_table_passes_every_option_at_its_bounds(tmp_path, capsys):
    path = tmp_path / "t.csv"
    domain_table().to_csv(path, index=False)
    argv = ["rankings", str(path), "--bootstrap-reps", "0", "--floor", "0.5", "c=100"]
    argv += ["--min-reference-accuracy", "0", "--models", "1", "--top", "1", "--dpi", "50"]
    argv += ["--highlight", "m3", "--scale", "percent", "--seed", "0"]
    code, out, err = cli([*argv, "--report", str(tmp_path / "r")], capsys)
    assert code == 0, err
    assert "4 datasets" in out and "Traceback" not in err


def test_a_healthy_table_with_intervals_and_agreeing_sizes_passes(tmp_path, capsys):
    """Intervals that contain their accuracies (bounds written with fewer digits) and --n that
    repeats the n column are accepted; the planted cases below differ from this table by one
    cell or option each."""
    df = domain_table()
    df["ci_low"] = (df.accuracy - 1.04).clip(lower=0).round(1)
    df["ci_high"] = (df.accuracy + 1.04).clip(upper=100).round(1)
    df.loc[0, "ci_low"] = round(df.loc[0, "accuracy"], 1)  # rounded onto the accuracy's digits
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    sizes = ["--n", "ref=2000", "a=2000", "b=2000", "c=2000"]
    code, out, err = cli(["rankings", str(path), "--bootstrap-reps", "0", *sizes], capsys)
    assert code == 0, err
    assert "4 datasets" in out


def _edit_cell(df: pd.DataFrame, column: str, value, row: int = 5) -> pd.DataFrame:
    df = df.copy()
    df[column] = df[column].astype(object)
    df.loc[row, column] = value
    return df


def _option(*argv: str, says: str) -> tuple:
    """A planted wrong option on a healthy table: no edit of the table, the option's
    ``argv`` and the message its one line must give."""
    return (lambda df: df, list(argv), says)


PLANTED = {
    # cells: what a table may hold
    "fractions beside percentages": (
        lambda df: df.assign(accuracy=df.accuracy.where(df.dataset != "b", df.accuracy / 100)),
        [],
        "accuracies of b are all at most 1 while those of ref, a, c are percentages",
    ),
    "55% of 3 images": (
        lambda df: _edit_cell(_edit_cell(df, "n", 3), "accuracy", 55),
        [],
        "accuracy 55 cannot be a share of n=3 test images",
    ),
    "n too large for an integer": (lambda df: _edit_cell(df, "n", 1e30), [], "from 1 to 2^53"),
    "a fractional seed": (lambda df: _edit_cell(df, "seed", 1.5), [], "seed 1.5 is not a whole"),
    "an infinite accuracy": (
        lambda df: _edit_cell(df, "accuracy", "inf"),
        [],
        "accuracy inf is not a number",
    ),
    "an empty model name": (lambda df: _edit_cell(df, "model", "  "), [], "empty model"),
    "a model name with a line break": (
        lambda df: _edit_cell(df, "model", "m5\nm6"),
        [],
        "model 'm5\\nm6': character 2 is '\\n' (a line break",
    ),
    "a dataset name with a control character": (
        lambda df: _edit_cell(df, "dataset", "a\x1b[31m"),
        [],
        "dataset 'a\\x1b[31m': character 1 is '\\x1b'",
    ),
    "a negative seed": (lambda df: _edit_cell(df, "seed", -1), [], "seed -1 is not a whole"),
    "an interval that does not contain its accuracy": (
        lambda df: df.assign(ci_low=df.accuracy + 0.5, ci_high=df.accuracy + 1),
        [],
        "lies outside its confidence interval (ci_low ",
    ),
    "an interval bound below its accuracy": (
        lambda df: _edit_cell(df.assign(ci_high=df.accuracy + 1), "ci_high", 1.0, row=0),
        [],
        "line 2 (model='m0', dataset='ref', seed=0): accuracy",
    ),
    "--n beside an n column that disagrees": (
        lambda df: df,
        ["--n", "ref=5"],
        "line 2: n is 2000, but --n ref=5 (give the test-set size once",
    ),
    "ci_low above ci_high": (
        lambda df: df.assign(ci_low=df.accuracy + 1, ci_high=df.accuracy - 1),
        [],
        "ci_low is above ci_high",
    ),
    "a text interval bound": (
        lambda df: _edit_cell(df.assign(ci_low=df.accuracy - 1), "ci_low", "low"),
        [],
        "ci_low 'low' is not a number",
    ),
    # options: each checked for its domain
    "--floor inf": _option("--floor", "inf", says="--floor 'inf': a floor is an accuracy"),
    "--floor x=nan": _option("--floor", "a=nan", says="--floor 'a=nan': a floor is"),
    "--floor 0": _option("--floor", "0", says="above 0 and at most 100"),
    "--min-reference-accuracy nan": _option(
        "--min-reference-accuracy",
        "nan",
        says="--min-reference-accuracy nan: an accuracy is a percentage in 0-100",
    ),
    "--min-reference-accuracy 500": _option(
        "--min-reference-accuracy",
        "500",
        says="--min-reference-accuracy 500: an accuracy is a percentage in 0-100",
    ),
    "--bootstrap-reps -1": _option(
        "--bootstrap-reps",
        "-1",
        says="--bootstrap-reps -1: -1 is less than the minimum of 0 (config key",
    ),
    "--seed -1": _option("--seed", "-1", says="--seed -1: -1 is less than the minimum"),
    "--dpi 10": _option("--dpi", "10", says="--dpi 10: 10 is less than the minimum of 50"),
    "--top 0": _option("--top", "0", says="--top 0: 0 is less than the minimum of 1"),
    "--models 0": _option("--models", "0", says="--models must be a whole number from 1"),
    "--highlight unknown": _option(
        "--highlight", "m33", says="--highlight names model(s) not in the table: m33; close: m3"
    ),
    "--scale unknown scale": _option("--scale", "a=decimal", says="--scale 'a=decimal'"),
    "--scale unknown dataset": _option(
        "--scale", "zz=fraction", says="--scale names dataset(s) not in the table: zz"
    ),
    "--fractions and --scale": _option(
        "--fractions", "--scale", "percent", says="--fractions and --scale: give one"
    ),
    "--key unknown column": _option("--key", "img_size", says="--key names column(s)"),
    "--n too large": (
        lambda df: df.drop(columns="n"),
        ["--n", "ref=1e30", "a=10", "b=10", "c=10"],
        "a test-set size above 2^53",
    ),
    "--settings reps": _option(
        "--settings",
        json.dumps({**dataclasses.asdict(RankingsSettings.hand_typed()), "reps": -5}),
        says="--settings.reps -5: -5 is less than the minimum of 0",
    ),
}


@pytest.mark.parametrize("case", list(PLANTED))
def test_every_planted_wrong_input_is_one_line_naming_it(tmp_path, capsys, case):
    """Every cell and every option is checked for its domain; each wrong one (the
    table otherwise healthy) stops with exit 2 and one line naming it."""
    edit, extra, message = PLANTED[case]
    path = tmp_path / "t.csv"
    edit(domain_table()).to_csv(path, index=False)
    err = one_line_refusal(["rankings", str(path), "--bootstrap-reps", "0", *extra], capsys)
    assert message in err, err


def test_a_wrong_per_image_cell_is_one_line(tmp_path, capsys):
    rows = pd.DataFrame(
        [{"model": m, "dataset": d, "accuracy": 50.0, "n": 2} for m in "abc" for d in ("r", "x")]
    )
    rows.loc[rows.model == "b", "accuracy"] = 100.0
    table = tmp_path / "t.csv"
    rows.to_csv(table, index=False)
    per = [
        {"model": m, "dataset": d, "key": k, "correct": int(k == "i0" or m == "b")}
        for m in "abc"
        for d in ("r", "x")
        for k in ("i0", "i1")
    ]
    per[3]["correct"] = 2
    images = tmp_path / "per_image.csv"
    pd.DataFrame(per).to_csv(images, index=False)
    err = one_line_refusal(["rankings", str(table), "--per-image", str(images)], capsys)
    assert "correct must be 0 or 1" in err, err


def test_scales_are_decided_per_dataset_and_said_when_unclear(tmp_path, capsys):
    df = domain_table()
    mixed = df.assign(accuracy=df.accuracy.where(df.dataset != "b", df.accuracy / 100))
    with pytest.raises(TableError, match="--scale b=fraction"):
        validate_table(mixed)
    converted = validate_table(mixed, scale_of={"b": "fraction"})
    assert converted["accuracy"].to_numpy() == pytest.approx(validate_table(df)["accuracy"])
    # accuracies that really are below 1% are percentages when said so
    low = df.assign(accuracy=df.accuracy.where(df.dataset != "b", 0.5), n=np.nan)
    assert validate_table(low, scale_of={"b": "percent"})["accuracy"].max() > 1
    with pytest.raises(TableError, match="one table, one scale"):
        validate_table(low)
    # a fraction declared for all, percentages in the table: refused, not divided
    with pytest.raises(TableError, match=r"not a fraction in 0-1 \(--scale fraction\)"):
        validate_table(df, scale_of={"*": "fraction"})
    path = tmp_path / "mixed.csv"
    mixed.to_csv(path, index=False)
    code, out, err = cli(
        ["rankings", str(path), "--scale", "b=fraction", "--bootstrap-reps", "0"], capsys
    )
    assert code == 0 and "b: 10 models" in out, err


def test_a_dataset_of_one_row_given_as_a_fraction_is_never_mixed_in(tmp_path, capsys):
    """One dataset's single row written as a fraction (0.91), no ``n`` column to tell, among
    datasets in percent: the scale is decided per dataset, so the table is refused naming the
    dataset and how to say its scale; said, the row is converted to percent."""
    rows = [(m, d, a) for d, accs in (("ref", (76.1, 80.2, 70.0)), ("a", (60.0, 65.0, 55.0)))
            for m, a in zip("xyz", accs, strict=True)]  # fmt: skip
    table = pd.DataFrame([*rows, ("x", "lone", 0.91)], columns=["model", "dataset", "accuracy"])
    path = tmp_path / "one-row.csv"
    table.to_csv(path, index=False)
    code, _, err = cli(["rankings", str(path), "--bootstrap-reps", "0"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "accuracies of lone are all at most 1 while those of ref, a are percentages" in err
    assert "--scale lone=fraction" in err
    converted = validate_table(table, scale_of={"lone": "fraction"})
    assert converted.set_index("dataset").loc["lone", "accuracy"] == pytest.approx(91.0)
    assert validate_table(table, scale_of={"lone": "percent"})["accuracy"].min() == 0.91


def test_counts_allow_the_digits_an_accuracy_is_written_with():
    """33.3% of 3 images is 1 of 3 rounded; 66.67% is 2 of 3; 76.1% of 50,000 is exact; the
    published tables of resources/published/ all pass (test_analyse_fixtures)."""
    df = pd.DataFrame(
        {
            "model": ["a", "b", "c", "d"],
            "dataset": "x",
            "accuracy": [33.3, 66.67, 100.0, 0.0],
            "n": 3,
        }
    )
    assert len(validate_table(df)) == 4
    # 33.4 (1 of 3 rounded up) is within the slack of a printed digit; 33.5 is not
    assert len(validate_table(df.assign(accuracy=[33.4, 66.67, 100, 0]))) == 4
    with pytest.raises(TableError, match=r"accuracy 33.5 cannot be a share of n=3"):
        validate_table(df.assign(accuracy=[33.5, 66.67, 100, 0]))
    frac = df.assign(accuracy=[0.333, 0.6667, 1.0, 0.0])
    assert validate_table(frac, scale_of={"*": "fraction"})["accuracy"].iloc[0] == pytest.approx(
        33.3
    )


def test_repeated_models_are_counted_and_keyed_apart(tmp_path, capsys):
    """A table of timm's shape: the same model at two image sizes (here 29 of 120) is refused
    naming how many, the first few and the column that tells them apart; ``--key img_size``
    makes each its own model, ``model@img_size``."""
    from imagenot.analyse import synthetic

    df = synthetic.results_table(120, ("in-val", "in-a"), sizes=(50_000, 7_500), seed=3)
    df["img_size"] = 224
    again = df[df.model.isin(df.model.unique()[:29])].assign(img_size=288)
    table = pd.concat([df, again], ignore_index=True)
    path = tmp_path / "timm.csv"
    table.to_csv(path, index=False)
    err = one_line_refusal(["rankings", str(path)], capsys)
    first = df.model.iloc[0]
    assert "116 rows share a key (model, dataset) with another row: 58 repeated key(s)" in err
    assert f"model='{first}', dataset='in-val' (lines 2, 242)" in err
    assert "differ in img_size: key them apart with --key img_size" in err
    code, out, err = cli(["rankings", str(path), "--key", "img_size", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert f"{first}@224" in rep["models"] and f"{first}@288" in rep["models"]
    assert len(rep["models"]) == 149


# ----------------------------------------------------------------------- small samples


def test_spearman_p_for_four_models_is_exact():
    df = pd.DataFrame(
        {
            "model": list("abcd") * 2,
            "dataset": ["r"] * 4 + ["x"] * 4,
            "accuracy": [80, 70, 60, 50, 40, 35, 30, 20.0],
        }
    )
    x = report_of(df, "r")["datasets"]["x"]
    assert x["spearman_rho"] == pytest.approx(1.0)
    assert x["spearman_p"] == pytest.approx(2 / 24)  # scipy's t approximation says 0.0
    assert x["kendall_p"] == x["pearson_p"] == pytest.approx(2 / 24)
    assert x["p_method"] == "exact: all 24 pairings"


@pytest.mark.parametrize("models", [5, 6])
def test_correlation_tests_equal_scipys_permutation_test(models):
    rng = np.random.default_rng(models)
    a = rng.normal(size=models)
    b = np.round(a + rng.normal(size=models), 1)
    b[1] = b[2]  # a tie in each vector
    a[3] = a[4]
    got = stats.correlation_tests(a, b, seed=3)
    for key, f in (
        ("spearman_p", lambda u: sps.spearmanr(u, b).statistic),
        ("kendall_p", lambda u: sps.kendalltau(u, b).statistic),
        ("pearson_p", lambda u: sps.pearsonr(u, b).statistic),
    ):
        ref = sps.permutation_test((a,), f, permutation_type="pairings", n_resamples=np.inf)
        assert got[key] == pytest.approx(ref.pvalue, abs=1e-12), key
    assert got["p_method"] == f"exact: all {math.factorial(models)} pairings"
    assert got["spearman_rho"] == pytest.approx(sps.spearmanr(a, b).statistic)
    assert got["kendall_tau"] == pytest.approx(sps.kendalltau(a, b).statistic)
    assert got["pearson_r"] == pytest.approx(sps.pearsonr(a, b).statistic)


@pytest.mark.parametrize("models", [12, stats.PERMUTATION_MAX_MODELS])
def test_correlation_tests_between_the_thresholds_draw_random_pairings(models):
    """Without ties, scipy's exact Kendall p-value is the permutation distribution's: the
    seeded random pairings land within their Monte Carlo error of it (sd <= 0.0036)."""
    rng = np.random.default_rng(models)
    a = rng.normal(size=models)
    b = a + rng.normal(0, 2.5, size=models)
    got = stats.correlation_tests(a, b, seed=1)
    assert got["p_method"] == f"permutation: {stats.PERMUTATIONS} random pairings, seed 1"
    exact = sps.kendalltau(a, b, method="exact").pvalue
    assert 0.01 < exact < 0.99  # a p-value with Monte Carlo error to speak of
    assert got["kendall_p"] == pytest.approx(exact, abs=0.015)
    assert got == stats.correlation_tests(a, b, seed=1)  # seeded


def test_correlation_tests_above_the_threshold_and_undefined():
    n = stats.PERMUTATION_MAX_MODELS + 1
    a = np.arange(n, dtype=float)
    b = a + np.random.default_rng(0).normal(0, 5, n)
    got = stats.correlation_tests(a, b, seed=0)
    assert got["p_method"] == "asymptotic (scipy)"
    assert got["spearman_p"] == pytest.approx(sps.spearmanr(a, b).pvalue)
    undefined = stats.correlation_tests(np.ones(5), np.arange(5.0), seed=0)
    assert undefined["p_method"].startswith("undefined")
    assert np.isnan(undefined["spearman_p"]) and np.isnan(undefined["kendall_tau"])


def brute_force_p(a, b, statistic):
    """Two-sided p over all pairings, as scipy defines it: 2 x the smaller tail, at most 1."""
    obs = statistic(a, b)
    null = np.array([statistic(np.array(p), b) for p in itertools.permutations(a)])
    tol = 1e-12 * max(1.0, abs(obs))
    return min(1.0, 2 * min(np.mean(null >= obs - tol), np.mean(null <= obs + tol)))


def test_every_p_value_of_every_section_is_exact_for_four_models(tmp_path, capsys):
    """Per dataset, subsets, aggregates, correlation averages and error correlations.

    Walks the whole ``imagenot rankings --json`` report: every dict holding a p-value names its
    method, and on four models every p-value is the enumerated one (perfectly agreeing ranks:
    2/24 = 0.083, where scipy's approximations say 0.0).
    """
    acc = {
        "ref": [80, 70, 60, 50],
        "same": [40, 35, 30, 20],  # the reference's order
        "swap": [62, 66, 50, 41],  # the first two swapped
        "reversed": [20, 30, 35, 50],
        "noisy": [71, 69, 70, 52],
    }
    df = pd.DataFrame(
        [
            {"model": m, "dataset": d, "accuracy": float(v), "n": 1000}
            for d, values in acc.items()
            for m, v in zip("abcd", values, strict=True)
        ]
    )
    path = tmp_path / "four.csv"
    df.to_csv(path, index=False)
    assert (
        main(
            [
                "rankings",
                str(path),
                "--json",
                "--bootstrap-reps",
                "0",
                "--min-reference-accuracy",
                "55",
                "--aggregate",
                "same",
                "swap",
                "reversed",
                "noisy",
            ]
        )
        == 0
    )
    rep = json.loads(capsys.readouterr().out)
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            ps = [k for k in node if k == "p" or k.endswith("_p")]
            if ps:
                found.append((where, node, ps))
            for k, v in node.items():
                walk(v, f"{where}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")

    walk(rep, "report")
    sections = {where.split(".")[1].split("[")[0] for where, _, _ in found}
    assert sections == {"datasets", "across_datasets", "error_spearman"}, sections
    wide = pd.DataFrame(acc, index=list("abcd"))
    funcs = {
        "kendall_p": lambda u, v: sps.kendalltau(u, v).statistic,
        "spearman_p": lambda u, v: sps.spearmanr(u, v).statistic,
        "pearson_p": lambda u, v: sps.pearsonr(u, v).statistic,
        "p": lambda u, v: sps.spearmanr(u, v).statistic,
    }
    checked = 0
    for where, node, ps in found:
        assert node["p_method"] == "exact: all 24 pairings", where
        if where.startswith("report.datasets."):
            d = where.split(".")[2]
            u, v = wide[d], wide["ref"]
        elif ".with_mean_of_others." in where:
            d = where.split(".")[-1]
            others = [c for c in ("same", "swap", "reversed", "noisy") if c != d]
            u, v = wide[d], wide[others].mean(axis=1)
        else:
            u, v = 100 - wide[node["a"]], 100 - wide[node["b"]]
        for key in ps:
            expect = brute_force_p(u.to_numpy(), v.to_numpy(), funcs[key])
            assert node[key] == pytest.approx(expect, abs=1e-12), (where, key)
            assert node[key] >= 2 / 24, (where, key)  # never 0 with four models
            checked += 1
    # 4 compared datasets x 3, 4 aggregated datasets x 3, 10 dataset pairs
    assert checked == 4 * 3 + 4 * 3 + 10
    same = rep["datasets"]["same"]
    assert same["spearman_p"] == same["kendall_p"] == same["pearson_p"] == pytest.approx(2 / 24)
    assert "slope" in same["ols_subset"]  # the subset fit is computed (intervals, no p-value)


# ------------------------------------------------------------------------------ bootstrap


def test_bootstrap_interval_methods():
    rng = np.random.default_rng(4)
    v = rng.normal(0.0, 1.0, 20_000)
    pct = stats.bootstrap_interval(v, 0.0, 0.9, "percentile")["ci"]
    assert pct == pytest.approx(list(np.quantile(v, [0.05, 0.95])))
    basic = stats.bootstrap_interval(v, 0.3, 0.9, "basic")["ci"]
    assert basic == pytest.approx([0.6 - pct[1], 0.6 - pct[0]])
    # replicates centred on the estimate: BC equals the percentile interval
    bc = stats.bootstrap_interval(v, float(np.median(v)), 0.9, "bc")["ci"]
    assert bc == pytest.approx(pct, abs=0.02)
    # skewed replicates (tau near 1), 70% of them below the estimate: BC moves towards it
    skew = 1 - rng.exponential(0.05, 5000)
    est = float(np.quantile(skew, 0.7))
    p = stats.bootstrap_interval(skew, est, 0.95, "percentile")
    b = stats.bootstrap_interval(skew, est, 0.95, "bc")
    assert p["ci"][0] <= est <= p["ci"][1] and b["ci"][0] <= est <= b["ci"][1]
    assert b["ci"][0] > p["ci"][0] and b["ci"][1] > p["ci"][1]


# (replicates, estimate, method) -> what the refusal says; each beside a healthy case above
DEGENERATE = {
    "every replicate equal (a ranking no resample changes)": (
        np.full(1000, 1.0),
        1.0,
        ("bc", "percentile", "basic"),
        "all 1000 replicates equal 1: resampling leaves the statistic fixed",
    ),
    "the estimate above every replicate (tau 1 resampled over images)": (
        np.linspace(0.92, 0.983, 1000),
        1.0,
        ("bc",),
        "the estimate 1 lies above all 1000 replicates (0.92 to 0.983): the bias correction "
        "z0 = Phi^-1(1) is infinite",
    ),
    "the estimate outside the percentile interval": (
        np.linspace(0.92, 0.983, 1000),
        1.0,
        ("percentile", "basic"),
        "the estimate 1 lies outside the",
    ),
    "99% of the replicates below the estimate": (
        np.linspace(0.0, 1.0, 1000),
        0.99,
        ("bc", "percentile"),
        "the estimate 0.99 lies outside the",
    ),
    "most replicates on one value": (
        np.r_[np.full(980, 0.95), np.linspace(0.9, 0.94, 20)],
        0.95,
        ("percentile",),
        "interval has zero width: 98% of the 1000 replicates equal 0.95",
    ),
}


@pytest.mark.parametrize("case", list(DEGENERATE))
def test_a_degenerate_bootstrap_gives_no_interval_and_says_why(case):
    """No interval of zero width, or one that excludes its estimate, is returned: the
    replicates' reason is (scipy.stats.bootstrap's BCa is NaN with a DegenerateDataWarning
    where z0 is infinite)."""
    values, estimate, methods, says = DEGENERATE[case]
    for method in methods:
        out = stats.bootstrap_interval(values, estimate, 0.95, method)
        assert out["ci"] is None and says in out["refused"], (method, out)


def _per_image_table(models: int, images: int, spread: float, rng, noise: float = 0.0):
    """A results table of two test sets and its per-image results: model m gets
    0.55 + spread * m / models of the images right (the second set 8 points lower), plus
    normal noise of sd ``noise`` per set."""
    rows, per = [], []
    for d, drop in (("v4", 0.0), ("v6", 0.08)):
        keys = [f"{d}-{i}" for i in range(images)]
        for m in range(models):
            p = 0.55 + spread * m / models - drop + rng.normal(0, noise)
            correct = np.zeros(images, dtype=int)
            correct[rng.permutation(images)[: round(p * images)]] = 1
            rows.append({"model": f"m{m:02d}", "dataset": d, "accuracy": 100 * correct.mean(),
                         "n": images})  # fmt: skip
            per.append(pd.DataFrame({"model": f"m{m:02d}", "dataset": d, "key": keys,
                                     "correct": correct}))  # fmt: skip
    return pd.DataFrame(rows), pd.concat(per, ignore_index=True)


def test_a_per_image_table_whose_ranking_no_resample_changes(tmp_path, capsys):
    """CIFAR-10.1 v4 against v6 in shape: 40 models spread so far apart that resampling the
    2,000 images never reorders them on either set, so Kendall's tau is 1 and every replicate
    below it; no BC interval is printed or written, and the reason is, in the summary, the
    JSON and statistics.md."""
    table, per = _per_image_table(40, 2000, 0.4, np.random.default_rng(0))
    t, p = tmp_path / "table.csv", tmp_path / "per_image.parquet"
    table.to_csv(t, index=False)
    per.to_parquet(p)
    argv = ["rankings", str(t), "--per-image", str(p), "--reference", "v4"]
    argv += ["--bootstrap-reps", "200", "--out", str(tmp_path / "rankings.json")]
    code, out, err = cli([*argv, "--report", str(tmp_path / "report"), "--dpi", "50"], capsys)
    assert code == 0, err
    assert "tau-b 1.000 (no bc interval over images: the estimate 1 lies above all 200" in out
    rep = json.loads((tmp_path / "rankings.json").read_text())
    boot = rep["datasets"]["v6"]["bootstrap"]
    assert (
        boot["kendall_tau_ci"] is None
        and "z0 = Phi^-1(1) is infinite" in (boot["refused"]["kendall_tau_ci"])
    )
    assert rep["not_computed"]["v6: bootstrap.kendall_tau_ci"].endswith(
        boot["refused"]["kendall_tau_ci"]
    )
    md = (tmp_path / "report" / "statistics.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| v6 "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    head = [c.strip() for c in md.splitlines()[2].strip("|").split("|")]
    got = dict(zip(head, cells, strict=True))
    assert got["kendall_tau_ci_low"] == got["kendall_tau_ci_high"] == ""
    assert (
        "kendall_tau_ci: the estimate 1 lies above all 200 replicates" in (got["bootstrap_refused"])
    )


def test_a_per_image_table_whose_ranking_is_the_same_in_every_resample():
    """Five models 12 points apart on 400 images: every resample of the images keeps their
    order on both sets, every replicate of tau is 1, and the interval is refused as such."""
    table, per = _per_image_table(5, 400, 0.6, np.random.default_rng(2))
    rep = report_of(table, reference="v4", reps=200, per_image=per)
    boot = rep["datasets"]["v6"]["bootstrap"]
    assert boot["kendall_tau_ci"] is None
    assert boot["refused"]["kendall_tau_ci"].startswith(
        "all 200 replicates equal 1: resampling leaves the statistic fixed"
    )
    assert rep["not_computed"]["v6: bootstrap.kendall_tau_ci"] == (
        f"bc interval over images: {boot['refused']['kendall_tau_ci']}"
    )


def test_a_per_image_table_whose_ranking_resamples_change_has_its_interval(capsys):
    """Models close together on 1,000 images: resampling reorders them, tau lies inside its
    interval of positive width, and nothing is refused."""
    table, per = _per_image_table(12, 1000, 0.12, np.random.default_rng(1), noise=0.02)
    rep = report_of(table, reference="v4", reps=400, per_image=per)
    boot = rep["datasets"]["v6"]["bootstrap"]
    lo, hi = boot["kendall_tau_ci"]
    assert lo < rep["datasets"]["v6"]["kendall_tau"] < hi
    assert "refused" not in boot and not any("bootstrap" in k for k in rep["not_computed"])


def test_per_image_results_agree_with_the_tables_accuracies_up_to_its_digits():
    """The table's accuracies printed with 2 decimals (rounded from shares of 997 images), or
    as fractions, agree with the per-image results they were counted from: taken."""
    table, per = _per_image_table(12, 997, 0.12, np.random.default_rng(1), noise=0.02)
    assert (table.accuracy.round(2) != table.accuracy).any()
    for printed in (table.assign(accuracy=table.accuracy.round(2)), table):
        rep = report_of(printed, reference="v4", reps=50, per_image=per)
        assert rep["datasets"]["v6"]["bootstrap"]["method"] == "images"
    fractions = table.assign(accuracy=table.accuracy / 100)
    settings = RankingsSettings.hand_typed(reference="v4", reps=50)
    rep = rankings_report(
        validate_table(fractions, scale_of={"*": "fraction"}), settings, per_image=per
    )
    assert rep.datasets["v6"].bootstrap.method == "images"


def test_per_image_results_of_other_runs_than_the_tables_are_refused(tmp_path, capsys):
    """The tau estimate comes from the table's accuracies and its replicates from the per-image
    results: a model's per-image results giving 38.2% where the table says 61.8% is refused
    in one line naming the model and the dataset, before any interval."""
    table, per = _per_image_table(12, 1000, 0.12, np.random.default_rng(1), noise=0.02)
    table.loc[(table.model == "m05") & (table.dataset == "v6"), "accuracy"] = 61.8
    rows = (per.model == "m05") & (per.dataset == "v6")
    per.loc[rows, "correct"] = (np.arange(1000) < 382).astype(int)
    t, p = tmp_path / "table.csv", tmp_path / "per_image.parquet"
    table.to_csv(t, index=False)
    per.to_parquet(p)
    argv = ["rankings", str(t), "--per-image", str(p), "--reference", "v4"]
    err = one_line_refusal([*argv, "--bootstrap-reps", "50"], capsys)
    assert (
        "per-image results of model 'm05' on dataset 'v6': 382 of 1000 images correct is "
        "38.2000%, but the table's accuracy is 61.8% (further than the 0.15 its digits allow)"
    ) in err, err


def test_bootstrap_over_models_is_seeded_and_close_to_the_ols_interval():
    rng = np.random.default_rng(5)
    df = random_table(rng, models=60, datasets=("ref", "a"))
    rep = report_of(df, reps=400, seed=3, over="models")
    boot = rep["datasets"]["a"]["bootstrap"]
    assert boot["method"] == "models" and boot["interval"] == "bc"
    again = report_of(df, reps=400, seed=3, over="models")
    assert again["datasets"]["a"]["bootstrap"] == boot
    lo, hi = rep["datasets"]["a"]["ols"]["slope_ci"]
    blo, bhi = boot["slope_ci"]
    assert blo < rep["datasets"]["a"]["ols"]["slope"] < bhi
    assert 0.5 < (bhi - blo) / (hi - lo) < 2  # homoscedastic noise: similar widths
    assert (
        boot["kendall_tau_ci"][0] < rep["datasets"]["a"]["kendall_tau"] < boot["kendall_tau_ci"][1]
    )
    basic = report_of(df, reps=400, seed=3, over="models", interval="basic")
    assert basic["datasets"]["a"]["bootstrap"]["interval_name"] == "basic (reverse percentile)"
    with pytest.raises(ValueError, match="bootstrap over"):
        report_of(df, over="rows")


# ------------------------------------------------------------------------ other analyses


def test_fit_on_the_models_above_a_cut_matches_statsmodels():
    rng = np.random.default_rng(6)
    df = random_table(rng, models=30, datasets=("ref", "a"))
    rep = report_of(df, reps=0, min_reference_accuracy=70)
    wide = df.pivot(index="model", columns="dataset", values="accuracy")
    keep = wide[wide["ref"] >= 70]
    fit = sm.OLS(keep["a"].to_numpy(), sm.add_constant(keep["ref"].to_numpy())).fit()
    sub = rep["datasets"]["a"]["ols_subset"]
    assert sub["n"] == len(keep) and sub["min_reference_accuracy"] == 70
    assert sub["slope"] == pytest.approx(fit.params[1], rel=1e-12)
    assert sub["adj_r2"] == pytest.approx(fit.rsquared_adj, rel=1e-12)
    none = report_of(df, reps=0, min_reference_accuracy=99.5)
    assert "needs 3" in none["not_computed"]["a: ols_subset"]


def test_aggregate_means_ranks_and_rank_changes():
    rng = np.random.default_rng(7)
    df = random_table(rng, models=9)
    df["n"] = df["dataset"].map({"ref": 50_000, "a": 10_000, "b": 2_000, "c": 30_000})
    df["accuracy"] = np.round(df["accuracy"] / 100 * df["n"]) / df["n"] * 100  # counts of n
    rep = report_of(df, reps=0, aggregate=["a", "c"])
    across = rep["across_datasets"]
    assert across["datasets"] == ["a", "c"]
    wide = df.pivot(index="model", columns="dataset", values="accuracy")
    wm = (wide["a"] * 10_000 + wide["c"] * 30_000) / 40_000
    gm = sps.gmean(wide[["a", "c"]].to_numpy(), axis=1)
    models = list(wide.index)
    assert [across["weighted_mean"][m] for m in models] == pytest.approx(list(wm))
    assert [across["geometric_mean"][m] for m in models] == pytest.approx(list(gm))
    ref_rank = dict(zip(models, sps.rankdata(-wide["ref"].to_numpy()), strict=True))
    agg_rank = dict(zip(models, sps.rankdata(-wm.to_numpy()), strict=True))
    for m in models:
        assert across["weighted_mean_rank"][m] == agg_rank[m]
        assert across["weighted_mean_delta_rank"][m] == ref_rank[m] - agg_rank[m]
    with pytest.raises(TableError, match="--aggregate names dataset"):
        report_of(df, aggregate=["a", "zzz"])


def test_geometric_mean_with_a_zero_floor_or_exclusion():
    rng = np.random.default_rng(8)
    df = random_table(rng, models=6)
    df.loc[(df.dataset == "b") & (df.model == "m2"), "accuracy"] = 0.0
    wide = df.pivot(index="model", columns="dataset", values="accuracy")[["ref", "a", "b", "c"]]
    rep = report_of(df, reps=0)
    gm = rep["across_datasets"]["geometric_mean"]
    assert "m2" not in gm and rep["across_datasets"]["geometric_mean_excluded"] == ["m2"]
    assert gm["m0"] == pytest.approx(sps.gmean(wide.loc["m0"]))
    floored = report_of(df, reps=0, floors={"b": 1.0})["across_datasets"]["geometric_mean"]
    assert floored["m2"] == pytest.approx(sps.gmean(wide.loc["m2"].clip(lower=1.0)))
    everywhere = report_of(df, reps=0, floors={"*": 50.0})["across_datasets"]["geometric_mean"]
    assert everywhere["m1"] == pytest.approx(sps.gmean(wide.loc["m1"].clip(lower=50.0)))
    with pytest.raises(TableError, match="--floor names"):
        report_of(df, floors={"q": 1.0})


def test_correlations_averaged_and_with_the_mean_of_the_others():
    rng = np.random.default_rng(9)
    df = random_table(rng, models=15)
    rep = report_of(df, reps=0)
    mc = rep["mean_correlation_with_reference"]
    assert mc["datasets"] == ["a", "b", "c"]
    for key in ("kendall_tau", "spearman_rho", "pearson_r"):
        assert mc[key] == pytest.approx(np.mean([rep["datasets"][d][key] for d in "abc"]))
    rho = np.array([rep["datasets"][d]["spearman_rho"] for d in "abc"])
    assert mc["spearman_rho_fisher"] == pytest.approx(np.tanh(np.arctanh(rho).mean()))
    wide = df.pivot(index="model", columns="dataset", values="accuracy")[["ref", "a", "b", "c"]]
    for d in wide.columns:
        rest = wide.drop(columns=d).mean(axis=1)
        got = rep["across_datasets"]["with_mean_of_others"][d]
        assert got["spearman_rho"] == pytest.approx(sps.spearmanr(wide[d], rest).statistic)
        assert got["kendall_tau"] == pytest.approx(sps.kendalltau(wide[d], rest).statistic)


def test_up_to_error_bars_equals_the_pairwise_definition():
    rng = np.random.default_rng(10)
    m = 300
    lo_a = rng.uniform(0, 90, m)
    hi_a = lo_a + rng.uniform(0, 5, m)
    lo_b = lo_a + rng.normal(0, 5, m)
    hi_b = lo_b + rng.uniform(0, 5, m)

    def order(li, hi_, lj, hj):
        return 1 if li > hj else -1 if lj > hi_ else 0

    conc = disc = ta = tb = tab = 0
    for i, j in itertools.combinations(range(m), 2):
        sa = order(lo_a[i], hi_a[i], lo_a[j], hi_a[j])
        sb = order(lo_b[i], hi_b[i], lo_b[j], hi_b[j])
        ta += sa == 0
        tb += sb == 0
        tab += sa == 0 and sb == 0
        conc += sa * sb > 0
        disc += sa * sb < 0
    got = stats.tau_up_to_error_bars(lo_a, hi_a, lo_b, hi_b)
    assert (got["concordant"], got["discordant"]) == (conc, disc)
    assert (got["tied_in_dataset"], got["tied_in_reference"], got["tied_in_both"]) == (ta, tb, tab)


# --------------------------------------------------------------------------------- output


def test_json_keeps_table_order_and_states_the_delta_rank_sign(tmp_path, capsys):
    rng = np.random.default_rng(11)
    df = random_table(rng, datasets=("zeta", "alpha", "mid"))
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    code, out, _ = cli(["rankings", str(path), "--json", "--bootstrap-reps", "0"], capsys)
    rep = json.loads(out)
    assert code == 0 and list(rep["datasets"]) == ["zeta", "alpha", "mid"]
    assert rep["reference"] == "zeta" and rep["delta_rank_sign"] == DELTA_RANK_SIGN
    help_text = build_parser()._subparsers._group_actions[0].choices["rankings"].format_help()
    assert "positive = the model climbs" in " ".join(help_text.split())


def test_summary_is_compact_for_many_models_and_complete_on_request():
    rng = np.random.default_rng(12)
    df = random_table(rng, models=400, datasets=("r", "a", "b", "c", "d", "e"), missing=0.01)
    rep = typed_report_of(df, "r", reps=0)
    short = summary_text(rep, None).splitlines()
    assert len(short) <= 40
    assert any(line.startswith("a: ") and "missing" in line for line in short)
    full = summary_text(rep, "all").splitlines()
    assert len(full) > 6 * 390
    best = next(line for line in summary_text(rep, "1").splitlines() if line.startswith("  best"))
    assert best.count(";") == 0


def test_ci_command_matches_statsmodels(capsys):
    code, out, _ = cli(["ci", "--accuracy", "75.1", "--n", "2000", "--json"], capsys)
    got = json.loads(out)
    k = round(0.751 * 2000)
    for key, method in (("clopper_pearson", "beta"), ("wilson", "wilson")):
        lo, hi = proportion_confint(k, 2000, 0.05, method=method)
        assert got[key] == pytest.approx([100 * lo, 100 * hi], rel=1e-12)
    code, _, err = cli(["ci", "--accuracy", "0.751", "--n", "0"], capsys)
    assert code == 2 and "n a whole number" in err


# --------------------------------------------------------------------------------- report


def test_report_draws_every_figure_and_table_for_a_plain_table(tmp_path, published_tables, capsys):
    argv = ["rankings", str(published_tables / SSL), "--reference", "imagenet-val", "--dpi", "50"]
    argv += [
        "--bootstrap-over",
        "models",
        "--bootstrap-reps",
        "50",
        "--min-reference-accuracy",
        "70",
    ]
    code, out, _ = cli([*argv, "--report", str(tmp_path / "r")], capsys)
    assert code == 0 and "imagenet-a" in out
    for name in registry.REPORT_FIGURES:
        assert (tmp_path / "r" / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
        with Image.open(tmp_path / "r" / f"{name}.png") as im:
            assert im.size[0] <= 6.75 * 50 + 2  # at most the text width
    ranks = pd.read_csv(tmp_path / "r" / "ranks.csv")
    assert len(ranks) == 12 and ranks["model"].iloc[0] == "DINO"
    assert ranks.set_index("model").loc["OBoW", "imagenet-a delta_rank"] == 6  # 7th -> 1st
    statistics = pd.read_csv(tmp_path / "r" / "statistics.csv")
    assert list(statistics["dataset"]) == [
        "imagenet-real",
        "imagenet-v2",
        "imagenet-r",
        "imagenet-sketch",
        "imagenet-a",
    ]
    assert statistics["models_subset"].notna().all()
    across = pd.read_csv(tmp_path / "r" / "across_datasets.csv")
    assert across["model"].iloc[0] == "MoCo"  # Ozbulak et al.: MoCo leads the weighted mean
    md = (tmp_path / "r" / "ranks.md").read_text().splitlines()
    assert sum(line.startswith("| ") for line in md) == 13


def test_report_handles_missing_models_and_a_lone_reference(tmp_path):
    rng = np.random.default_rng(13)
    df = random_table(rng, models=70, missing=0.2)
    files = report.write_report(typed_report_of(df, reps=0), tmp_path / "a", small_style())
    assert len(files) == 2 * (len(registry.REPORT_FIGURES) + len(registry.REPORT_TABLES))
    lone = df[df.dataset == "ref"]
    files = report.write_report(typed_report_of(lone, reps=0), tmp_path / "b", small_style())
    assert all((tmp_path / "b" / f).exists() for f in map(str, files))


def test_one_registry_of_names(repo_root):
    from imagenot.core.config import load_schema
    from imagenot.core.registries import resolve
    from imagenot.figures import plan

    props = load_schema("analyse.schema.yaml")["properties"]
    assert props["figures"]["items"]["enum"] == list(registry.WORKFLOW_FIGURES)
    assert props["tables"]["items"]["enum"] == list(registry.WORKFLOW_TABLES)
    assert list(plan.WORKFLOW_TABLES) == list(registry.WORKFLOW_TABLES)
    assert all(callable(tables.builder(name)) for name in registry.WORKFLOW_TABLES)
    assert tables.builder("fits") is tables.fits  # the registry's entry, resolved
    # report figures and tables register as every figure does: "module:function", resolved
    for code in [*registry.REPORT_FIGURES.values(), *registry.REPORT_TABLES.values()]:
        function = resolve(code)
        assert callable(function) and function.__doc__.strip(), code
    boot = props["bootstrap"]["properties"]
    assert tuple(boot["over"]["enum"]) == BOOTSTRAP_OVER
    assert tuple(boot["interval"]["enum"]) == stats.INTERVALS


# ------------------------------------------------------------ figures a paper can print


@pytest.fixture(scope="module")
def real_like():
    """Reports of a timm-like table (1,556 models with 40-60 character names on four test
    sets, as timm's published ImageNet-A/-R results) and of its first five models, linear and
    probit; two models highlighted (one near the bottom)."""
    from imagenot.analyse import synthetic

    big = synthetic.results_table(1556, seed=1)
    five = big[big.model.isin(big.model.unique()[:5])]
    out = {}
    for name, df in (("1556", big), ("5", five)):
        for axis in ("linear", "probit"):
            settings = RankingsSettings.hand_typed(reps=0, axis=axis)
            out[name, axis] = rankings_report(validate_table(df), settings)
    models = out["1556", "linear"].models
    out["highlight"] = [models[-1], models[7]]
    return out


def test_the_layout_check_finds_a_planted_overlap_and_clipped_text():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from imagenot.figures.layout import layout_problems

    fig, ax = plt.subplots(figsize=(3, 2), layout="constrained")
    ax.set_title("clean")
    ax.text(0.1, 0.5, "alone", transform=ax.transAxes)
    assert layout_problems(fig) == []
    ax.text(0.12, 0.52, "planted", transform=ax.transAxes)  # on top of "alone"
    fig.text(0.8, 0.2, "a text that runs off the right edge")  # the layout leaves it there
    problems = layout_problems(fig)
    assert "'planted' overlaps 'alone'" in problems or "'alone' overlaps 'planted'" in problems
    assert any("leaves the figure at the right" in p for p in problems), problems
    plt.close(fig)


@pytest.mark.parametrize("size", ["5", "1556"])
@pytest.mark.parametrize("kind", list(registry.REPORT_FIGURES))
def test_every_report_figure_is_readable_from_5_to_1556_models(real_like, size, kind):
    """No label overlaps another, none leaves the figure (the renderer's text
    boxes, :func:`imagenot.figures.layout.layout_problems`), with real-length model names
    and two highlighted models."""
    import matplotlib.pyplot as plt

    from imagenot.core.figure_style import PAGE_RATIO
    from imagenot.core.registries import resolve
    from imagenot.figures.layout import layout_problems

    style = small_style(highlight=real_like["highlight"])
    for axis in ("linear", "probit") if kind == "accuracy_vs_reference" else ("linear",):
        with warnings.catch_warnings():  # "constrained_layout not applied" and its kin
            warnings.simplefilter("error", UserWarning)
            fig = resolve(registry.REPORT_FIGURES[kind])(real_like[size, axis], style)
            assert layout_problems(fig) == [], (kind, size, axis)
        width, height = fig.get_size_inches()
        assert width <= 6.75 + 0.01 and height <= width * PAGE_RATIO + 0.01  # a page
        plt.close(fig)


def test_a_crowded_figure_fails_the_layout_check(real_like, monkeypatch):
    """The check catches what it is for: rows of the rankings figure squeezed to a fifth of
    their height overlap their labels."""
    import matplotlib.pyplot as plt

    from imagenot.figures import rankings
    from imagenot.figures.layout import layout_problems

    monkeypatch.setattr(rankings, "ROW_IN", 0.04)
    fig = report.rankings_figure(real_like["1556", "linear"], small_style(top=30))
    problems = layout_problems(fig)
    assert any("overlaps" in p for p in problems), problems
    plt.close(fig)


def drawn(fig) -> list[str]:
    from imagenot.figures.layout import drawn_texts

    return [t.get_text() for t, _ in drawn_texts(fig)]


def test_figures_write_symbols_as_text_not_math_markup(real_like):
    """Math text is off (names from users' tables are never parsed): R², τ and ρ are written
    as characters, never as a literal ``$R^2$``."""
    import matplotlib.pyplot as plt

    rep = real_like["5", "linear"]
    texts = []
    for draw in (report.accuracy_vs_reference, report.rank_changes, report.error_correlations):
        fig = draw(rep, small_style())
        texts += drawn(fig)
        plt.close(fig)
    assert not [t for t in texts if "$" in t or "^" in t]
    assert any("adj. R² " in t for t in texts)
    assert any("Kendall τ-b" in t for t in texts)
    assert any("Spearman ρ" in t for t in texts)


def test_probit_axes_put_accuracies_at_their_probit_positions(real_like):
    """``--axis probit`` draws on probit axes (Taori et al., Miller et al.): a tick labelled
    with an accuracy sits at norm.ppf of it, and the fitted line is straight on the page."""
    import matplotlib.pyplot as plt

    fig = report.accuracy_vs_reference(real_like["1556", "probit"], small_style())
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "function"
    ticks = [float(t) for t in ax.get_xticks()]
    assert 50.0 in ticks and len(ticks) >= 4
    to_page = ax.xaxis.get_transform()
    for t in ticks:
        assert to_page.transform([t])[0] == pytest.approx(sps.norm.ppf(t / 100), abs=1e-9)
    line = ax.lines[0]
    xy = ax.transData.transform(np.column_stack(line.get_data()))
    slopes = np.diff(xy[:, 1]) / np.diff(xy[:, 0])
    assert np.ptp(slopes) < 1e-6 * max(1.0, abs(slopes.mean()))
    assert any("probit axes" in " ".join(t.split()) for t in drawn(fig))  # titles wrap
    plt.close(fig)


def test_rank_changes_of_many_models_name_the_largest_over_a_faint_background(real_like):
    import matplotlib.pyplot as plt

    rep = real_like["1556", "linear"]
    hot = real_like["highlight"]
    fig = report.rank_changes(rep, small_style(highlight=hot))
    ax = fig.axes[0]
    background, named = ax.collections[0], ax.collections[1]
    assert len(background.get_segments()) == 1556 and background.get_alpha() <= 0.05
    assert len(named.get_segments()) <= rank_changes.LINE_LABELS + len(hot)
    names = [t.get_text() for t in ax.texts]
    assert 1 <= len(names) <= rank_changes.LINE_LABELS + len(hot)
    assert any(t.startswith(hot[0][:10]) for t in names)  # highlighted: named, wherever
    delta = rep.datasets[ax.get_title().split(",")[0]].delta_rank
    largest = max(delta, key=lambda m: abs(delta[m]))
    assert any(t.startswith(largest[:10]) and t.endswith(f"({delta[largest]:+g})") for t in names)
    plt.close(fig)


def test_rankings_figure_draws_the_best_k_then_the_highlighted(real_like):
    import matplotlib.pyplot as plt

    rep = real_like["1556", "linear"]
    hot = real_like["highlight"][0]
    fig = report.rankings_figure(rep, small_style(top=10, highlight=[hot]))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    entry = rep.datasets[rep.reference]
    assert len(labels) == 11 and "best 10 of 1556" in ax.get_title(loc="right")
    # the name is whole, or shortened in the middle to fit a panel of the page's grid
    head, _, tail = labels[-1].partition("…")
    assert head.startswith(f"{entry.ranks[hot]:g}. {hot[:5]}") and hot.endswith(tail)
    assert ax.get_yticklabels()[-1].get_fontweight() == "bold"
    plt.close(fig)


def test_summary_prints_a_bound_for_underflowed_p_values_and_counts_in_words(real_like):
    rep = real_like["1556", "linear"]
    text = summary_text(rep, None)
    assert "p < 1e-300" in text and "p=0 " not in text and "p=0;" not in text
    assert "mean over 3 datasets" in text
    two = rankings_report(
        validate_table(random_table(np.random.default_rng(3), datasets=("ref", "a"))),
        RankingsSettings.hand_typed(reps=0, reference="ref"),
    )
    assert "mean over 1 dataset:" in summary_text(two, None)
    md = tables.to_markdown(tables.report_statistics(rep))
    assert "< 1e-300" in md
    assert rep.datasets["imagenet-v2"].correlations.kendall_p == 0.0  # the JSON keeps scipy's


# ------------------------------------------------------------------------- names as text

LOOKS_LIKE_A_VALUE = ["1e3", "NA", "None", "nan", "007", "N/A", "null", "-1.5"]
"""Model and dataset names that pandas would read as numbers or as missing values."""


def test_names_that_look_like_numbers_or_missing_values_stay_text(tmp_path):
    rows = [
        {"model": m, "dataset": d, "accuracy": 40 + 5 * i + 2 * j, "n": 100}
        for i, m in enumerate(LOOKS_LIKE_A_VALUE)
        for j, d in enumerate(("007", "NA"))
    ]
    long = tmp_path / "long.csv"
    pd.DataFrame(rows).to_csv(long, index=False)
    got = validate_table(read_table(long))
    assert list(dict.fromkeys(got["model"])) == LOOKS_LIKE_A_VALUE
    assert list(dict.fromkeys(got["dataset"])) == ["007", "NA"]
    rep = report_of(got, reference="007", reps=0)
    assert list(rep["datasets"]["NA"]["accuracy"]) == LOOKS_LIKE_A_VALUE
    # a wide table: its model column (here the first) and its headers are names; in its
    # accuracy cells NA is still a missing result
    wide = tmp_path / "wide.csv"
    wide.write_text("net,007,1e3\nNA,70,60\n1e3,65,NA\nnan,61,55\n")
    got = validate_table(read_table(wide, "wide"))
    assert list(dict.fromkeys(got["model"])) == ["NA", "1e3", "nan"]
    assert sorted(got.loc[got.dataset == "1e3", "model"]) == ["NA", "nan"]
    wide.write_text(",007\n007,70\nNone,60\n")  # as pandas writes an index: no header cell
    assert list(read_table(wide, "wide")["model"]) == ["007", "None"]
    # per-image keys are text too: 007 and 7 are two images
    per = tmp_path / "per_image.csv"
    per.write_text("model,dataset,key,correct\nNA,007,007,1\nNA,007,7,0\n")
    assert list(read_table(per)["key"]) == ["007", "7"]
    # an empty name is still missing, not the text "nan"
    pd.DataFrame([{"model": "", "dataset": "d", "accuracy": 50}]).to_csv(long, index=False)
    with pytest.raises(TableError, match=r"line 2 .*: empty model"):
        validate_table(read_table(long))


def test_report_tables_keep_dataset_names_as_written(tmp_path):
    rng = np.random.default_rng(40)
    names = ("ref", "ImageNet/V2-matched", "a|b *c*", "cifar10/ft-imagenet")
    df = random_table(rng, models=5, datasets=names)
    md = tables.to_markdown(tables.report_ranks(typed_report_of(df, reps=0)))
    head = md.splitlines()[0]
    for shown in ("ImageNet/V2-matched accuracy", "a\\|b \\*c\\* rank", "cifar10/ft-imagenet rank"):
        assert shown in head, head
    # the workflow's own dataset/protocol labels read as words in its tables
    workflow = tables.to_markdown(pd.DataFrame({"cifar10/ft-imagenet": [1]}), workflow_labels=True)
    assert "| cifar10 FT (imagenet) |" in workflow


ALIKE = {
    "NFC and NFD": ("caf\u00e9", "cafe\u0301", "two Unicode forms (NFC and NFD"),
    "a Cyrillic homoglyph": ("resnet50", "r\u0435snet50", "U+0435 CYRILLIC SMALL LETTER IE"),
    "a zero-width space": ("vit_b", "vit\u200b_b", "invisible character U+200B ZERO WIDTH SPACE"),
    "a typographic hyphen": ("resnet-50", "resnet\u201050", "U+2010 HYPHEN in the other"),
}


@pytest.mark.parametrize("case", list(ALIKE))
def test_names_that_print_alike_but_differ_are_refused(tmp_path, case):
    first, second, why = ALIKE[case]
    rows = [{"model": m, "dataset": "ref", "accuracy": 60} for m in ("x", first, "y")]
    rows.append({"model": second, "dataset": "ref", "accuracy": 50})
    path = tmp_path / "t.csv"
    path.write_text(pd.DataFrame(rows).to_csv(index=False).replace("y,", "\ny,"))  # + a blank
    with pytest.raises(TableError) as refused:
        validate_table(read_table(path))
    assert f"model names {first!r} (line 3) and {second!r} (line 6) print alike" in str(
        refused.value
    )
    assert why in str(refused.value)
    wide = tmp_path / "wide.csv"
    wide.write_text(f"model,{first},{second}\nm,70,60\n", encoding="utf-8")
    with pytest.raises(
        TableError, match=r"columns .* \(column 2\) and .* \(column 3\) print alike"
    ):
        read_table(wide, "wide")


def test_names_of_several_scripts_that_print_differently_are_taken(published_tables):
    names = ["β-VAE", "b-VAE", "ViT-B/16", "vit-b/16", "Модель", "模型", "resnet50", "resnet 50"]
    rows = [{"model": m, "dataset": "ref", "accuracy": 40 + i} for i, m in enumerate(names)]
    assert list(validate_table(pd.DataFrame(rows))["model"]) == names
    for table in (SSL, NEW):  # the shipped tables as written
        read_table(published_tables / table)
    assert len(validate_table(read_table(published_tables / SSL)))


def test_an_empty_dataset_column_of_a_wide_table_is_refused_not_dropped(tmp_path):
    path = tmp_path / "wide.csv"
    path.write_text("model,ref,imagenet-a,sketch\nm1,70,,60\nm2,60,NA,50\nm3,50,,\n")
    with pytest.raises(
        TableError, match=r"dataset column\(s\) 'imagenet-a' of the wide table hold no"
    ):
        read_table(path, "wide")
    path.write_text("model,ref,imagenet-a,sketch\nm1,70,40,60\nm2,60,NA,50\nm3,50,,\n")
    got = read_table(path, "wide")  # a model without a result on a dataset is only missing there
    assert sorted(got.loc[got.dataset == "imagenet-a", "model"]) == ["m1"]
    assert sorted(got.loc[got.dataset == "sketch", "model"]) == ["m1", "m2"]


def test_no_slope_is_fitted_where_the_reference_does_not_vary():
    rows = [{"model": m, "dataset": "ref", "accuracy": 70.0} for m in "abcd"]
    rows += [
        {"model": m, "dataset": "x", "accuracy": a}
        for m, a in zip("abcd", (60, 50, 40, 45), strict=True)
    ]
    rep = typed_report_of(pd.DataFrame(rows), min_reference_accuracy=60, reps=0)
    x = rep.datasets["x"]
    assert x.ols is None and x.ols_subset is None
    assert rep.not_computed["x: ols"] == (
        "the reference accuracies of the 4 models are all 70%: no variance to fit a slope on"
    )
    assert "no variance" in rep.not_computed["x: ols_subset"]
    assert "no OLS fit" in summary_text(rep, None)
    with pytest.raises(ValueError, match="no variance to fit a slope"):
        stats.ols_fit(np.full(4, 70.0), np.array([60.0, 50, 40, 45]), "linear", 0.95)
    # the report's figure draws no line there: its panel title carries no slope
    rows += [
        {"model": m, "dataset": "y", "accuracy": a}
        for m, a in zip("abcd", (61, 52, 43, 44), strict=True)
    ]
    flat = typed_report_of(pd.DataFrame(rows), reps=0)
    fig = report.accuracy_vs_reference(flat, small_style())
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles and not any("slope" in t for t in titles), titles
    import matplotlib.pyplot as plt

    plt.close(fig)
    varied = typed_report_of(random_table(np.random.default_rng(4), models=5), reps=0)
    fig = report.accuracy_vs_reference(varied, small_style())
    assert all("slope" in ax.get_title() for ax in fig.axes if ax.get_title())
    plt.close(fig)
    # two distinct reference accuracies are a spread to fit on
    assert stats.fit_problem(np.array([70.0, 70.0, 71.0]), "probit") is None
    assert typed_report_of(random_table(np.random.default_rng(4)), reps=0).datasets["a"].ols


def test_refusals_name_the_files_real_lines_and_separators(tmp_path, capsys):
    blank = tmp_path / "blank.csv"
    blank.write_text('model,dataset,accuracy,note\n\nm1,ref,70,\n\n\nm2,ref,60,"a\nb"\nm3,ref,x,\n')
    with pytest.raises(TableError, match=r"^line 8 \(model='m3', dataset='ref'\): accuracy 'x'"):
        validate_table(read_table(blank))
    assert list(read_table(blank)["_line"]) == [3, 6, 8]  # a quoted cell's row: its first line
    tsv = tmp_path / "table.tsv"
    tsv.write_text("model,dataset,accuracy\nm1,ref,70\n")
    err = one_line_refusal(["rankings", str(tsv)], capsys)
    assert "header cell 'model,dataset,accuracy' is read as one column name (a .tsv file" in err
    assert "lacks" not in err
    spaces = tmp_path / "spaces.csv"
    spaces.write_text("model dataset accuracy\nm1 ref 70\n")
    err = one_line_refusal(["rankings", str(spaces)], capsys)
    assert "read as one column name (no comma, semicolon or tab separates its names)" in err
    extra = tmp_path / "extra.csv"
    extra.write_text("model\tdataset\taccuracy\n\nm1\tref\t70\nm2\tref\t60\t3\n")
    err = one_line_refusal(["rankings", str(extra)], capsys)
    assert f"{extra}: line 4 has 4 cells where the header names 3" in err
    trailing = tmp_path / "trailing.csv"  # a separator after the last cell of every row
    trailing.write_text("model\tdataset\taccuracy\nm1\tref\t70\t\nm2\tref\t60\t\n")
    assert list(read_table(trailing)["model"]) == ["m1", "m2"]


def test_an_option_naming_a_look_alike_of_a_name_in_the_table_says_so():
    df = random_table(np.random.default_rng(5), models=4, datasets=("cafe\u0301", "x"))
    said = "'caf\u00e9' is not in the table ('cafe\u0301' of the table prints alike"
    with pytest.raises(TableError, match=re.escape(said)):
        typed_report_of(df, reference="caf\u00e9", reps=0)
    with pytest.raises(TableError, match=r"baseline model 'm\u04381' is not in the table;"):
        typed_report_of(df, reference="x", baseline_model="m\u04381", reps=0)  # no look-alike
    assert typed_report_of(df, reference="cafe\u0301", reps=0).reference == "cafe\u0301"
