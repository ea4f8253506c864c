"""One escaping helper per output format, for every user-supplied text that reaches a file others
open: model, dataset and class names from users' tables, config keys and descriptions, captions.
CSV (:func:`csv_cell`), Markdown (:func:`markdown_text`) and reStructuredText (:func:`rst_text`:
the Snakemake report's captions, which docutils turns into report.html, escaping HTML itself).
Figures show names as written: ``imagenot.core.figure_style.paper_style`` turns matplotlib's
mathtext off (a model named ``m$\\frac$`` failed the report).

Why: a model named ``=HYPERLINK(...)`` in ``ranks.csv`` is a formula to a spreadsheet, a ``|``
or ``<script>`` in a name breaks or injects into a Markdown table or a page. Writers call these
helpers instead of formatting such text themselves, so a new table is escaped by construction.
"""

from __future__ import annotations

import html
import re
import string
from typing import Any

# Leading characters a spreadsheet reads as the start of a formula (OWASP "CSV injection"),
# tab and carriage return included, which some programs strip before looking.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# Characters that give text a meaning in a Markdown table cell: the cell separator, code, emphasis
# and link brackets (``[x](javascript:...)``), and the escape itself; escaped with a backslash.
# ``_`` is left alone (names are full of it, and GitHub does not emphasise inside words); HTML's
# ``<``, ``>`` and ``&`` become entities.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*\[\]|])")
_PUNCTUATION = frozenset(string.punctuation)


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet shows as text: a string starting like a formula gets a leading
    apostrophe (the convention spreadsheets read as "text", and hide). Numbers are unchanged
    (``-1.5`` as a number is no formula)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_frame(df):
    """``df`` (pandas) with every string cell and column name through :func:`csv_cell`."""
    out = df.rename(columns=lambda c: csv_cell(c) if isinstance(c, str) else c)
    for col in out.columns:
        if out[col].dtype == object or str(out[col].dtype) in ("string", "str"):
            out[col] = out[col].map(csv_cell)
    return out


def csv_table(table):
    """``table`` (pyarrow) with every string cell through :func:`csv_cell`, as column
    operations (tables of many rows: the download and audit reports)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    pattern = "^[" + re.escape("".join(_FORMULA_START)) + "]"
    columns = []
    for column in table.columns:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            formula = pc.fill_null(pc.match_substring_regex(column, pattern), False)
            column = pc.if_else(formula, pc.binary_join_element_wise("'", column, ""), column)
        columns.append(column)
    names = [csv_cell(name) for name in table.column_names]
    return pa.Table.from_arrays(columns, names=names)


def csv_row(values) -> list:
    """One CSV row (``csv.writer``) with each cell through :func:`csv_cell`."""
    return [csv_cell(v) for v in values]


def markdown_text(value: Any) -> str:
    """Text that Markdown shows as written, on one line (a table cell or a heading): HTML's
    special characters as entities, Markdown's punctuation backslash-escaped, line breaks as
    spaces."""
    text = " ".join(str(value).split())
    text = html.escape(text, quote=False)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def rst_text(value: Any) -> str:
    """Text that reStructuredText (the Snakemake report's captions) shows as written, on one
    line: every ASCII punctuation character backslash-escaped (no inline markup, link or role
    can start) and line breaks as spaces (no directive such as ``.. raw:: html`` can start a
    line). docutils then escapes HTML's special characters itself."""
    text = " ".join(str(value).split())
    return "".join("\\" + c if c in _PUNCTUATION else c for c in text)
