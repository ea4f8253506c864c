"""Config validation: defaults, and errors that name the key and the allowed values."""

from __future__ import annotations

import copy

import pytest
import yaml

from imagenot.config import ConfigError, load_config, read_config_file, validate_config


@pytest.fixture()
def demo_config(repo_root):
    with open(repo_root / "config" / "config.yaml") as f:
        return yaml.safe_load(f)


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_shipped_configs_validate(repo_root, name):
    config = load_config(repo_root / "config" / name)
    assert config["seed"] == 0
    assert "resources" in config and config["resources"]["site"] is None


def test_defaults_are_filled(demo_config):
    demo_config.pop("resources")
    validate_config(demo_config)
    assert demo_config["resources"]["max_runtime_min"] > 0


def test_unknown_top_level_key_is_named(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["sede"] = 1
    with pytest.raises(ConfigError, match=r"'sede'.*allowed keys: .*seed"):
        validate_config(bad)


def test_unknown_nested_key_is_named_with_its_path(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["wordnet"]["dictdir"] = "/x"
    with pytest.raises(ConfigError, match=r"'dictdir' under wordnet; allowed keys: dict_dir"):
        validate_config(bad)


def test_bad_enum_value_lists_allowed_values(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["datasets"]["imagenot"]["kind"] = "flickr"
    with pytest.raises(
        ConfigError,
        match=r"datasets.imagenot.kind: 'flickr' is not allowed; allowed values: \['laion'",
    ):
        validate_config(bad)


def test_wrong_type_names_the_key(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["seed"] = "zero"
    with pytest.raises(ConfigError, match="config key seed"):
        validate_config(bad)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("seed: [1,\n", "line 2, column 1"),
        ("seed: 0\n\tx: 1\n", "line 2, column 1"),
        ("__use_yte__: true\nseed: [\n", "line 3, column 1"),
    ],
)
def test_invalid_yaml_is_one_line_naming_file_line_and_column(tmp_path, text, where):
    """A plain YAML file and a YTE template alike: the file, line, column and problem in one
    line, never PyYAML's several lines naming ``"<unicode string>"``."""
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "\n" not in message and "<unicode string>" not in message
    assert f"broken.yaml is not valid YAML: {where}: " in message


def test_valid_yaml_loads_where_invalid_is_refused(tmp_path):
    path = tmp_path / "fine.yaml"
    path.write_text("seed: 0\n")
    assert read_config_file(path) == {"seed": 0}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("curate.threshold", float("nan")),
        ("laion.max_punsafe", float("nan")),
        ("curate.threshold", float("inf")),
        ("seed", float("-inf")),
    ],
)
def test_nan_and_infinity_are_refused_naming_the_key(demo_config, key, value):
    """Every comparison with NaN is false, so NaN passes minimum/maximum; infinity passes a
    one-sided bound: each is refused by itself, whatever the schema says of the key."""
    bad = copy.deepcopy(demo_config)
    section, _, name = key.rpartition(".")
    (bad.setdefault(section, {}) if section else bad)[name] = value
    with pytest.raises(ConfigError, match=rf"config key {key}: .* is not a finite number"):
        validate_config(bad)


def test_nan_in_a_yaml_file_is_refused(tmp_path, demo_config):
    demo_config["laion"]["max_punsafe"] = float("nan")
    path = tmp_path / "nan.yaml"
    path.write_text(yaml.safe_dump(demo_config))
    assert "max_punsafe: .nan" in path.read_text()
    with pytest.raises(ConfigError, match=r"config key laion.max_punsafe: nan is not a finite"):
        load_config(path)
