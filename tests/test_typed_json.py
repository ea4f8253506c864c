"""imagenot.core.typed_json: the one reader of JSON into dataclasses (rule settings, the rankings
report), on a document it must read and on planted faults it must refuse in one line."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from imagenot.analyse.report import ErrorCorrelation, ReportError
from imagenot.core.settings import SettingsError, parse
from imagenot.core.typed_json import (
    EMPTY_IS_NONE,
    FLAT,
    JsonError,
    Real,
    read,
    read_object,
    write_fields,
)


@dataclass(frozen=True)
class Doc:
    """Every form of field the reader takes."""

    name: str
    ratio: float
    count: Real
    on: bool
    note: str | None
    n: Real | dict[str, int]
    tags: list[str]
    pair: tuple[int, ...]
    groups: dict[str, list[int]]
    sizes: dict[str, Size]
    free: Mapping[str, Any]
    size: Size | None = field(default=None, metadata={FLAT: True})
    extra: Size | None = field(default=None, metadata={EMPTY_IS_NONE: True})
    optional: int | None = None


@dataclass(frozen=True)
class Size:
    """A nested object: a value of ``sizes``, and the document's own flat keys."""

    width: int
    height: int


GOOD = {
    "name": "a",
    "ratio": 1,
    "count": 3,
    "on": True,
    "note": None,
    "n": {"x": 2},
    "tags": ["t"],
    "pair": [1, 2],
    "groups": {"g": [1, 2]},
    "sizes": {"s": {"width": 1, "height": 2}},
    "free": {"any": [1, "two", None]},
    "width": 4,
    "height": 5,
    "extra": {},
}


def test_a_document_of_every_form_reads_and_writes_back():
    doc = read_object(Doc, json.loads(json.dumps(GOOD)), source="doc.json")
    assert doc.ratio == 1.0 and isinstance(doc.ratio, float)  # float: an int becomes a float
    assert doc.count == 3 and isinstance(doc.count, int)  # Real: kept as written
    assert doc.pair == (1, 2) and doc.sizes == {"s": Size(1, 2)}
    assert doc.size == Size(4, 5) and doc.extra is None and doc.optional is None
    assert read(2.5, Real | dict[str, int], source="s") == 2.5
    written = write_fields(doc)
    assert written == {**GOOD, "ratio": 1.0, "pair": [1, 2]}
    assert list(written) == list(GOOD)  # field order, the flat keys in the flat field's place


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"count": True}, "key count must be a number, not true"),
        ({"ratio": False}, "key ratio must be a number, not false"),
        ({"on": 1}, "key on must be true or false, not 1"),
        ({"name": 3}, "key name must be a string, not 3"),
        ({"name": None}, "key name must be a string, not null"),
        ({"note": 1}, "key note must be a string or null, not 1"),
        ({"n": "x"}, 'key n must be a number or an object, not "x"'),
        ({"n": {"x": 2.5}}, "key n.x must be an integer, not 2.5"),
        ({"tags": "t"}, 'key tags must be a list, not "t"'),
        ({"tags": ["t", 1]}, "key tags[1] must be a string, not 1"),
        ({"pair": [1, True]}, "key pair[1] must be an integer, not true"),
        ({"groups": {"g": [1, "2"]}}, 'key groups.g[1] must be an integer, not "2"'),
        ({"sizes": {"s": {"width": 1}}}, "missing key(s) ['sizes.s.height']"),
        ({"sizes": {"s": []}}, "key sizes.s must be an object, not []"),
        ({"free": [1]}, "key free must be an object, not [1]"),
        ({"height": "5"}, 'key height must be an integer, not "5"'),
        ({"extra": None}, "key extra must be an object, not null"),
        ({"optional": 1.5}, "key optional must be an integer or null, not 1.5"),
        ({"nmae": "a"}, "unknown key(s) ['nmae']; Doc takes keys "),
    ],
)
def test_a_planted_fault_is_one_line_naming_the_source_and_the_key(change, message):
    with pytest.raises(JsonError) as err:
        read_object(Doc, {**GOOD, **change}, source="doc.json")
    text = str(err.value)
    assert text.startswith(f"doc.json: {message}") and "\n" not in text
    assert text == f"doc.json: {message}" or message.endswith("takes keys ")


def test_missing_keys_are_named_together_and_the_whole_must_be_an_object():
    bad = {k: v for k, v in GOOD.items() if k not in ("name", "width")}
    with pytest.raises(JsonError, match=r"^doc\.json: missing key\(s\) \['name', 'width'\]$"):
        read_object(Doc, bad, source="doc.json")
    with pytest.raises(JsonError, match=r"^doc\.json: must be an object, not \[1\]$"):
        read_object(Doc, [1], source="doc.json")


def test_a_type_with_no_json_reading_is_a_programming_error():
    @dataclass(frozen=True)
    class WithPath:
        where: Path

    with pytest.raises(TypeError, match="no reading of the type"):
        read_object(WithPath, {"where": "x"}, source="s")
    with pytest.raises(TypeError, match=r"tuple\[X, \.\.\.\]"):
        read([1, "a"], tuple[int, str], source="s")


ROW = {"a": "x", "b": "y", "n": 3, "rho": 0.5, "p": None, "p_method": "asymptotic"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"n": True}, "key n must be an integer, not true"),
        ({"rho": "0.5"}, 'key rho must be a number or null, not "0.5"'),
        ({"b": None}, "key b must be a string, not null"),
        ({"a": None, "extra": 1}, "unknown key(s) ['extra']; ErrorCorrelation takes keys "),
    ],
)
def test_settings_and_report_refuse_alike(change, message):
    """The settings parser and the report reader are the one reader: a report's row class
    read as settings fails with the same line, each under its own error class."""
    assert (
        parse(ErrorCorrelation, ROW) == ErrorCorrelation.from_json(ROW) == ErrorCorrelation(**ROW)
    )
    bad = {**ROW, **change}
    with pytest.raises(SettingsError) as as_settings:
        parse(ErrorCorrelation, bad, what="src")
    with pytest.raises(ReportError) as as_report:
        ErrorCorrelation.from_json(bad, "src")
    assert str(as_settings.value) == str(as_report.value)
    assert str(as_report.value).startswith(f"src: {message}")


def test_settings_and_report_both_refuse_a_missing_key():
    missing = {k: v for k, v in ROW.items() if k != "p"}
    with pytest.raises(SettingsError, match=r"^src: missing key\(s\) \['p'\]$"):
        parse(ErrorCorrelation, missing, what="src")
    with pytest.raises(ReportError, match=r"^src: missing key\(s\) \['p'\]$"):
        ErrorCorrelation.from_json(missing, "src")
