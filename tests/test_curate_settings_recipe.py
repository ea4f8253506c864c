"""The recipe "add a curation key" of docs/contributing.md, performed on a throwaway key.

The recipe says a key touches the schema, one field of a settings class in
``imagenot/curate/settings.py``, the library code that reads it, and a test - and neither the
rule file, nor the command, nor the plan. This test adds ``curate.throwaway_key`` to a temporary
copy of the schema directory and a field of that name to a throwaway subclass of
:class:`SelectSettings`, and checks that the key then flows from the config to the code that
reads it through the rule's own transport; and that every curate rule and command still passes
its settings object whole (the reason no other file needs an edit).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import shutil
from pathlib import Path
from typing import ClassVar

import pytest
import snakemake_rules
import yaml

import imagenot.curate.cli as curate_cli
from imagenot.core.config import SCHEMA_DIR, ConfigError, validate_config
from imagenot.core.settings import FromConfig, SettingsError, parse, to_arg
from imagenot.curate import plan, settings

RECIPE = Path(__file__).parents[1] / "docs" / "contributing.md"
KEY = "throwaway_key"


@pytest.fixture
def schema_dir(tmp_path) -> Path:
    """Step 1 of the recipe, in a copy of the schema files: the key, its type and default."""
    copy = tmp_path / "schemas"
    shutil.copytree(SCHEMA_DIR, copy)
    path = copy / "curate.schema.yaml"
    schema = yaml.safe_load(path.read_text())
    schema["properties"][KEY] = {
        "type": "integer",
        "minimum": 1,
        "default": 3,
        "description": "a throwaway key of tests/test_curate_settings_recipe.py",
    }
    path.write_text(yaml.safe_dump(schema, sort_keys=False))
    return copy


# Step 2 of the recipe: a field named as the key in the rule's settings class.
@dataclasses.dataclass(frozen=True)
class _Select(settings.SelectSettings):
    throwaway_key: int


def _uses_the_key(s: settings.SelectSettings) -> int:
    """Step 3: the library code reads the key from the object it already takes."""
    return s.per_class * s.throwaway_key


def _config(schema_dir: Path, **curate) -> dict:
    config = {"datasets": {"d": {"kind": "laion"}}, "curate": curate}
    return validate_config(config, schema_dir=schema_dir)


def test_a_new_key_reaches_the_code_with_the_schema_and_one_field(schema_dir):
    default = _Select.from_config(_config(schema_dir), dataset="d")
    assert default.throwaway_key == 3  # the schema's default, written nowhere else
    chosen = _Select.from_config(_config(schema_dir, throwaway_key=5), dataset="d")
    # the rule's transport: one shell word, parsed back by the command's parse
    (word,) = shlex.split(to_arg(chosen))
    parsed = parse(_Select, word)
    assert parsed == chosen and _uses_the_key(parsed) == chosen.per_class * 5
    # the schema checks the new key like any other, naming it
    with pytest.raises(ConfigError, match=rf"curate\.{KEY}"):
        _config(schema_dir, throwaway_key=0)
    # without step 2 the command refuses the key by name (no silent drop)
    with pytest.raises(Exception, match=KEY):
        parse(settings.SelectSettings, word)


def test_a_key_a_dataset_may_override_is_declared(schema_dir):
    """Steps 1-2 for a key a dataset may override: also a key of ``datasets.<name>`` (no
    default), and listed in the class's ``DATASET_OVERRIDES``; undeclared, a config where both
    sections hold it is refused by name, never read from whichever comes first."""
    path = schema_dir / "datasets.schema.yaml"
    schema = yaml.safe_load(path.read_text())
    schema["additionalProperties"]["properties"][KEY] = {
        "type": "integer",
        "minimum": 1,
        "description": f"a throwaway key; default curate.{KEY}",
    }
    path.write_text(yaml.safe_dump(schema, sort_keys=False))
    datasets = {"d": {"kind": "laion", KEY: 7}, "e": {"kind": "laion"}}
    config = validate_config({"datasets": datasets}, schema_dir=schema_dir)

    @dataclasses.dataclass(frozen=True)
    class _Overridden(_Select):
        DATASET_OVERRIDES: ClassVar = (*settings.SelectSettings.DATASET_OVERRIDES, KEY)

    assert _Overridden.from_config(config, dataset="d").throwaway_key == 7  # the dataset's
    assert _Overridden.from_config(config, dataset="e").throwaway_key == 3  # curate's default
    with pytest.raises(SettingsError, match=rf"datasets\.d\.{KEY} and curate\.{KEY}"):
        _Select.from_config(config, dataset="d")


def settings_classes() -> set[str]:
    """The names of the curate stage's settings classes (:mod:`imagenot.curate.settings`)."""
    return {
        name
        for name, cls in vars(settings).items()
        if isinstance(cls, type)
        and issubclass(cls, FromConfig)
        and cls.__module__ == settings.__name__
    }


