"""Published tables as their authors wrote them, through the toolbox's reader and checks: the
neighbouring papers' tables and timm's results CSVs of resources/published/ read as shipped,
the same tables in the dialects spreadsheets export (header case, byte-order mark, semicolons
with decimal commas, tabs), accuracies printed the way timm's results CSVs print them, and a
planted case of each refusal, one line naming the file and its line."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from imagenot.analyse.checks import PRINTED_SLACK, validate_table
from imagenot.analyse.table import TableError, read_table
from imagenot.cli import main
from imagenot.core.counts import count_problem

SSL = "ssl_resnet50_imagenet_variants.csv"
NEW = "new_test_sets_excerpt.csv"
TIMM = "timm_results"
"""timm's results CSVs (resources/README.md), one per test set: 32 models, rows as published."""
RECHT_SIZES = {
    "imagenet-original": 50_000,
    "imagenet-new": 10_000,
    "cifar10-original": 10_000,
    "cifar10-new": 2_000,
}
"""Test-set sizes of Recht et al.'s Table 1 (resources/README.md), as ``--n`` gives them."""
RECHT_N = ["--n", *(f"{d}={n}" for d, n in RECHT_SIZES.items())]

TIMM_SIZES = {
    "imagenet": 50_000,
    "imagenet-real": 46_837,
    "imagenetv2-matched-frequency": 10_000,
    "sketch": 50_889,
    "imagenet-r": 30_000,
    "imagenet-a": 7_500,
}
"""The images each of timm's results CSVs (huggingface/pytorch-image-models, results/) counts:
ImageNet's validation set (50,000); the 46,837 of its images that have ReaL labels (timm's
``timm/data/real_labels.py``, ``RealLabelsImagenet``, counts only images whose label list is
non-empty: 3,163 of the 50,000 have none); ImageNetV2 MatchedFrequency (10,000, results/README.md);
ImageNet-Sketch's 50,889 images (the README rounds them to 50,000: 50,000 would make 62.062 no
share at 3 decimals nor within the slack); ImageNet-R's 30,000 and ImageNet-A's 7,500 (both from
results/README.md)."""
TIMM_N = ["--n", *(f"{d}={n}" for d, n in TIMM_SIZES.items())]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def refusal(argv: list[str], capsys) -> str:
    """The one line of a refused command (exit 2)."""
    code, _, err = run(argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    return err.strip()


def recht(path) -> pd.DataFrame:
    """Recht et al.'s Table 1 as published (paired wide columns, a ``benchmark`` group column)
    through the toolbox's reader, with the test-set sizes the user gives."""
    return read_table(path, "wide", RECHT_SIZES)


# ------------------------------------------------------------------ the tables as shipped


def test_the_ssl_lottery_table_is_read_as_published(published_tables, capsys):
    """Ozbulak et al.'s Tables I and II (72 rows with n) pass the count check, every row."""
    path = published_tables / SSL
    df = validate_table(read_table(path))
    assert len(df) == 72 and df["n"].notna().all()
    code, out, err = run(
        ["rankings", str(path), "--reference", "imagenet-val", "--bootstrap-reps", "0", "--json"],
        capsys,
    )
    assert code == 0, err
    rep = json.loads(out)
    assert rep["across_datasets"]["weighted_mean"]  # the size-weighted mean needs n


def test_recht_tables_pass_the_count_and_interval_checks(published_tables, capsys):
    """Recht et al.'s accuracies (one decimal) are shares of their test sets, and each lies in
    its printed 95% interval: the wide table read as published, through the reader and the
    command."""
    path = published_tables / NEW
    df = validate_table(recht(path))
    assert len(df) == 30 and set(df["n"]) == {50_000, 10_000, 2_000}
    assert list(df["dataset"].unique()) == list(RECHT_SIZES)
    ex = pd.read_csv(path).set_index(["benchmark", "model"])
    for row in df.itertuples():
        benchmark, which = row.dataset.split("-")
        printed = ex.loc[(benchmark, row.model)]
        got = (row.accuracy, row.ci_low, row.ci_high)
        assert got == tuple(printed[f"{which}_{f}"] for f in ("accuracy", "ci_low", "ci_high"))
    argv = ["rankings", str(path), "--format", "wide", *RECHT_N, "--bootstrap-reps", "0"]
    code, out, err = run([*argv, "--reference", "cifar10-original", "--json"], capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert rep["datasets"]["cifar10-new"]["n"] == 2_000
    assert len(rep["datasets"]["cifar10-new"]["delta_rank"]) == 7


def test_timms_results_csvs_are_read_as_published(published_tables, capsys):
    """timm's six results CSVs as published, one file per test set: the dataset is the file's
    name (``results-<dataset>.csv``), the accuracy its ``top1`` column, the test-set sizes
    ``--n``; a model at two image sizes is two models (``--key img_size``). Every row passes the
    count check (rows printed with 3 decimals after a second rounding among them), and each
    accuracy is the published ``top1``."""
    files = sorted((published_tables / TIMM).glob("results-*.csv"))
    assert len(files) == 6
    argv = ["rankings", *map(str, files), "--accuracy-column", "top1", "--key", "img_size"]
    argv += [*TIMM_N, "--reference", "imagenet", "--bootstrap-reps", "0", "--json"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    rep = json.loads(out)
    assert set(rep["datasets"]) == set(TIMM_SIZES) and len(rep["models"]) == 32
    for path in files:
        dataset = path.stem.removeprefix("results-")
        entry = rep["datasets"][dataset]
        assert entry["n"] == TIMM_SIZES[dataset] and entry["missing_models"] == []
        published = pd.read_csv(path)
        keys = published.model + "@" + published.img_size.astype(str)
        want = dict(zip(keys, published.top1, strict=True))
        assert entry["accuracy"] == pytest.approx(want, abs=1e-12)
    # 62.062% of ImageNet-Sketch's 50,889 images is among them, taken
    sketch = rep["datasets"]["sketch"]["accuracy"]
    assert sketch["vit_large_patch14_clip_224.laion2b_ft_in12k_in1k@224"] == 62.062
    # NAME=FILE names a test set as the user wants it
    named = [f"v2={published_tables / TIMM / 'results-imagenetv2-matched-frequency.csv'}"]
    named += [str(published_tables / TIMM / "results-imagenet.csv")]
    argv = ["rankings", *named, "--accuracy-column", "TOP1", "--key", "img_size", "--n"]
    argv += ["v2=10000", "imagenet=50000", "--bootstrap-reps", "0", "--json"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert json.loads(out)["dataset_order"] == ["v2", "imagenet"]


def test_a_count_no_printed_timm_accuracy_gives_names_its_file_and_line(
    published_tables, tmp_path, capsys
):
    """One of timm's rows with its top1 moved 6 units of the third decimal off every share of
    ImageNet-A's 7,500 images: refused naming the file among several and the line."""
    files = {p.name: p.read_text() for p in (published_tables / TIMM).glob("results-*.csv")}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    lines = files["results-imagenet-a.csv"].splitlines(keepends=True)
    cells = lines[5].split(",")
    cells[2] = f"{float(cells[2]) + 0.006:.3f}"
    planted = tmp_path / "results-imagenet-a.csv"
    planted.write_text("".join([*lines[:5], ",".join(cells), *lines[6:]]))
    argv = ["rankings", *sorted(map(str, tmp_path.glob("*.csv"))), "--accuracy-column", "top1"]
    err = refusal([*argv, "--key", "img_size", *TIMM_N, "--bootstrap-reps", "0"], capsys)
    assert f"{planted} line 6 (model='{cells[0]}', dataset='imagenet-a'): accuracy " in err, err
    assert "cannot be a share of n=7500 test images" in err, err


SEVERAL_MALFORMED = {
    "a dataset in two tables": (
        ["results-a.csv", "results-a.csv"],
        "dataset 'a' is in {0} and in {0}: one test set per table",
    ),
    "NAME= for a table with a dataset column": (
        ["x={1}"],
        "{1}: x={1} names the test set of a long table without a dataset column, but it has a "
        "dataset column",
    ),
    "a NAME= without a name": (["={0}"], "'={0}': expected a table FILE or NAME=FILE"),
    "an accuracy column not in the table": (
        ["results-a.csv", "--accuracy-column", "top5"],
        "{0} (--accuracy-column top5) lacks column(s) top5; columns present: model, top1",
    ),
}


@pytest.mark.parametrize("case", list(SEVERAL_MALFORMED))
def test_several_tables_that_cannot_be_one_are_refused_in_one_line(tmp_path, capsys, case):
    one = tmp_path / "results-a.csv"
    one.write_text("model,top1\nm0,70\nm1,60\nm2,50\n")
    long = tmp_path / "long.csv"
    long.write_text("model,dataset,top1\nm0,b,70\n")
    words, says = SEVERAL_MALFORMED[case]
    argv = [w.replace("results-a.csv", str(one)).format(one, long) for w in words]
    if "--accuracy-column" not in argv:
        argv += ["--accuracy-column", "top1"]
    err = refusal(["rankings", *argv, "--bootstrap-reps", "0"], capsys)
    assert says.format(one, long) in err, err


# ------------------------------------------------------------------------- the dialects


def dialects(df: pd.DataFrame, tmp_path) -> dict[str, object]:
    """``df`` written as spreadsheets and repositories export it, each to its own file."""
    out = {}
    capital = df.rename(columns=str.capitalize)
    path = tmp_path / "capitalised_bom.csv"
    capital.to_csv(path, index=False, encoding="utf-8-sig")
    out["Model,Dataset,Accuracy header with a byte-order mark"] = path
    path = tmp_path / "european.csv"
    df.to_csv(path, index=False, sep=";", decimal=",")
    out["semicolons and decimal commas"] = path
    path = tmp_path / "points.csv"
    df.to_csv(path, index=False, sep=";")
    out["semicolons and decimal points"] = path
    path = tmp_path / "table.tsv"
    df.to_csv(path, index=False, sep="\t")
    out["TSV"] = path
    path = tmp_path / "tabs.csv"
    capital.to_csv(path, index=False, sep="\t", decimal=",", encoding="utf-8-sig")
    out["tabs and decimal commas in a .csv file, capitalised, with a byte-order mark"] = path
    return out


def test_every_dialect_of_the_published_tables_reads_the_same(published_tables, tmp_path):
    for name, original in (("ssl", read_table(published_tables / SSL)),):
        want = validate_table(original)
        table = original.drop(columns="_line")
        for dialect, path in dialects(table, tmp_path).items():
            got = validate_table(read_table(path))
            pd.testing.assert_frame_equal(got, want, obj=f"{name} as {dialect}")
    recht_table = recht(published_tables / NEW).drop(columns="_line")
    want = validate_table(recht_table)
    for dialect, path in dialects(recht_table, tmp_path).items():
        pd.testing.assert_frame_equal(validate_table(read_table(path)), want, obj=dialect)


def test_a_european_table_runs_through_the_command(published_tables, tmp_path, capsys):
    table = read_table(published_tables / SSL).drop(columns="_line")
    path = tmp_path / "ssl.csv"
    table.rename(columns=str.upper).to_csv(path, index=False, sep=";", decimal=",")
    argv = ["rankings", str(path), "--reference", "imagenet-val", "--bootstrap-reps", "0"]
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["datasets"]["imagenet-a"]["accuracy"]["DINO"] == pytest.approx(
        float(table.query("model == 'DINO' and dataset == 'imagenet-a'")["accuracy"].iloc[0])
    )


MALFORMED = {
    "a row with a cell too many (semicolons)": (
        b"model;dataset;accuracy\na;x;76,1\nb;x;70;3\nc;x;60\n",
        "line 3 has 4 cells where the header names 3 (first extra cell: '3')",
    ),
    "a decimal comma in a comma-separated file": (
        b'model,dataset,accuracy\na,x,"76,1"\nb,x,70\nc,x,60\n',
        "line 2 (model='a', dataset='x'): accuracy '76,1' is not a number (a decimal comma in a "
        "comma-separated file",
    ),
    "a column given twice in two cases": (
        b"Model,model,dataset,accuracy\na,a,x,70\n",
        "column(s) 'model' given twice (names are matched whatever their case)",
    ),
    "text that is not UTF-8 (Latin-1)": (
        b"model,dataset,accuracy\nb\xe9,x,70\n",
        "byte 24 is not UTF-8 text (invalid continuation byte); save the table as UTF-8",
    ),
    "a wrong cell after blank lines": (
        b"model,dataset,accuracy\n\na,x,70\n\n\nb,x,7O\n",
        "line 6 (model='b', dataset='x'): accuracy '7O' is not a number",
    ),
    "a tab inside a header cell of a comma-separated file": (
        b"model,dataset,accuracy\ta\nb,x,70\n",
        "the header cell 'accuracy\\ta' is read as one column name (its lines are comma-separated)",
    ),
    "a paired wide table read as a long one": (
        b"model,new_accuracy\na,70\n",
        "no accuracy column but 'new_accuracy': a wide table of paired columns, read with "
        "--format wide",
    ),
    "an n with thousands dots in a table with decimal commas": (
        b"model;dataset;accuracy;n\na;x;76,1;10000\nb;x;70,2;10.000\nc;x;60;10000\n",
        "line 3: n '10.000' is written with thousands dots in a table with decimal commas, "
        "where a number reader takes the dot for a decimal point: write the count without "
        "separators (10000)",
    ),
    "a TSV file whose header lacks the accuracy": (
        b"Model\tDataset\tTop1\na\tx\t70\n",
        "results table lacks column(s) accuracy; columns present: model, dataset, Top1",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_table_is_one_line_naming_file_and_row(tmp_path, capsys, case):
    data, says = MALFORMED[case]
    path = tmp_path / "table.csv"
    path.write_bytes(data)
    err = refusal(["rankings", str(path), "--bootstrap-reps", "0"], capsys)
    assert err.startswith(f"imagenot rankings: {path}: "), err
    assert says in err, err


WIDE_MALFORMED = {
    "an interval column without its accuracy column": (
        b"model,orig_accuracy,new_ci_low\na,70,60\n",
        "column 'new_ci_low' (column 3) of the wide table has no 'new_accuracy' beside it",
    ),
    "one field given twice in two cases": (
        b"model,new_accuracy,new_ACCURACY\na,70,71\n",
        "columns 'new_accuracy' (column 2) and 'new_ACCURACY' (column 3) both give the accuracy "
        "of dataset 'new'",
    ),
    "two columns that are neither datasets nor ids": (
        b"benchmark,model,source,new_accuracy\nimagenet,a,paper,70\n",
        "columns 'benchmark' (column 1), 'source' (column 3) of the wide table are neither model",
    ),
    "a plain dataset column beside paired ones": (
        b"model,imagenet,new_accuracy\na,76.1,70\nb,70.2,64\n",
        "column 'imagenet' (column 2) of the wide table holds numbers, not the names of groups",
    ),
    "a group column with an empty cell": (
        b"benchmark,model,new_accuracy\nimagenet,a,70\n\n,b,60\n",
        "line 4: the group column 'benchmark' (column 1) is empty",
    ),
    "an empty accuracy column": (
        b"model,orig_accuracy,new_accuracy\na,70,\nb,60,NA\n",
        "dataset column(s) 'new_accuracy' of the wide table hold no accuracy",
    ),
}


@pytest.mark.parametrize("case", list(WIDE_MALFORMED))
def test_a_malformed_wide_header_is_one_line_naming_file_and_column(tmp_path, capsys, case):
    data, says = WIDE_MALFORMED[case]
    path = tmp_path / "wide.csv"
    path.write_bytes(data)
    err = refusal(["rankings", str(path), "--format", "wide", "--bootstrap-reps", "0"], capsys)
    assert err.startswith(f"imagenot rankings: {path}"), err
    assert says in err, err


def test_counts_of_a_table_with_decimal_commas_are_taken_without_separators(tmp_path):
    """A European spreadsheet's table: decimal commas, counts without thousands dots (and a
    count with a decimal comma) read as ten thousand; a paired wide table's ``<dataset>_n``
    written ``10.000`` is refused as the long table's ``n`` is."""
    path = tmp_path / "european.csv"
    path.write_text("model;dataset;accuracy;n\na;x;76,1;10000\nb;x;70,25;10000,0\n")
    assert list(validate_table(read_table(path))["n"]) == [10_000, 10_000]
    wide = tmp_path / "wide.csv"
    wide.write_text("model;v2_accuracy;v2_n\na;76,1;10000\nb;70,2;10.000\n")
    with pytest.raises(TableError, match=r"line 3: v2_n '10\.000' is written with thousands"):
        read_table(wide, "wide")


def test_a_paired_wide_table_without_groups_takes_its_own_n(tmp_path):
    """``<dataset>_accuracy`` and ``<dataset>_n`` columns, no group column: the datasets are
    the prefixes, each row's n its own; a dataset column of names alone (one per dataset) is
    read as before, beside it."""
    path = tmp_path / "paired.csv"
    path.write_text("Model,val_Accuracy,val_N,v2_accuracy\na,76.1,1000,70.0\nb,70.2,1000,\n")
    df = validate_table(read_table(path, "wide", {"v2": 1000}))
    assert list(df["dataset"]) == ["val", "val", "v2"] and list(df["model"]) == ["a", "b", "a"]
    assert set(df["n"]) == {1000}
    plain = tmp_path / "plain.csv"
    plain.write_text("model,val,v2\na,76.1,70.0\n")
    assert list(read_table(plain, "wide")["dataset"]) == ["val", "v2"]


# ------------------------------------------------------------------ printed accuracies


def timm_printed(correct: np.ndarray, n: int) -> list[str]:
    """Top-1 accuracies as timm's results CSVs print them: validate.py rounds the percentage to
    4 decimals, generate_csv_results.py writes it with 3 (a second rounding)."""
    return [f"{round(k / n * 100, 4):.3f}" for k in correct]


def test_accuracies_printed_as_timm_prints_them_are_taken(tmp_path, capsys):
    """Every count of every test-set size of timm's tables, printed as timm prints it, is
    taken: 62.062 of ImageNet-Sketch's 50,889 images (31,583 of them is 62.06253%, which prints
    as 62.062) and the others rounded twice lie up to 0.55 units of the last digit from their
    share, beyond rounding to the nearest (0.5)."""
    rng = np.random.default_rng(0)
    rows = []
    beyond_half = 0
    for dataset, n in TIMM_SIZES.items():
        correct = rng.integers(int(0.05 * n), int(0.95 * n), 400)
        for i, (k, text) in enumerate(zip(correct, timm_printed(correct, n), strict=True)):
            rows.append({"model": f"m{i}", "dataset": dataset, "accuracy": text, "n": n})
            beyond_half += abs(float(text) - k / n * 100) > 0.0005 + 1e-12
    rows.append({"model": "m400", "dataset": "sketch", "accuracy": "62.062", "n": 50_889})
    path = tmp_path / "timm.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    assert beyond_half > 0  # the second rounding happens: the slack is needed
    assert count_problem(62.062, 50_889, 62.062, 1.0) is not None  # rounding to nearest only
    assert count_problem(62.062, 50_889, 62.062, 1.0, slack=PRINTED_SLACK) is None
    assert len(validate_table(read_table(path))) == len(rows)
    code, out, err = run(["rankings", str(path), "--bootstrap-reps", "0", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["datasets"]["sketch"]["n"] == 50_889


def test_an_accuracy_no_count_gives_at_its_digits_is_refused(published_tables, tmp_path, capsys):
    """50.006% of ImageNet-A's 7,500 images: 3,750 of them is 50.000%, 3,751 is 50.013%; the
    nearest is 6 units of the third decimal away. The refusal names the file's line and prints
    the shares with the digits that show the gap."""
    table = read_table(published_tables / SSL).drop(columns="_line")
    row = table.index[(table.model == "SimCLR") & (table.dataset == "imagenet-a")][0]
    table["accuracy"] = table["accuracy"].astype(object)
    table.loc[row, "accuracy"] = "50.006"
    path = tmp_path / "ssl.csv"
    table.to_csv(path, index=False)
    err = refusal(["rankings", str(path), "--bootstrap-reps", "0"], capsys)
    assert (
        f"{path}: line {row + 2} (model='SimCLR', dataset='imagenet-a'): accuracy 50.006 cannot "
        "be a share of n=7500 test images (3750 of them is 50.000000%, 3751 is 50.013333%; the "
        "nearest is 0.006000 points away, more than the 0.0015 that 3 decimal(s) allow)"
    ) in err, err
    # the last digit one off a share is taken (50.012 for 50.0133), two off is not
    table.loc[row, "accuracy"] = "50.012"
    table.to_csv(path, index=False)
    assert len(validate_table(read_table(path))) == len(table)
    with pytest.raises(TableError, match=r"accuracy 50\.011 cannot be a share of n=7500"):
        validate_table(
            read_table(path).assign(accuracy=lambda d: d.accuracy.replace(50.012, 50.011))
        )


def test_ci_takes_a_printed_accuracy_as_the_table_check_does(capsys):
    code, out, err = run(["ci", "--accuracy", "62.062", "--n", "50889", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["correct"] == 31_583
    code, _, err = run(["ci", "--accuracy", "50.006", "--n", "7500"], capsys)
    assert code == 2 and "50.006 cannot be a share of n=7500 test images" in err
