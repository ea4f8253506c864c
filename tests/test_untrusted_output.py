"""Output that others open: user-supplied text reaching CSV or Markdown is
escaped by the one helper of each format; on-disk datasets read nothing outside their folder
through links; `imagenot rankings` refuses duplicates of every kind and non-integer sizes."""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from conftest import materialise
from PIL import Image

from imagenot.acquire.adapters import AdapterError
from imagenot.cli import main
from imagenot.core.escape import csv_cell, csv_frame, markdown_text

HOSTILE = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "a|b", "<script>x</script>"]


def test_csv_cells_that_start_like_a_formula_are_text():
    assert [csv_cell(v) for v in HOSTILE[:4]] == ["'" + v for v in HOSTILE[:4]]
    assert csv_cell("resnet18") == "resnet18" and csv_cell(-1.5) == -1.5 and csv_cell(3) == 3
    df = csv_frame(pd.DataFrame({"=model": ["=a", "b"], "x": [-1.0, 2.0]}))
    assert list(df.columns) == ["'=model", "x"]
    assert df["'=model"].tolist() == ["'=a", "b"] and df["x"].tolist() == [-1.0, 2.0]


def test_markdown_text_cannot_break_a_table_or_inject_html():
    text = markdown_text("a|b [x](javascript:alert(1)) <img src=x>\nnext")
    assert "\n" not in text and "|" not in text.replace("\\|", "")
    assert "<" not in text and "\\[x\\]" in text and text.startswith("a\\|b")
    assert markdown_text("resnet_mini") == "resnet_mini"  # plain names stay as they are


def _table(tmp_path, rows, name="t.csv"):
    path = tmp_path / name
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _rows(models, datasets=("ref", "a", "b"), n=1000):
    rng = np.random.default_rng(0)
    q = rng.uniform(40, 90, len(models))
    return [
        {
            "model": m,
            "dataset": d,
            "accuracy": round(np.clip(q[i] - 5 * j, 1, 99) * n / 100) * 100 / n,
            "n": n,
        }
        for j, d in enumerate(datasets)
        for i, m in enumerate(models)
    ]


def test_rankings_report_escapes_user_names_in_csv_and_markdown(tmp_path, capsys):
    models = [*HOSTILE, "m$\\frac$x", "plain_model"]  # "$": mathtext to matplotlib
    table = _table(tmp_path, _rows(models))
    code = main(["rankings", str(table), "--report", str(tmp_path / "r"), "--bootstrap-reps", "0"])
    assert code == 0, capsys.readouterr().err
    ranks = pd.read_csv(tmp_path / "r" / "ranks.csv")
    names = {str(v) for v in ranks.to_numpy().ravel()}
    assert not any(name.startswith(("=", "+", "-", "@")) for name in names)
    assert '\'=HYPERLINK("http://x","y")' in names and "plain_model" in names
    md = (tmp_path / "r" / "ranks.md").read_text()
    assert "<script>" not in md and "&lt;script&gt;" in md and "a\\|b" in md
    for path in (tmp_path / "r").glob("*.csv"):
        cells = pd.read_csv(path, dtype=str).fillna("").to_numpy().ravel()
        assert not any(c.startswith(("=", "@")) for c in cells), path.name


def _rankings(tmp_path, capsys, table, *extra):
    code = main(["rankings", str(table), "--bootstrap-reps", "0", *extra])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("edit", "extra", "message"),
    [
        (lambda df: df.assign(n=100.5), [], "whole number"),
        (lambda df: df.assign(n="many"), [], "whole number"),
        (lambda df: df.drop(columns="n"), ["--n", "ref=100.5", "a=10", "b=10"], "whole"),
        (lambda df: df.drop(columns="n"), ["--n", "ref=10", "ref=20", "a=1", "b=1"], "twice"),
        (lambda df: df, ["--aggregate", "a", "a"], "twice"),
        (lambda df: df, ["--floor", "a=1", "a=2"], "twice"),
        (lambda df: pd.concat([df, df.iloc[:1]]), [], "share a key"),
    ],
    ids=["n-fraction", "n-text", "--n-fraction", "--n-twice", "aggregate", "floor", "row"],
)
def test_rankings_refuses_duplicates_and_non_integer_sizes(tmp_path, capsys, edit, extra, message):
    table = tmp_path / "t.csv"
    edit(pd.DataFrame(_rows(["m0", "m1", "m2", "m3"]))).to_csv(table, index=False)
    code, err = _rankings(tmp_path, capsys, table, *extra)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_rankings_refuses_a_column_given_twice(tmp_path, capsys):
    table = tmp_path / "wide.csv"
    table.write_text("model,ref,a,a\nm0,70,60,61\nm1,80,70,71\nm2,75,65,66\n")
    code, err = _rankings(tmp_path, capsys, table, "--format", "wide", "--n", "ref=10", "a=10")
    assert code == 2 and "'a' given twice" in err, err


