"""Checks of a results table, cell by cell: what :func:`validate_table` refuses and why.

:func:`imagenot.analyse.table.read_table` reads a table as written; :func:`validate_table` checks
that every cell lies in its domain (an accuracy on its dataset's scale, a count of test images,
a whole seed, one row per key) and returns it typed, in percent. Every refusal is one
:class:`imagenot.analyse.table.TableError` line naming the file line (or row) and the column.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import numpy as np
import pandas as pd

from imagenot.analyse.names import alike_problem
from imagenot.analyse.table import (
    FILE,
    KEY_COLUMNS,
    LINE,
    MAX_COUNT,
    REQUIRED,
    TableError,
    listed,
    missing_columns,
    parse_items,
    row_where,
    unknown_datasets,
    wide_field,
)
from imagenot.core.counts import cell as _cell
from imagenot.core.counts import count_problem, decimals
from imagenot.core.dataset import class_name_problem


def _row_name(df: pd.DataFrame, i: int) -> str:
    row = df.iloc[i]
    what = ", ".join(f"{k}={_cell(row[k])}" for k in KEY_COLUMNS if k in df.columns)
    return f"{row_where(df, i)} ({what})"


def _refuse_first(df: pd.DataFrame, bad: pd.Series | np.ndarray, says: Callable[[int], str]):
    """Refuse the first row where ``bad`` holds: its name (:func:`_row_name`), then ``says``."""
    rows = np.flatnonzero(np.asarray(bad))
    if len(rows):
        raise TableError(f"{_row_name(df, int(rows[0]))}: {says(int(rows[0]))}")


SCALES = ("auto", "percent", "fraction")
"""How accuracies are written, per dataset: ``percent`` (75.1), ``fraction`` (0.751, multiplied
by 100 on reading) or ``auto`` (percent, unless every accuracy of the dataset is at most 1:
then the table is refused until the scale is said, never guessed)."""
MAX_SEED = 2**63 - 1

FRACTION_HINT = (
    "every accuracy is at most 1: accuracies are percentages (75.1, not 0.751); pass "
    "--fractions if the table holds fractions, or --scale percent if they are below 1%"
)


def parse_scale(items: list[str] | None) -> dict[str, str]:
    """``['fraction']`` or ``['imagenet-a=fraction', ...]`` (option ``--scale``) ->
    {dataset or '*': scale}."""

    def scale(name: str, value: str) -> str:
        if value not in SCALES:
            raise ValueError(f"expected {'|'.join(SCALES)} or DATASET={'|'.join(SCALES)}")
        return value

    return parse_items("--scale", items, scale, "the scale of all datasets")


DECIMAL_COMMA = re.compile(r"[-+]?\d+,\d+")
"""A number written with a decimal comma (``76,1``)."""


def _refuse_alike(df: pd.DataFrame, col: str) -> None:
    """Refuse two distinct names of column ``col`` that print alike
    (:func:`imagenot.analyse.names.alike_problem`: Unicode forms, invisible characters,
    look-alike letters), naming the first row of each: every table and figure would show two
    models (datasets) under one name, and an option typed as printed would match one of them."""

    def shown(name: str) -> str:
        return f"{name!r} ({row_where(df, int(np.flatnonzero((df[col] == name).to_numpy())[0]))})"

    if problem := alike_problem(df[col], shown):
        raise TableError(f"{col} names {problem}")


def _numeric(df: pd.DataFrame, col: str, what: str, *, empty_ok: bool) -> pd.Series:
    """Column ``col`` as floats; a cell that is not a finite number (text, inf, NaN unless
    ``empty_ok`` allows empty cells) is refused naming its row."""
    raw = df[col]
    values = pd.to_numeric(raw, errors="coerce").astype(float)
    bad = (values.isna() & (raw.notna() | (not empty_ok))) | np.isinf(values)

    def says(i: int) -> str:
        comma = isinstance(raw.iloc[i], str) and DECIMAL_COMMA.fullmatch(raw.iloc[i].strip())
        hint = " (a decimal comma in a comma-separated file: separate cells with ; or tabs)"
        return f"{col} {_cell(raw.iloc[i])} is not {what}{hint if comma else ''}"

    _refuse_first(df, bad, says)
    return values


def _scales(df: pd.DataFrame, acc: pd.Series, scale: dict[str, str]) -> dict[str, str]:
    """The scale of each dataset (``percent`` or ``fraction``), checked against its values; a
    table whose datasets would be read on different scales by guessing is refused."""
    datasets = list(dict.fromkeys(df["dataset"]))
    unknown_datasets("--scale", scale, datasets)
    said = {d: scale.get(d, scale.get("*", "auto")) for d in datasets}
    fraction = (df["dataset"].map(said) == "fraction").to_numpy()

    def says(i: int) -> str:
        d = df["dataset"].iloc[i]
        flag = "fraction" if "*" in scale else f"{d}=fraction"
        what = f"a fraction in 0-1 (--scale {flag})" if said[d] == "fraction" else ""
        return f"accuracy {_cell(df['accuracy'].iloc[i])} is not {what or 'a percentage in 0-100'}"

    _refuse_first(df, (acc < 0) | (acc > np.where(fraction, 1.0, 100.0)), says)
    guessed = [d for d in datasets if said[d] == "auto" and (acc[df["dataset"] == d] <= 1).all()]
    if guessed and len(guessed) == len(datasets):
        raise TableError(FRACTION_HINT)
    if guessed:
        first, others = guessed[0], [d for d in datasets if d not in guessed]
        raise TableError(
            f"accuracies of {listed(guessed, 5)} are all at most 1 while those of "
            f"{listed(others, 3)} are percentages: one table, one scale; say which: --scale "
            f"{first}=fraction (converted to percent) or --scale {first}=percent (below 1%)"
        )
    return {d: "fraction" if v == "fraction" else "percent" for d, v in said.items()}


PRINTED_SLACK = 1.0
"""Units of its last digit that a printed accuracy may lie beyond rounding to the nearest
(:func:`imagenot.core.counts.count_problem`): a table's accuracy is taken when some count of ``n``
lies within 1.5 units of its last digit. Rounding to the nearest, ties either way, is within
0.5; truncation, rounding up, and rounding twice (timm's validate.py rounds to 4 decimals, its
results CSVs print 3: 62.06253 becomes 62.0625, then 62.062, 0.53 units off) are within 1; a
last digit one off a correctly rounded share is within 1.5. A mean over runs or a wrong ``n``
is still refused wherever the shares of ``n`` lie further apart than 3 units of the printed
digit (n below 33,333 at 3 decimals, 3,333 at 2): 55% of 3 images, 50.02% of 2,000."""


def _check_counts(df: pd.DataFrame, raw_acc: pd.Series, factor: np.ndarray) -> None:
    """Each accuracy with a test-set size ``n`` is a count of correct images out of ``n``, up
    to the digits it is written with and :data:`PRINTED_SLACK` (:func:`count_problem`)."""
    n = df["n"].to_numpy(float)
    pct = df["accuracy"].to_numpy(float)
    nearest = np.round(pct / 100.0 * n) / n * 100.0  # NaN where no size is given
    exact = np.abs(pct - nearest) <= 1e-9 * np.maximum(1.0, pct)
    for i in np.flatnonzero(np.isfinite(n) & ~exact):  # the rows whose digits need a look
        problem = count_problem(pct[i], n[i], raw_acc.iloc[i], factor[i], slack=PRINTED_SLACK)
        if problem:
            raise TableError(
                f"{_row_name(df, i)}: accuracy {problem}; if it is a mean over runs, give one "
                "row per run with a seed column, or leave n out"
            )


def _check_intervals(df: pd.DataFrame, raw_acc: pd.Series, factor: np.ndarray) -> None:
    """Each accuracy lies inside its own confidence interval (``ci_low``/``ci_high``, either
    given), up to the digits each is written with: an interval that does not contain its
    accuracy belongs to another number (as the workflow's accuracy table refuses it)."""
    acc = df["accuracy"].to_numpy(float)
    for col, sign in (("ci_low", 1.0), ("ci_high", -1.0)):
        bound = df[col].to_numpy(float) if col in df.columns else np.full(len(acc), np.nan)
        outside = np.isfinite(bound) & (sign * (bound - acc) > 1e-9 * np.maximum(1.0, acc))
        for i in np.flatnonzero(outside):
            written = bound[i] / factor[i]  # the bound as the table writes it
            digits = 10.0 ** -decimals(float(raw_acc.iloc[i])) + 10.0 ** -decimals(written)
            if sign * (bound[i] - acc[i]) > 0.5 * factor[i] * digits:
                raise TableError(
                    f"{_row_name(df, i)}: accuracy {_cell(raw_acc.iloc[i])} lies outside its "
                    f"confidence interval ({col} {_cell(written)})"
                )


def _keyed_models(df: pd.DataFrame, key: list[str]) -> pd.Series:
    """``model@value`` for each column of ``key`` (option ``--key``): a model evaluated at two
    image sizes becomes two models."""
    columns = [c for c in df.columns if c not in (LINE, FILE)]
    unknown_datasets("--key", key, columns, what="column")
    if len(set(key)) < len(key) or "model" in key:
        raise TableError(f"--key {' '.join(key)}: name each column once, besides model")
    model = df["model"].astype(str)
    for k in key:
        _refuse_first(df, df[k].isna(), lambda i: f"empty {k} (a column of --key)")  # noqa: B023
        values = df[k]
        numbers = pd.to_numeric(values, errors="coerce")
        if numbers.notna().all() and (numbers == np.round(numbers)).all():
            values = numbers.astype("int64")
        model = model + "@" + values.astype(str).str.strip()
    return model


def _duplicates(df: pd.DataFrame, key: list[str], keyed: list[str]) -> None:
    """Refuse rows that repeat a key: how many, the first few, and how to tell them apart."""
    dup = df.duplicated(subset=key, keep=False)
    if not dup.any():
        return
    rows = df[dup]
    # in the order the table first repeats them
    groups = list(rows.groupby(key, sort=False).indices.values())
    at, lines = (rows[LINE], "lines") if LINE in df.columns else (rows.index, "rows")
    # a key repeats within one file (read_tables refuses a dataset of two tables)
    of = (lambda pos: f" of {rows[FILE].iloc[pos[0]]}") if FILE in df.columns else (lambda pos: "")
    where = [
        f"{', '.join(f'{k}={_cell(rows[k].iloc[pos[0]])}' for k in key)} ({lines} "
        f"{listed(at.to_numpy()[pos].astype(int), 3)}{of(pos)})"
        for pos in groups[:3]
    ]
    # the columns whose values differ within some repeated key: what tells the rows apart
    ignore = {*key, LINE, FILE, "accuracy", "n", "ci_low", "ci_high"}
    differ = [
        c
        for c in df.columns
        if c not in ignore and (rows.groupby(key, sort=False)[c].nunique(dropna=False) > 1).any()
    ]
    runs = "give each its own seed" if "seed" in key else "add a seed column"
    how = (
        f"the repeated rows differ in {', '.join(differ[:4])}: key them apart with --key "
        f"{differ[0]} (the model is then named model@{differ[0]}), or give each its own model name"
        if differ
        else f"the repeated rows differ in no other column: if they are runs of one model, {runs}; "
        "if they are copies, remove them; else give each its own model name"
    )
    applied = f" (--key {' '.join(keyed)} is applied)" if keyed else ""
    raise TableError(
        f"{int(dup.sum())} rows share a key ({', '.join(key)}) with another row: "
        f"{len(groups)} repeated key(s), e.g. {'; '.join(where)}"
        f"{' ...' if len(groups) > 3 else ''}; {how}{applied}"
    )


def validate_table(
    df: pd.DataFrame,
    *,
    scale_of: Mapping[str, str] | None = None,
    key: list[str] | tuple[str, ...] = (),
) -> pd.DataFrame:
    """Check columns, keys and the domain of every cell; return a clean copy with typed
    columns (accuracies in percent).

    ``scale_of`` ({dataset or '*': 'auto' | 'percent' | 'fraction'}, :data:`SCALES`) is decided per dataset: fractions are multiplied by 100, together
    with ``ci_low``/``ci_high``; a dataset whose accuracies are all at most 1 is refused unless
    its scale is said (a table never mixes scales by guessing). Refused, one line naming the
    row: a missing column, an empty model or dataset, an accuracy or interval bound that is no
    number in range, a ``ci_low`` above ``ci_high`` or an interval that does not contain its
    accuracy, a model or dataset name holding a line break or control character (one that
    could not be written as one line), two model (or dataset) names that print alike but are
    different text (:func:`_refuse_alike`), an ``n`` that is no whole number in
    1..2^53, an accuracy that ``n`` test images cannot give (:func:`_check_counts`), a seed
    that is no whole number from 0, and rows repeating a (model, dataset, seed) key (protocol and
    transform join the key when present): all of them counted, the first named, with the
    column that tells them apart (``key``: columns whose values join the model name,
    ``model@value``).
    """
    paired = [c for c in df.columns if (wide_field(str(c)) or ("", ""))[1] == "accuracy"]
    if "accuracy" not in df.columns and paired:  # Recht et al.'s layout, read as long
        raise TableError(
            f"results table has no accuracy column but {paired[0]!r}: a wide table of paired "
            "columns, read with --format wide"
        )
    missing_columns(df, REQUIRED, "results table")
    if len(df) == 0:
        raise TableError("results table has no rows")
    df = df.reset_index(drop=True).copy()
    for col in ("model", "dataset"):
        text = df[col].astype(str).str.strip()
        _refuse_first(df, df[col].isna() | (text == ""), lambda i: f"empty {col}")  # noqa: B023
        df[col] = text
        # a name is a line of every table and figure label the toolbox writes: one holding a
        # line break or control character would split a row or hide another name's
        problem = text.map(class_name_problem)
        _refuse_first(df, problem.notna(), lambda i: f"{col} {text[i]!r}: {problem[i]}")  # noqa: B023
        _refuse_alike(df, col)
    raw_acc = df["accuracy"]
    acc = _numeric(df, "accuracy", "a number", empty_ok=False)
    scales = _scales(df, acc, dict(scale_of or {}))
    factor = np.where(df["dataset"].map(scales) == "fraction", 100.0, 1.0)
    df["accuracy"] = acc * factor
    for col in ("ci_low", "ci_high"):
        if col in df.columns:
            bound = _numeric(df, col, "a number", empty_ok=True) * factor
            _refuse_first(
                df,
                (bound < 0) | (bound > 100.0),
                lambda i: (
                    f"{col} {_cell(df[col].iloc[i])} lies outside the "  # noqa: B023
                    f"accuracy's scale ({scales[df['dataset'].iloc[i]]})"
                ),
            )
            df[col] = bound
    if {"ci_low", "ci_high"} <= set(df.columns):
        _refuse_first(df, df["ci_low"] > df["ci_high"], lambda i: "ci_low is above ci_high")
    _check_intervals(df, raw_acc, factor)
    if "n" in df.columns:
        n = _numeric(df, "n", "a whole number of test images", empty_ok=True)
        whole = n.isna() | ((n > 0) & (n == np.floor(n)) & (n <= MAX_COUNT))
        _refuse_first(  # a size is a count of test images: 100.5, 0 or 1e30 is a broken table
            df,
            ~whole,
            lambda i: (
                "n must be a whole number of test images from 1 to 2^53, got "
                f"{_cell(df['n'].iloc[i])}"
            ),
        )
        df["n"] = n
        _check_counts(df, raw_acc, factor)
    if "seed" in df.columns:
        seed = _numeric(df, "seed", "a whole number", empty_ok=False)
        _refuse_first(  # 1.5 read as seed 1 would merge two runs; a seed is never negative
            df,
            (seed != np.floor(seed)) | (seed < 0) | (seed > MAX_SEED),
            lambda i: f"seed {_cell(df['seed'].iloc[i])} is not a whole number from 0 to 2^63-1",
        )
        df["seed"] = seed.astype("int64")
    keyed = list(key)
    if keyed:
        df["model"] = _keyed_models(df, keyed)
    _duplicates(df, [c for c in KEY_COLUMNS if c in df.columns], keyed)
    return df.drop(columns=[LINE, FILE], errors="ignore")


# ------------------------------------------------------------------ options of the command


def schema_problem(key: str, value: object) -> str | None:
    """Why ``value`` is outside the domain of config key ``key`` (its schema node: type,
    bounds, choices), or None. The one statement of an option's domain shared by the workflow's
    config and the flags of ``imagenot rankings`` that mirror it; NaN and infinity, which pass
    every JSON Schema comparison, are refused here too."""
    import jsonschema

    from imagenot.core.config import schema_node

    if isinstance(value, float) and not np.isfinite(value):
        return "is not a finite number"
    # annotations (default, description) and the project's x- keywords constrain nothing
    errors = jsonschema.Draft202012Validator(schema_node(key)).iter_errors(value)
    error = jsonschema.exceptions.best_match(errors)
    return None if error is None else error.message


def check_accuracy_option(flag: str, value: float | None) -> float | None:
    """An accuracy given as an option (``--min-reference-accuracy``): a percentage in 0-100."""
    if value is None:
        return None
    if not np.isfinite(value) or not 0 <= value <= 100:
        hint = f"; did you mean {value * 100:g}?" if 0 < value < 1 else ""
        raise TableError(f"{flag} {value:g}: an accuracy is a percentage in 0-100{hint}")
    return float(value)


def parse_floors(items: list[str] | None) -> dict[str, float]:
    """``['0.1', 'imagenet-a=1']`` -> {'*': 0.1, 'imagenet-a': 1.0} (option ``--floor``): each
    floor a percentage above 0 and at most 100."""

    def floor(name: str, value: str) -> float:
        try:
            x = float(value)
        except ValueError:
            raise ValueError("expected X or DATASET=X with a number X") from None
        if not np.isfinite(x) or not 0 < x <= 100:
            raise ValueError("a floor is an accuracy in percent above 0 and at most 100")
        return x

    return parse_items("--floor", items, floor, "the floor of all datasets")
