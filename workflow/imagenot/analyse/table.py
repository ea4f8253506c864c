"""Results tables for the rankings toolbox: reading, and selection of one variant.

Over 500 lines because a table goes from its file's bytes to the long layout in one pass here
(separator, decimal commas, header case, wide and paired layouts, several files as one), each
step refusing with the line and the cells it read, as written.

A results table has one row per (model, dataset[, seed]) with ``accuracy`` in percent and
optional ``n`` (test-set size), ``seed``, ``ci_low``/``ci_high``. Papers print *wide* tables
(one column per dataset, or paired columns ``<dataset>_accuracy``, ``<dataset>_ci_low``, ...);
:func:`read_table` turns those into the long layout, and :func:`read_tables` reads several
tables as one (timm's results CSVs: one file per test set, named after it). The workflow's
``results/analyse/accuracy.csv`` also has ``protocol`` and ``transform``; :func:`select_variant`
turns it into such a table (one dataset label per dataset and protocol). What each cell may
hold is checked by :func:`imagenot.analyse.checks.validate_table`.

Every refusal is a :class:`TableError` whose one-line message names the file, row or key: a
researcher pointing the toolbox at their own table sees what to fix, not a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pandas._libs.parsers import STR_NA_VALUES

from imagenot.analyse import PUBLISHED_PROTOCOL
from imagenot.analyse.names import alike_problem
from imagenot.core.io import read_parquet

REQUIRED = ("model", "dataset", "accuracy")
KEY_COLUMNS = ("model", "dataset", "protocol", "seed", "transform")
"""The columns that key a row (those a table has): one result per key."""
WIDE_FIELDS = ("accuracy", "n", "ci_low", "ci_high")
"""The fields of a paired wide table's columns ``<dataset>_<field>`` (Recht et al.'s
``new_accuracy``, ``new_ci_low``, ...): a table with a ``<dataset>_accuracy`` column is read so."""
COLUMNS = frozenset((*REQUIRED, *WIDE_FIELDS, *KEY_COLUMNS, "key", "correct"))
"""The column names the toolbox reads (a results table's and a per-image table's), matched
whatever their case: a spreadsheet's ``Model,Dataset,Accuracy`` header is read as
``model,dataset,accuracy``. Other columns (a wide table's datasets, ``--key`` columns) keep
their names as written."""
SEPARATORS = ",;\t"
"""Cell separators a CSV file may use: comma, semicolon (spreadsheets that write decimal
commas) and tab (TSV). The separator is sniffed from the file's first lines
(:class:`csv.Sniffer`); a ``.tsv`` file is tab-separated."""
SNIFF_LINES = 20
NAME_COLUMNS = ("model", "dataset", "protocol", "transform", "key")
"""Columns of names, read as text exactly as written (stripped of surrounding spaces): a model
called ``1e3``, ``007``, ``NA``, ``None`` or ``nan`` keeps that name, and only an empty cell is
missing. A wide table's model column (``model``, else its first column) and ``--key`` columns
are read the same way."""
MISSING_TEXT = tuple(sorted(STR_NA_VALUES))
"""Cells read as missing in every other column (accuracies, sizes, intervals): pandas' default
missing-value texts (``""``, ``NA``, ``N/A``, ``nan``, ``NULL``, ``#N/A``, ...)."""
FORMATS = ("long", "wide")
WIDE_EXTRA = ("seed",)
"""Columns of a wide table that are not datasets (besides the model column)."""


LINE = "_line"
"""Column :func:`read_table` adds to a CSV table: the file line of each row (wide tables keep
the line of the model's row), so that a refusal names the line an editor shows: blank lines
(skipped by the reader) are counted, and a row whose quoted cell spans lines is on the line it
starts on."""

FILE = "_file"
"""Column :func:`read_tables` adds when it reads several tables: the file each row comes from,
which a refusal names before the row's line."""

MAX_COUNT = 2**53
"""Largest test-set size ``n`` taken: the largest whole number a float holds exactly (every
count above it is rounded; no test set comes near)."""


class TableError(ValueError):
    """A results table that cannot be used; the message names the row or column."""


def check_confidence(confidence: float) -> float:
    """A confidence level strictly between 0 and 1 (``95`` is refused, not read as 9500%)."""
    c = float(confidence)
    if not 0 < c < 1:
        hint = f"; did you mean {c / 100:g}?" if 1 < c < 100 else ""
        raise TableError(f"confidence must lie strictly between 0 and 1, got {confidence}{hint}")
    return c


def parse_items(
    flag: str, items: list[str] | None, value: Callable[[str, str], Any], everywhere: str
) -> dict[str, Any]:
    """Option ``flag``'s items ``[NAME=]VALUE`` -> {NAME or '*': value(NAME, VALUE)}; a
    ValueError of ``value``, and a name given twice (``everywhere`` names the '*' entry), is
    refused as ``flag 'ITEM': why``."""
    out: dict[str, Any] = {}
    for item in items or []:
        name, _, text = item.rpartition("=")
        try:
            if (name or "*") in out:
                raise ValueError(f"{repr(name) if name else everywhere} given twice")
            out[name or "*"] = value(name, text)
        except ValueError as exc:
            raise TableError(f"{flag} {item!r}: {exc}") from None
    return out


def parse_sizes(items: list[str] | None) -> dict[str, float]:
    """``['imagenet-v2=10000', ...]`` (option ``--n``) -> {dataset: n}."""

    def size(name: str, value: str) -> float:
        try:
            n = float(value)
        except ValueError:
            n = float("nan")
        if not name or not np.isfinite(n) or n <= 0 or not n.is_integer():
            raise ValueError("expected DATASET=N with a positive whole test-set size N")
        if n > MAX_COUNT:
            raise ValueError("a test-set size above 2^53 is not counted exactly")
        return n

    return parse_items("--n", items, size, "")


def missing_columns(df: pd.DataFrame, columns, what: str) -> None:
    """Refuse ``df`` (named ``what``) without some of ``columns``, listing those it has."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        present = ", ".join(_shown(c) for c in df.columns if c not in (LINE, FILE))
        raise TableError(f"{what} lacks column(s) {', '.join(missing)}; columns present: {present}")


def _shown(name: object) -> str:
    """A column name as a refusal lists it: as written, quoted where a tab, a line break or
    surrounding spaces would pass unseen."""
    text = str(name)
    return text if text.isprintable() and text == text.strip() else repr(text)


def listed(names, most: int) -> str:
    """The first ``most`` of ``names``, comma-separated, `` ...`` where there are more."""
    names = list(names)
    return ", ".join(map(str, names[:most])) + (" ..." if len(names) > most else "")


def unknown_datasets(
    flag: str, names, datasets: list[str], where: str = "the table", what: str = "dataset"
) -> None:
    """Refuse datasets (or another ``what``) named by option ``flag`` (a dataset ``*``: all of
    them) that are not in ``where``."""
    unknown = sorted(set(names) - set(datasets) - ({"*"} if what == "dataset" else set()))
    if unknown:
        raise TableError(
            f"{flag} names {what}(s) not in {where}: {', '.join(unknown)}; "
            f"{what}s: {listed(datasets, 20)}"
        )


def row_where(df: pd.DataFrame, i: int) -> str:
    """``line N`` of row ``i`` (its :data:`LINE`), else ``row i``; with a :data:`FILE`
    column, ``FILE line N``."""
    where = f"row {i}"
    if LINE in df.columns and pd.notna(df[LINE].iloc[i]):
        where = f"line {int(df[LINE].iloc[i])}"
    return f"{df[FILE].iloc[i]} {where}" if FILE in df.columns else where


def read_table(
    path: str | os.PathLike,
    fmt: str = "long",
    sizes: Mapping[str, float] | None = None,
    id_columns: tuple[str, ...] = (),
    *,
    accuracy_column: str | None = None,
) -> pd.DataFrame:
    """Read a CSV or parquet results table, long or wide (no validation beyond the layout).

    A CSV file is read as spreadsheets and papers' repositories export it: UTF-8 with or without
    a byte-order mark, cells separated by commas, semicolons or tabs (:data:`SEPARATORS`;
    with semicolons or tabs a decimal comma is read as a decimal point: ``76,1`` is 76.1), the
    names of :data:`COLUMNS` in any case.
    Wide: a ``model`` column (else the first column), optionally ``seed``, and one column per
    dataset in the table's order, or paired columns per dataset (:data:`WIDE_FIELDS`) and at
    most one group column (:func:`_from_wide`); empty cells are models missing from that
    dataset. ``sizes`` gives the test-set size per dataset (``--n``) for either layout; in a
    long table it fills the ``n`` column where the table has none. ``id_columns`` of a wide
    table are no datasets (``--key`` columns such as ``img_size``). ``accuracy_column``
    (``--accuracy-column``, matched whatever its case) is the column of a long table read as
    ``accuracy``: timm's results CSVs print it as ``top1``. With decimal commas, an ``n`` cell
    written with thousands dots (``10.000``) is refused (:func:`_refuse_grouped_counts`).
    """
    path = Path(path)
    if fmt not in FORMATS:
        raise TableError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if not path.is_file():
        raise TableError(f"{path}: no such file")
    sep = None
    lines: list[int] | None = None
    try:
        if path.suffix == ".parquet":
            df = read_parquet(path).to_pandas()
            written = list(map(str, df.columns))
        else:
            sep = _separator(path)
            written, lines = _records(path, sep)
            # the names pandas gives the columns (an empty header cell: "Unnamed: i")
            written = [c if c.strip() else f"Unnamed: {i}" for i, c in enumerate(written)]
            names = _name_columns(written, fmt, id_columns)
            df = pd.read_csv(
                path,
                sep=sep,
                decimal="," if sep != "," else ".",
                skipinitialspace=True,
                encoding="utf-8-sig",
                index_col=False,  # empty cells after the last column name are no index
                dtype=dict.fromkeys(names, str),
                keep_default_na=False,
                na_values={c: [""] if c in names else list(MISSING_TEXT) for c in written},
            )
    except TableError:
        raise
    except pd.errors.EmptyDataError:
        raise TableError(f"{path}: the file is empty") from None
    except UnicodeDecodeError as exc:
        why = f"byte {exc.start} is not UTF-8 text ({exc.reason})"
        raise TableError(f"{path}: {why}; save the table as UTF-8 (CSV UTF-8)") from None
    except Exception as exc:  # any reader error becomes one line naming the file
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TableError(f"{path}: cannot be read as a table: {msg}") from None
    header = [_canonical(c.strip()) for c in written]
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:  # pandas would rename the second to "name.1" and read it as another dataset
        why = "given twice (names are matched whatever their case)"
        raise TableError(f"{path}: column(s) {', '.join(map(repr, twice))} {why}")
    df.columns = [_canonical(str(c).strip()) for c in df.columns]
    if len(df) == 0:
        raise TableError(f"{path}: header only, no data rows (columns: {', '.join(df.columns)})")
    if reserved := [c for c in (LINE, FILE) if c in df.columns]:
        raise TableError(f"{path}: column name {reserved[0]!r} is reserved")
    if accuracy_column is not None:
        df = _accuracy_from(df, path, accuracy_column, fmt)
    _check_layout(df, path, sep, fmt)
    if lines is not None and len(lines) == len(df):  # the file line of each data row
        df[LINE] = lines
    if sep not in (None, ","):
        _refuse_grouped_counts(df, path, fmt)
    if fmt == "wide":
        df = _from_wide(df, path, tuple(id_columns))
    return with_sizes(df, sizes, str(path)) if sizes else df


def with_sizes(df: pd.DataFrame, sizes: Mapping[str, float], where: str) -> pd.DataFrame:
    """``df`` with the test-set sizes of ``--n`` ({dataset: n}) in its ``n`` column: where the
    table has an ``n``, the two must agree (``where``: the table(s), as a refusal names them)."""
    if "dataset" not in df:  # refused by validate_table, which names the missing column
        return df
    unknown_datasets("--n", sizes, list(dict.fromkeys(df["dataset"].astype(str))), where)
    given = df["dataset"].astype(str).map(sizes)
    if "n" in df.columns:  # the table's own n wins only where it agrees with --n
        own = pd.to_numeric(df["n"], errors="coerce")
        clash = np.flatnonzero((own.notna() & given.notna() & (own != given)).to_numpy())
        if len(clash):
            i = int(clash[0])
            name = df["dataset"].iloc[i]
            at = row_where(df, i) if FILE in df.columns else f"{where} {row_where(df, i)}"
            raise TableError(
                f"{at}: n is {df['n'].iloc[i]}, but --n {name}={sizes[name]:g} "
                f"(give the test-set size once: in the n column or with --n)"
            )
    df["n"] = given if "n" not in df.columns else df["n"].where(df["n"].notna(), given)
    return df


def _accuracy_from(df: pd.DataFrame, path: Path, name: str, fmt: str) -> pd.DataFrame:
    """``df`` with column ``name`` (``--accuracy-column``, any case) as its ``accuracy``."""
    if fmt == "wide":
        raise TableError(f"--accuracy-column {name}: a wide table's accuracies are its columns")
    match = [c for c in df.columns if str(c).casefold() == name.casefold()]
    if not match:
        missing_columns(df, [name], f"{path} (--accuracy-column {name})")
    if match[0] != "accuracy" and "accuracy" in df.columns:
        raise TableError(f"{path}: accuracy and {match[0]!r} (--accuracy-column) given: keep one")
    return df.rename(columns={match[0]: "accuracy"})


GROUPED = re.compile(r"[-+]?\d{1,3}(?:\.\d{3})+")
"""A whole number written with thousands dots (``10.000``, ``1.281.167``)."""


def _refuse_grouped_counts(df: pd.DataFrame, path: Path, fmt: str) -> None:
    """Refuse a test-set size (``n``, a wide table's ``<dataset>_n``) written with thousands
    dots in a table read with decimal commas: ``10.000`` there is ten thousand to the
    spreadsheet that wrote it, while a number reader takes the dot for a decimal point (10). It
    is refused, not read either way: a table whose decimal separator is a comma may still hold
    cells with decimal points, so the dot is ambiguous."""
    fields = {c: c if fmt == "long" else (wide_field(str(c)) or ("", ""))[1] for c in df.columns}
    for column in [c for c, field in fields.items() if field == "n"]:
        cells = df[column]
        grouped = cells.map(lambda v: isinstance(v, str) and bool(GROUPED.fullmatch(v.strip())))
        bad = np.flatnonzero(grouped.to_numpy())
        if len(bad):
            text = str(cells.iloc[bad[0]]).strip()
            raise TableError(
                f"{path}: {row_where(df, int(bad[0]))}: {column} {text!r} is written with "
                "thousands dots in a table with decimal commas, where a number reader takes "
                f"the dot for a decimal point: write the count without separators "
                f"({text.replace('.', '')})"
            )


def read_tables(
    items: list[str],
    fmt: str = "long",
    sizes: Mapping[str, float] | None = None,
    id_columns: tuple[str, ...] = (),
    *,
    accuracy_column: str | None = None,
) -> pd.DataFrame:
    """Read one or several results tables (:func:`read_table`) as one table.

    Each item is a path, or ``NAME=PATH`` for a long table without a ``dataset`` column: its
    rows are test set ``NAME``. Of several tables, one without a ``dataset`` column is one test
    set named after its file: the file's stem, less a ``results-`` prefix (timm's results CSVs,
    ``results-imagenet-r.csv``: ``imagenet-r``). A dataset found in two tables is refused, and
    so is ``NAME=`` for a table with a dataset column. Of several tables each row keeps its file
    (:data:`FILE`), which refusals name before the line. ``sizes`` (``--n``) apply to them all.
    """
    named = [name_and_file(item) for item in items]
    for item, (name, path) in zip(items, named, strict=True):
        if name == "" or not path:
            raise TableError(f"{item!r}: expected a table FILE or NAME=FILE")
    if len(named) == 1 and named[0][0] is None:
        return read_table(named[0][1], fmt, sizes, id_columns, accuracy_column=accuracy_column)
    frames, owner = [], {}
    for name, path in named:
        df = read_table(path, fmt, None, id_columns, accuracy_column=accuracy_column)
        if "dataset" not in df.columns:
            df.insert(min(1, len(df.columns)), "dataset", name or file_dataset(path))
        elif name is not None:
            has = "its datasets are its columns" if fmt == "wide" else "it has a dataset column"
            raise TableError(
                f"{path}: {name}={path} names the test set of a long table without a dataset "
                f"column, but {has}"
            )
        for d in dict.fromkeys(df["dataset"].astype(str)):
            if d in owner:
                raise TableError(
                    f"dataset {d!r} is in {owner[d]} and in {path}: one test set per table "
                    "(name a table's test set with NAME=FILE)"
                )
            owner[d] = str(path)
        frames.append(df.assign(**{FILE: str(path)}))
    df = pd.concat(frames, ignore_index=True)
    return with_sizes(df, sizes, "the tables") if sizes else df


def name_and_file(item: str) -> tuple[str | None, str]:
    """``NAME=PATH`` -> (NAME, PATH); a path (one that exists, even holding '=') -> (None, it)."""
    if "=" not in item or Path(item).exists():
        return None, item
    name, _, path = item.partition("=")
    return name.strip(), path


def file_dataset(path: str | os.PathLike) -> str:
    """The test set of a table file without a dataset column: its stem, less a ``results-``
    or ``results_`` prefix (``results-imagenetv2-matched-frequency.csv``:
    ``imagenetv2-matched-frequency``)."""
    return re.sub(r"^results[-_](?=.)", "", Path(path).stem)


def _canonical(name: str) -> str:
    """A column name as the toolbox reads it: one of :data:`COLUMNS` whatever its case, any
    other name as written."""
    return name.casefold() if name.casefold() in COLUMNS else name


def _separator(path: Path) -> str:
    """The cell separator of a CSV file (:data:`SEPARATORS`): tab for ``.tsv``, else the one
    :class:`csv.Sniffer` finds in the first :data:`SNIFF_LINES` lines, else in the header
    alone (a row with a cell too many is then refused by the reader naming its line), else a
    comma."""
    import csv

    if path.suffix.lower() == ".tsv":
        return "\t"
    with open(path, newline="", encoding="utf-8-sig") as f:
        lines = [line for _, line in zip(range(SNIFF_LINES), f, strict=False)]
    for sample in ("".join(lines), "".join(lines[:1])):
        try:
            return csv.Sniffer().sniff(sample, delimiters=SEPARATORS).delimiter
        except csv.Error:
            continue
    return ","  # one column: the reader then says which columns are missing


def _records(path: Path, sep: str) -> tuple[list[str], list[int]]:
    """The CSV file's column names as pandas reads them (before it renames repeats) and the
    file line each data row starts on, blank lines counted (a row with more non-empty cells than
    the header names is refused naming its line): the records :func:`pandas.read_csv`
    reads, found by :mod:`csv` with the same dialect (a blank line, or one of spaces alone, is
    no record for either)."""
    import csv

    header: list[str] | None = None
    lines: list[int] = []
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as f:
        reader = csv.reader(f, delimiter=sep, skipinitialspace=True)
        start = 1
        for record in reader:
            blank = not record or (len(record) == 1 and not record[0].strip())
            if not blank:
                if header is None:
                    header = record
                else:
                    extra = [c for c in record[len(header) :] if c.strip()]
                    if extra:  # pandas would take the first column for an index
                        raise TableError(
                            f"{path}: line {start} has {len(record)} cells where the header "
                            f"names {len(header)} (first extra cell: {extra[0]!r})"
                        )
                    lines.append(start)
            start = reader.line_num + 1
    return header or [], lines


def _name_columns(header: list[str], fmt: str, id_columns: tuple[str, ...]) -> list[str]:
    """The columns of ``header`` (as written) read as text (:data:`NAME_COLUMNS`, and a wide
    table's model and group columns)."""
    names = [c for c in header if _canonical(c.strip()) in NAME_COLUMNS or c.strip() in id_columns]
    if fmt == "wide" and header:  # its model column and a paired table's group column
        read = [_canonical(c.strip()) for c in header]
        ids, groups, _ = _wide_columns(read, id_columns)
        names += [c for c, r in zip(header, read, strict=True) if r in (ids[0], *groups)]
    return names


def _check_layout(df: pd.DataFrame, path: Path, sep: str | None, fmt: str) -> None:
    """Refuse a long CSV table whose header holds a name of :data:`REQUIRED` inside a longer
    cell, beside a separator (or beside another required name): its cells are separated by
    another character than the one it is read with (a comma-separated file named ``.tsv``, a
    table of spaces), which a refusal listing "missing" columns would hide."""
    if sep is None or fmt != "long" or all(c in df.columns for c in REQUIRED):
        return
    for column in map(str, df.columns):
        words = {w.strip().casefold() for w in re.split(r"[,;\t| ]+", column)}
        found = [c for c in REQUIRED if c in words and c != column]
        if found and (len(found) >= 2 or any(ch in column for ch in SEPARATORS)):
            other = sorted({ch for ch in column if ch in SEPARATORS + " |"})
            used = {"\t": "tab", ",": "comma", ";": "semicolon"}[sep]
            why = f"its lines are {used}-separated"
            if len(df.columns) == 1:
                why = "no comma, semicolon or tab separates its names"
            if path.suffix.lower() == ".tsv":
                why = "a .tsv file is read as tab-separated"
            raise TableError(
                f"{path}: the header cell {column!r} is read as one column name ({why}), but "
                f"it holds names separated by {' or '.join(map(repr, other))}: save the table "
                "with cells separated by commas or semicolons (.csv) or tabs (.tsv)"
            )


def wide_field(column: str) -> tuple[str, str] | None:
    """``(dataset, field)`` of a paired wide table's column ``<dataset>_<field>``, the field one
    of :data:`WIDE_FIELDS` whatever its case: ``new_ci_low`` -> ``('new', 'ci_low')``."""
    for field in WIDE_FIELDS:
        if column.casefold().endswith("_" + field) and len(column) > len(field) + 1:
            return column[: -len(field) - 1], field
    return None


def _wide_columns(columns: list[str], id_columns: tuple[str, ...]) -> tuple[list, list, dict]:
    """A wide table's columns by role: ids (the model column, ``model`` else the first, then
    :data:`WIDE_EXTRA`, ``id_columns`` and :data:`LINE` where present), group columns (those of
    a paired table that are no ``<dataset>_<field>``) and {column: (dataset, field)}."""
    model = "model" if "model" in columns else columns[0]
    extra = (*WIDE_EXTRA, *id_columns, LINE)
    ids = [model] + [c for c in dict.fromkeys(extra) if c in columns and c != model]
    rest = [c for c in columns if c not in ids]
    fields = {c: wide_field(c) for c in rest}
    if not any(f and f[1] == "accuracy" for f in fields.values()):  # one column per dataset
        return ids, [], {c: (c, "accuracy") for c in rest}
    groups = [c for c, f in fields.items() if f is None]
    return ids, groups, {c: f for c, f in fields.items() if f}


def _from_wide(df: pd.DataFrame, path: Path, id_columns: tuple[str, ...]) -> pd.DataFrame:
    """The long table of a wide one (:func:`_wide_columns`); a group column's value prefixes
    the dataset: ``imagenet`` and ``new_accuracy`` give dataset ``imagenet-new``."""
    columns = list(df.columns)
    ids, groups, fields = _wide_columns(columns, id_columns)
    where = {c: f"{c!r} (column {columns.index(c) + 1})" for c in columns}
    if not fields:
        raise TableError(f"{path}: a wide table needs one column per dataset besides {ids[0]!r}")
    if len(groups) > 1:
        raise TableError(
            f"{path}: columns {', '.join(where[c] for c in groups)} of the wide table are "
            f"neither model, seed, --key nor <dataset>_{'/'.join(WIDE_FIELDS)}; one may name "
            "groups of rows: name the others with --key or delete them"
        )
    seen: dict[tuple[str, str], str] = {}
    for c, key in fields.items():
        if key in seen:
            raise TableError(
                f"{path}: columns {where[seen[key]]} and {where[c]} both give the {key[1]} of "
                f"dataset {key[0]!r}"
            )
        seen[key] = c
        if (key[0], "accuracy") not in fields.values():
            raise TableError(
                f"{path}: column {where[c]} of the wide table has no {key[0] + '_accuracy'!r} "
                f"beside it (a dataset's columns are <dataset>_{'/'.join(WIDE_FIELDS)})"
            )
    empty = [repr(c) for c, f in fields.items() if f[1] == "accuracy" and df[c].isna().all()]
    if empty:  # melting would drop the dataset with its cells: it would vanish unsaid
        raise TableError(
            f"{path}: dataset column(s) {', '.join(empty)} of the wide table hold no "
            "accuracy (every cell empty or missing): fill or delete them"
        )
    df = df.reset_index(drop=True)
    for g in groups:  # a group column names groups of rows: no cell empty, not numbers alone
        if len(missing := np.flatnonzero(df[g].isna().to_numpy())):
            raise TableError(
                f"{path} {row_where(df, int(missing[0]))}: the group column {where[g]} is empty"
            )
        if pd.to_numeric(df[g], errors="coerce").notna().all():
            raise TableError(
                f"{path}: column {where[g]} of the wide table holds numbers, not the names of "
                "groups of rows: give it to --key if it tells models apart, or delete it"
            )
    long = df.melt(groups, list(fields), "_c", "_value", ignore_index=False)
    named = pd.Series([fields[c][0] for c in long["_c"]], index=long.index)
    long["dataset"] = long[groups[0]].astype(str) + "-" + named if groups else named
    long["_field"] = [fields[c][1] for c in long["_c"]]
    long = long.rename_axis("_row").reset_index()
    datasets = list(dict.fromkeys(long.sort_values("_row", kind="stable")["dataset"]))
    column = {f[0]: c for c, f in fields.items() if f[1] == "accuracy"}
    # a group's names are checked with the dataset column
    if problem := alike_problem(column, lambda name: where[column[name]]):
        raise TableError(f"{path}: the header's dataset columns {problem}")
    long = long.pivot(index=["_row", "dataset"], columns="_field", values="_value")
    long = long.reset_index().join(df[ids], on="_row").rename(columns={ids[0]: "model"})
    long["dataset"] = pd.Categorical(long["dataset"], categories=datasets, ordered=True)
    long = long.dropna(subset=["accuracy"]).sort_values(["dataset", "_row"], kind="stable")
    long["dataset"] = long["dataset"].astype(str)
    given = [f for f in WIDE_FIELDS if f in long.columns]
    return long[["model", *ids[1:], "dataset", *given]].reset_index(drop=True)


def mixed_sizes(df: pd.DataFrame) -> dict[str, list[float]]:
    """Datasets whose rows give different test-set sizes ``n`` (each then uses its own n)."""
    if "n" not in df.columns:
        return {}
    groups = df.groupby("dataset", sort=False)["n"]
    return {str(d): v for d, n in groups if len(v := sorted(set(n.dropna().astype(float)))) > 1}


def dataset_label(dataset: str, protocol: str) -> str:
    """Label of a (dataset, protocol) pair in a rankings table: ``cifar10/ft-imagenet``."""
    return dataset if protocol in ("st", PUBLISHED_PROTOCOL) else f"{dataset}/{protocol}"


def with_labels(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` whose ``protocol`` column joins its dataset (:func:`dataset_label`)."""
    if "protocol" not in df.columns:
        return df.copy()
    labels = [dataset_label(d, p) for d, p in zip(df["dataset"], df["protocol"], strict=True)]
    return df.assign(dataset=labels).drop(columns="protocol")


def is_standard(transform: pd.Series, standard_transform: str) -> pd.Series:
    return transform.astype(str).str.lower() == standard_transform.lower()


def select_variant(df: pd.DataFrame, variant: str, standard_transform: str) -> pd.DataFrame:
    """Reduce a table with ``protocol``/``transform`` columns to one row per model, label, seed.

    ``standard`` keeps the identity transformation; ``robust`` averages every transformation
    (the paper's "Robust" accuracy) and drops the per-transformation intervals. Tables without
    those columns are returned unchanged.
    """
    if variant not in ("standard", "robust"):
        raise ValueError(f"variant must be 'standard' or 'robust', not {variant!r}")
    df = with_labels(df)
    if "transform" not in df.columns:
        return df
    if variant == "standard":
        out = df[is_standard(df["transform"], standard_transform)]
        return out.drop(columns="transform").reset_index(drop=True)
    keys = ["model", "dataset"] + (["seed"] if "seed" in df.columns else [])
    agg = {"accuracy": "mean"} | {
        c: how for c, how in (("n", "max"), ("imagenet_top1", "first")) if c in df.columns
    }
    return df.groupby(keys, sort=False, as_index=False).agg(agg)
