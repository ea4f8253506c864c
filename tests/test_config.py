"""Config validation: defaults, and errors that name the key and the allowed values."""

from __future__ import annotations

import copy

import pytest
import yaml

from imagenot.core.config import (
    ConfigError,
    load_config,
    load_configs,
    merge_configs,
    read_config_file,
    read_config_files,
    resolve_additions,
    validate_config,
)


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
    with pytest.raises(
        ConfigError,
        match=r"'dictdir' under wordnet \(did you mean 'dict_dir'\?\); allowed keys: dict_dir",
    ):
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


# ---- a mistyped key, value or file: the closest known one --------------------------------


@pytest.mark.parametrize(
    ("overlay", "message"),
    [
        ({"sede": 1}, "'sede' under top level (did you mean 'seed'?)"),
        ({"train": {"modles": ["vgg_mini"]}}, "'modles' under train (did you mean 'models'?)"),
        (
            {"train": {"spaces": {"st": {"patiense": 2}}}},
            "'patiense' under train.spaces.st (did you mean 'patience'?)",
        ),
        (
            {"acquire": {"resize_mode": "centre_crop"}},
            "acquire.resize_mode: 'centre_crop' is not allowed (did you mean 'center_crop'?)",
        ),
    ],
)
def test_a_mistyped_key_or_value_names_its_file_and_the_closest_known_one(
    repo_root, tmp_path, overlay, message
):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(overlay))
    with pytest.raises(ConfigError) as caught:
        load_configs([repo_root / "config" / "config.yaml", path])
    assert str(caught.value).startswith(f"{path}: "), caught.value  # the file that gives it
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_an_unknown_key_with_nothing_close_gets_no_guess(demo_config):
    demo_config["zzqx"] = 1
    with pytest.raises(ConfigError) as caught:
        validate_config(demo_config)
    assert "'zzqx' under top level; allowed keys" in str(caught.value)
    assert "did you mean" not in str(caught.value)


def test_a_mistyped_config_file_names_the_closest_file_beside_it(repo_root):
    with pytest.raises(ConfigError, match=r"confg\.yaml: No such file or directory \(did you "
                       r"mean .*config/config\.yaml\?\)"):  # fmt: skip
        read_config_file(repo_root / "config" / "confg.yaml")
    with pytest.raises(ConfigError, match=r"No such file or directory \(there is no folder"):
        read_config_file(repo_root / "confg" / "config.yaml")


# ---- overlays that add to a list ----------------------------------------------------------


def _readme_additions() -> dict:
    """README section 3's overlay that adds a model and an experiment (```yaml block named
    my-additions.yaml), as printed."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    (body,) = re.findall(r"^```yaml\n# my-additions\.yaml\n(.*?)^```", readme, re.M | re.S)
    return yaml.safe_load(body)


ADDED = _readme_additions()


def _write(tmp_path, name: str, content: dict):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(content, sort_keys=False))
    return path


def test_an_overlay_adds_a_model_and_an_experiment_as_restating_them(repo_root, tmp_path):
    """README's `models+` and `experiments+` on the demo config give the config that restating
    both lists gives, item for item and in order, and it validates the same."""
    assert ADDED == {
        "train": {
            "models+": ["convnext_mini"],
            "experiments+": [{"dataset": "fashion_mnist", "protocol": "st", "space": "st"}],
        }
    }
    demo = repo_root / "config" / "config.yaml"
    added = read_config_files([demo, _write(tmp_path, "add.yaml", ADDED)])
    base = read_config_file(demo)["train"]
    restated = {
        "train": {
            "models": [*base["models"], "convnext_mini"],
            "experiments": [*base["experiments"], *ADDED["train"]["experiments+"]],
        }
    }
    expected = read_config_files([demo, _write(tmp_path, "restated.yaml", restated)])
    assert added == expected
    assert added["train"]["models"][-1] == "convnext_mini" and len(added["train"]["models"]) == 6
    assert validate_config(copy.deepcopy(added)) == validate_config(copy.deepcopy(expected))


def test_snakemakes_merge_keeps_the_addition_for_the_same_resolution(repo_root, tmp_path):
    """Snakemake merges --configfile files with its own update_config: a list is replaced by a
    later file's, so the addition must reach the merged config as a key of its own; resolved
    there (as rules/common.smk does), it gives what validate-config's merge gives."""
    from snakemake.utils import update_config

    files = [repo_root / "config" / "config.yaml", _write(tmp_path, "add.yaml", ADDED)]
    sources = [(str(f), read_config_file(f)) for f in files]
    merged: dict = {}
    for _, content in sources:
        update_config(merged, copy.deepcopy(content))
    assert merged["train"]["models+"] == ["convnext_mini"]  # intact beside the list
    assert merged == merge_configs(sources[0][1], sources[1][1])
    assert resolve_additions(merged, sources) == read_config_files(files)


def test_two_overlays_adding_to_one_list_add_both_in_file_order(repo_root, tmp_path):
    """Snakemake's merge keeps only the later file's `models+`; the earlier file's items are
    read from the file itself, so neither addition is lost."""
    from snakemake.utils import update_config

    files = [
        repo_root / "config" / "config.yaml",
        _write(tmp_path, "a.yaml", {"train": {"models+": ["convnext_mini"]}}),
        _write(tmp_path, "b.yaml", {"train": {"models+": ["vgg11"]}}),
    ]
    models = read_config_files(files)["train"]["models"]
    assert models[-2:] == ["convnext_mini", "vgg11"] and len(models) == 7
    sources = [(str(f), read_config_file(f)) for f in files]
    merged: dict = {}
    for _, content in sources:
        update_config(merged, copy.deepcopy(content))
    assert merged["train"]["models+"] == ["vgg11"]  # what Snakemake alone keeps
    assert resolve_additions(merged, sources)["train"]["models"] == models


