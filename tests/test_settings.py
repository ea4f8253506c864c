"""imagenot.core.settings: one settings object per rule, parsed strictly from the plan's JSON."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest

from imagenot.core.settings import FromConfig, SettingsError, parse, to_arg, to_json


@dataclass(frozen=True)
class Inner:
    name: str
    size: int


@dataclass(frozen=True)
class Outer:
    threshold: float | None
    flag: bool
    inner: Inner
    values: list
    extra: dict


GOOD = {"threshold": 1, "flag": True, "inner": {"name": "a", "size": 2}, "values": [1], "extra": {}}


def test_round_trip_through_json_and_file(tmp_path):
    parsed = parse(Outer, to_json(GOOD))
    assert parsed == Outer(1.0, True, Inner("a", 2), [1], {})
    assert isinstance(parsed.threshold, float)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(GOOD))
    assert parse(Outer, f"@{path}") == parsed
    assert parse(Outer, {**GOOD, "threshold": None}).threshold is None
    assert to_json(parsed) == to_json(GOOD | {"threshold": 1.0})
    assert to_arg({"a": "it's"}).startswith("'")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"treshold": 0.5}, r"^--settings: unknown key\(s\) \['treshold'\]; Outer takes keys"),
        ({"flag": "yes"}, r'^--settings: key flag must be true or false, not "yes"$'),
        ({"inner": {"name": "a", "size": 2.5}}, r"^--settings: key inner\.size must be an integer"),
        ({"inner": {"name": "a"}}, r"^--settings: missing key\(s\) \['inner\.size'\]$"),
        ({"threshold": "high"}, r"^--settings: key threshold must be a number or null, not"),
        ({"values": 3}, r"^--settings: key values must be a list, not 3$"),
    ],
)
def test_a_wrong_key_is_named(change, message):
    with pytest.raises(SettingsError, match=message):
        parse(Outer, json.dumps({**GOOD, **change}))


def test_missing_key_and_bad_json_are_named(tmp_path):
    with pytest.raises(SettingsError, match=r"^--settings: missing key\(s\) \['flag'\]$"):
        parse(Outer, json.dumps({k: v for k, v in GOOD.items() if k != "flag"}))
    with pytest.raises(SettingsError, match="not valid JSON"):
        parse(Outer, "{")
    with pytest.raises(SettingsError, match="must be a JSON object"):
        parse(Outer, "[1]")
    path = tmp_path / "s.json"
    path.write_text(json.dumps({**GOOD, "flag": 1}))
    with pytest.raises(
        SettingsError, match=rf"^--settings {re.escape(str(path))}: key flag must be true or false"
    ):
        parse(Outer, f"@{path}")
    with pytest.raises(SettingsError, match="cannot read"):
        parse(Outer, f"@{tmp_path / 'absent.json'}")


@dataclass(frozen=True)
class _Overridden(FromConfig):
    """A throwaway class reading ``size`` from a dataset or its stage, ``flag`` from one."""

    SECTIONS = ("datasets.{dataset}", "stage")
    DATASET_OVERRIDES = ("size",)
    WILDCARDS = ("dataset",)

    dataset: str
    size: int
    flag: bool


def test_a_key_two_sections_hold_is_read_only_where_declared():
    """A dataset's value of a declared key wins over the stage's; two sections holding an
    undeclared key is an error naming both (one meaning per key name)."""
    config = {"datasets": {"d": {"size": 3}, "e": {}}, "stage": {"size": 1, "flag": False}}
    assert _Overridden.from_config(config, dataset="d") == _Overridden("d", 3, False)
    assert _Overridden.from_config(config, dataset="e") == _Overridden("e", 1, False)
    config["datasets"]["d"]["flag"] = True
    with pytest.raises(SettingsError, match=r"datasets\.d\.flag and stage\.flag"):
        _Overridden.from_config(config, dataset="d")