def test_rankings_refuses_a_per_image_row_given_twice(tmp_path, capsys):
    rows = _rows(["m0", "m1", "m2"], n=2)
    table = _table(tmp_path, rows)
    per_image = [
        {"model": r["model"], "dataset": r["dataset"], "key": k, "correct": 1}
        for r in rows
        for k in ("i0", "i1")
    ]
    per_image.append(dict(per_image[0]))
    images = _table(tmp_path, per_image, "per_image.csv")
    code, err = _rankings(tmp_path, capsys, table, "--per-image", str(images))
    assert code == 2 and "repeats" in err, err


def _image(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(path)


def test_links_out_of_an_image_folder_are_counted_not_read(tmp_path):
    root = tmp_path / "folder"
    for offset, cls in enumerate(("cat", "dog")):
        for i in range(4):
            _image(root / cls / f"{cls}_{i}.png", 40 * i + 20 * offset)  # each image its own
    secret = tmp_path / "elsewhere" / "secret.png"
    _image(secret, 255)
    os.symlink(secret, root / "cat" / "linked.png")
    _image(root / ".store" / "kept.png", 200)  # in the folder, in no class folder
    os.symlink(root / ".store" / "kept.png", root / "cat" / "inside.png")  # inside: fine
    out, parts = tmp_path / "ds", tmp_path / "parts"
    with pytest.raises(AdapterError, match="outside_dataset"):
        materialise("imagefolder", root, out, image_size=8, test_per_class=1)
    materialise(
        "imagefolder", root, out, image_size=8, test_per_class=1, max_unreadable_share=0.2,
        parts_dir=parts,
    )  # fmt: skip
    skipped = json.loads((parts / "range-00000.parquet.skipped.json").read_text())
    assert skipped == {"outside_dataset": 1}
    from imagenot.core.dataset import read_manifest

    sources = {r["source"] for r in read_manifest(out).to_pylist()}
    assert "cat/linked.png" not in sources and "cat/inside.png" in sources


def test_a_whole_file_source_linked_out_of_its_folder_is_refused(tmp_path):
    from imagenot.acquire.adapters import fashion_mnist_items

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "fmnist"
    root.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        (elsewhere / name).write_bytes(b"")
        os.symlink(elsewhere / name, root / name)
    with pytest.raises(AdapterError, match="outside the dataset folder"):
        fashion_mnist_items(root)


def test_the_reports_captions_show_the_description_as_text(repo_root):
    """report.html's captions are reStructuredText with the config's description in them: the
    workflow escapes it once (rules/common.smk) with the one escaper, so no link, role or
    ``.. raw:: html`` block in it reaches the page."""
    from docutils.core import publish_parts

    from imagenot.core.escape import rst_text

    hostile = "run `x <javascript:alert(1)>`_ |s|\n\n.. raw:: html\n\n   <script>alert(1)</script>"
    html = publish_parts(f"Config: {rst_text(hostile)}.", writer_name="html")["body"]
    assert "<script>" not in html and "<a " not in html and "javascript:alert(1)" in html
    assert 'escape.rst_text(config["description"])' in (repo_root / "rules/common.smk").read_text()
    for caption in (repo_root / "report").glob("*.rst"):  # read raw nowhere else
        assert "description" not in caption.read_text().replace('config["description"]', "")


def test_every_csv_the_workflow_writes_goes_through_the_escaper(tmp_path):
    """The one pyarrow CSV writer (download, class and audit reports, calibration tables)
    escapes as the pandas and csv-module writers do."""
    import pyarrow as pa

    from imagenot.core.io import write_csv

    table = pa.table({"class": ["=cmd|' /C calc'!A0", "dog", None], "n": [-1, 2, 3]})
    write_csv(table, tmp_path / "t.csv")
    back = pd.read_csv(tmp_path / "t.csv")
    assert back["class"].tolist()[:2] == ["'=cmd|' /C calc'!A0", "dog"]
    assert back["n"].tolist() == [-1, 2, 3]


def test_no_csv_writer_bypasses_the_escaper(repo_root):
    """A new table written with pandas, the csv module or pyarrow goes through imagenot.core.escape
    (or through imagenot.core.io.write_csv, which does): checked on the package's source."""
    import re

    package = repo_root / "workflow" / "imagenot"
    for path in package.rglob("*.py"):
        text = path.read_text()
        rel = path.relative_to(package).as_posix()
        for line in text.splitlines():
            if re.search(r"\.to_csv\(", line) and "def to_csv" not in line:
                assert "csv_frame(" in line or re.search(r"\bto_csv\(rows", line), f"{rel}: {line}"
            if re.search(r"pacsv\.write_csv\(", line):
                assert "csv_table(" in line, f"{rel}: {line}"
        if re.search(r"csv\.(writer|DictWriter)\(", text):
            assert re.search(r"from imagenot\.core\.escape import .*csv_(row|cell)", text), rel