def test_rules_build_each_settings_object_whole():
    """No rule names a key: each curate rule's ``settings`` param is its step's class's
    ``from_config``, whole, so a new field reaches the job (and changes its params, so Snakemake
    reruns it) with no rule edit. Read on the rules as Snakemake holds them
    (tests/snakemake_rules.py), each param evaluated for a job of the rule."""
    import inspect

    from snakemake.iocontainers import Wildcards

    from imagenot.core import steps

    workflow = snakemake_rules.loaded()
    config = workflow.config
    laion = [name for name, spec in config["datasets"].items() if spec["kind"] == "laion"]
    # jobs of every curated dataset and two shards: a rule's own dataset or shard is found
    jobs = [{"dataset": d, "shard": s} for d in laion for s in plan.shard_ids(config)[:2]]
    classes = settings_classes()
    seen = set()
    for name, rule in workflow.rules.items():
        if Path(rule.snakefile).name not in ("curate.smk", "wordnet.smk") or not rule.shellcmd:
            continue
        command = re.search(r"\bimagenot ([\w-]+)", rule.shellcmd).group(1)
        if not steps.STEPS.entry(command).settings:
            continue  # a step of no settings (noun-lemmas)
        assert rule.params.get("settings") is not None, f"{name}: no settings param"
        module, _, class_name = steps.STEPS.entry(command).settings.partition(":")
        assert module == settings.__name__, (name, module)
        cls = getattr(settings, class_name)
        named = inspect.signature(cls.from_config).parameters
        for job in jobs:
            wildcards = Wildcards(fromdict=job)
            value = workflow.evaluate(rule.params.settings, wildcards=wildcards)
            whole = to_arg(cls.from_config(config, **{k: v for k, v in job.items() if k in named}))
            assert value == whole, f"{name} {job}: settings={value} is not {class_name}'s whole"
        seen.add(class_name)
    assert seen == classes, f"classes no rule builds, or rules building others: {seen ^ classes}"


def test_commands_parse_each_settings_class_whole():
    """Each curate step declares its whole settings class (imagenot.core.steps parses it before the
    handler runs), so a new field needs no command edit; and the plan holds no settings builder
    a key could be added to."""
    from imagenot.core.steps import STEPS

    declared = {
        step.settings.split(":")[1]
        for name in STEPS.names()
        if (step := STEPS.entry(name)).settings
        and step.settings.startswith("imagenot.curate.settings:")
    }
    classes = settings_classes()
    assert declared == classes, declared ^ classes
    assert "parse(" not in Path(curate_cli.__file__).read_text()
    builders = [n for n in vars(plan) if n.endswith("_settings")]
    assert not builders, f"curate/plan.py builds settings again: {builders}"


def test_the_recipe_names_the_files_this_test_touched():
    text = RECIPE.read_text()
    section = text[text.index("## Adding a curation key") :]
    section = section[: section.index("\n## ", 3)]
    for path in (
        "workflow/schemas/curate.schema.yaml",
        "workflow/imagenot/curate/settings.py",
        "workflow/imagenot/curate/<step>.py",
        "tests/test_curate_<step>.py",
        "rules/curate.smk",
        "workflow/imagenot/curate/cli.py",
        "workflow/imagenot/curate/plan.py",
        "tests/test_curate_settings_recipe.py",
        "workflow/schemas/datasets.schema.yaml",
        "DATASET_OVERRIDES",
    ):
        assert f"`{path}`" in section, path