def test_a_later_files_whole_list_replaces_the_additions_before_it(repo_root, tmp_path):
    """Later files win key by key: a whole `models:` after a `models+` is the list (the
    addition dropped with the rest), and a `models+` after it adds to it; Snakemake's merged
    config, resolved with the files, gives the same. Planted: the list the later file gives is
    not extended with the earlier addition."""
    from snakemake.utils import update_config

    files = [
        repo_root / "config" / "config.yaml",
        _write(tmp_path, "a.yaml", {"train": {"models+": ["convnext_mini"]}}),
        _write(tmp_path, "b.yaml", {"train": {"models": ["resnet_mini"]}}),
    ]
    assert read_config_files(files)["train"]["models"] == ["resnet_mini"]
    sources = [(str(f), read_config_file(f)) for f in files]
    merged: dict = {}
    for _, content in sources:
        update_config(merged, copy.deepcopy(content))
    assert merged["train"]["models+"] == ["convnext_mini"]  # beside b.yaml's list
    assert resolve_additions(merged, sources)["train"]["models"] == ["resnet_mini"]
    files.append(_write(tmp_path, "c.yaml", {"train": {"models+": ["vgg11"]}}))
    assert read_config_files(files)["train"]["models"] == ["resnet_mini", "vgg11"]
    # before the whole list, the addition adds to the demo's list
    assert read_config_files(files[:2])["train"]["models"][-1] == "convnext_mini"


def test_a_file_giving_a_list_and_an_addition_to_it_is_refused(repo_root, tmp_path):
    """`models:` and `models+:` in one file: one line naming the file and the key (which of the
    two wins would be a guess); either alone passes."""
    both = {"train": {"models": ["resnet_mini"], "models+": ["convnext_mini"]}}
    path = _write(tmp_path, "mine.yaml", both)
    with pytest.raises(ConfigError) as caught:
        read_config_files([repo_root / "config" / "config.yaml", path])
    message = str(caught.value)
    assert message.startswith(f"{path}: config key train.models+: train.models is given beside")
    assert "\n" not in message
    with pytest.raises(ConfigError, match=r"^config key train\.models\+: "):
        resolve_additions(copy.deepcopy(both))  # a config read from no file: the same refusal
    for one in ("models", "models+"):
        alone = _write(tmp_path, f"{one}.yaml", {"train": {one: both["train"][one]}})
        read_config_files([repo_root / "config" / "config.yaml", alone])


def test_an_addition_to_an_absent_list_adds_to_the_schemas_default():
    config = resolve_additions({"train": {"models+": ["convnext_mini"]}})
    default = validate_config({"train": {}, "datasets": {}})["train"]["models"]
    assert config["train"]["models"] == [*default, "convnext_mini"]
    assert "models+" not in config["train"]


@pytest.mark.parametrize(
    ("overlay", "message"),
    [
        (
            {"train": {"modelz+": ["convnext_mini"]}},
            "config key train.modelz+: no list train.modelz to add to (did you mean "
            "train.models+?)",
        ),
        (
            {"train": {"models+": ["resnet_mini"]}},
            "config key train.models+: 'resnet_mini' is already in train.models",
        ),
        (
            {"train": {"models+": ["convnext_mini", "convnext_mini"]}},
            "config key train.models+: 'convnext_mini' is already in train.models",
        ),
        (
            {"train": {"image_size+": [32]}},
            "config key train.image_size+: train.image_size is a number (64), not a list",
        ),
        (
            {"train": {"normalisation+": [1]}},
            "config key train.normalisation+: train.normalisation is not a list",
        ),
        (
            {"train": {"models+": "convnext_mini"}},
            "config key train.models+: the items to add to train.models are a list "
            "(models+: [...]), got a string ('convnext_mini')",
        ),
        (
            {"datasets": {"imagenot": {"kind+": ["laion"]}}},
            "config key datasets.imagenot.kind+: datasets.imagenot.kind is a string ('laion'), "
            "not a list",
        ),
    ],
)
def test_a_bad_addition_is_one_line_naming_the_file_and_key(repo_root, tmp_path, overlay, message):
    path = _write(tmp_path, "mine.yaml", overlay)
    with pytest.raises(ConfigError) as caught:
        read_config_files([repo_root / "config" / "config.yaml", path])
    assert str(caught.value) == f"{path}: {message}" or str(caught.value).startswith(
        f"{path}: {message}"
    ), caught.value
    assert "\n" not in str(caught.value)


def test_an_item_added_twice_by_two_files_names_the_second(repo_root, tmp_path):
    first = _write(tmp_path, "a.yaml", {"train": {"models+": ["convnext_mini"]}})
    second = _write(tmp_path, "b.yaml", {"train": {"models+": ["convnext_mini"]}})
    with pytest.raises(ConfigError, match=r"b\.yaml: config key train\.models\+: 'convnext_mini'"):
        read_config_files([repo_root / "config" / "config.yaml", first, second])


def test_an_added_item_the_schema_refuses_names_the_file_that_added_it(repo_root, tmp_path):
    path = _write(tmp_path, "mine.yaml", {"train": {"models+": ["no_such_model"]}})
    with pytest.raises(ConfigError) as caught:
        load_configs([repo_root / "config" / "config.yaml", path])
    assert str(caught.value).startswith(f"{path}: config key train.models.5: 'no_such_model'")
