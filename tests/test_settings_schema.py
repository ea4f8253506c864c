"""Every rule's settings class against the schema: a setting is written once (issue 25.1).

Walks every :class:`imagenot.settings.FromConfig` class of every stage's ``settings.py`` and
fails when a field is neither a schema key of the class's sections, nor a wildcard, nor a
derived value with its reason; when ``from_config`` on the schema-default config differs from the
schema's default; and when library code keeps a fallback of its own: a keyword default or a
``.get(key, default)`` whose name is a schema key (a stage's settings module lists the few
keyword arguments that only share a name with a key, each with its reason, in ``NOT_SETTINGS``).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import imagenot
from imagenot.config import schema_node, validate_config
from imagenot.settings import FromConfig

PACKAGE = Path(imagenot.__file__).parent

# A value for every wildcard a from_config takes, valid in DEFAULT_CONFIG.
WILDCARD_EXAMPLES = {
    "dataset": "d",
    "shard": "00000",
    "protocol": "st",
    "model": "resnet_mini",
    "stage": "0",
    "seed": "0",
    "variant": "standard",
    "figure": "rankings_st",
    "table": "accuracy",
    "subject": "d",
    "name": "class_depth",
    "site": None,  # PreflightSettings: the site profile's settings (None: a local run)
}
# Per class, where its rule's wildcard names another dataset: the rules over datasets on disk.
CLASS_WILDCARD_EXAMPLES = {"MaterialiseSettings": {"dataset": "disk"}}


def _default_config() -> dict:
    """The schema's defaults, plus one dataset of each shape a rule's wildcards name."""
    return validate_config(
        {
            "datasets": {"d": {"kind": "laion"}, "disk": {"kind": "imagefolder", "path": "disk"}},
            # one trained experiment, whose space is all defaults (train.spaces.{space})
            "train": {
                "experiments": [{"dataset": "d", "protocol": "st", "space": "s"}],
                "spaces": {"s": {}},
            },
        }
    )


def _settings_modules() -> list:
    names = ["imagenot.settings"]
    for info in pkgutil.iter_modules([str(PACKAGE)]):
        if info.ispkg and (PACKAGE / info.name / "settings.py").is_file():
            names.append(f"imagenot.{info.name}.settings")
    return [importlib.import_module(n) for n in names]


def _classes() -> list[type]:
    _settings_modules()
    found, todo = [], list(FromConfig.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("imagenot."):  # not a test's throwaway subclass
            found.append(cls)
    return sorted(found, key=lambda c: (c.__module__, c.__qualname__))


CLASSES = _classes()


def _schema_props(section: str) -> dict:
    return dict(schema_node(section).get("properties", {}))


def test_every_settings_dataclass_is_a_from_config_class_in_a_settings_module():
    """No settings dataclass hides in a cli.py or plan.py: one place per stage."""
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Settings"):
                decorated = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
                if decorated and path.name != "settings.py":
                    stray.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert not stray, f"settings dataclasses outside a stage's settings.py: {stray}"
    for cls in CLASSES:
        assert cls.__module__.endswith(".settings"), cls


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_fields_are_schema_keys_wildcards_or_derived(cls):
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls
    names = [f.name for f in dataclasses.fields(cls)]
    for f in dataclasses.fields(cls):
        assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, (
            f"{cls.__name__}.{f.name} has a default of its own: defaults live in the schema"
        )
    unknown = set(cls.WILDCARDS) | set(cls.DERIVED)
    assert unknown <= set(names), f"{cls.__name__}: WILDCARDS/DERIVED name no field"
    for name, why in cls.DERIVED.items():
        assert isinstance(why, str) and why.strip(), f"{cls.__name__}.{name}: say why it is derived"
    params = set(inspect.signature(cls.from_config).parameters) - {"config"}
    assert set(cls.WILDCARDS) <= params | {"wildcards"}, cls
    keyed = [n for n in names if n not in cls.WILDCARDS and n not in cls.DERIVED]
    assert not keyed or cls.SECTIONS, f"{cls.__name__}: config-key fields but no SECTIONS"
    for name in keyed:
        held = [s for s in cls.SECTIONS if name in _schema_props(s)]
        assert held, (
            f"{cls.__name__}.{name} is no key of {cls.SECTIONS}: name the field as the schema "
            f"does, or declare it a wildcard or derived"
        )


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__qualname__)
def test_from_config_gives_the_schema_defaults(cls):
    config = _default_config()
    params = set(inspect.signature(cls.from_config).parameters) - {"config", "wildcards"}
    wanted = set(cls.WILDCARDS) | params
    missing = wanted - set(WILDCARD_EXAMPLES)
    assert not missing, f"add an example for wildcard(s) {missing} to WILDCARD_EXAMPLES"
    examples = {**WILDCARD_EXAMPLES, **CLASS_WILDCARD_EXAMPLES.get(cls.__name__, {})}
    settings = cls.from_config(config, **{k: examples[k] for k in wanted})
    assert isinstance(settings, cls)
    for f in dataclasses.fields(cls):
        if f.name in cls.WILDCARDS or f.name in cls.DERIVED:
            continue
        for section in cls.SECTIONS:
            node = _schema_props(section).get(f.name)
            if node is not None and "default" in node:
                expected = _filled_default(node)
                break
        else:
            continue  # no default: a required key, or one the config must set
        value = getattr(settings, f.name)
        if dataclasses.is_dataclass(value):
            value = dataclasses.asdict(value)
        if isinstance(value, tuple):
            value = list(value)
        assert value == expected, (
            f"{cls.__name__}.{f.name} = {value!r} from the default config, the schema says "
            f"{expected!r}"
        )


def _filled_default(node: dict):
    """A key's schema default; a section's (``curate.nsfw``: ``{}``) with its keys' defaults
    filled in, as validation fills them."""
    value = node["default"]
    if isinstance(value, dict) and "properties" in node:
        value = dict(value)
        for name, sub in node["properties"].items():
            if name not in value and isinstance(sub, dict) and "default" in sub:
                value[name] = _filled_default(sub)
    return value


def _schema_keys() -> set[str]:
    """Every key name anywhere in the schema files (leaves and sections, $defs included)."""
    from imagenot.config import SCHEMA_DIR, load_schema

    keys: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                keys.update(props)
            for sub in node.values():
                walk(sub)
        elif isinstance(node, list):
            for sub in node:
                walk(sub)

    for path in sorted(Path(SCHEMA_DIR).glob("*.schema.yaml")):
        walk(load_schema(path.name))
    return keys


def _exempt() -> dict[str, str]:
    exempt: dict[str, str] = {}
    for module in _settings_modules():
        exempt.update(getattr(module, "NOT_SETTINGS", {}))
    return exempt


def _fallbacks() -> list[str]:
    """``module:function(param)`` for every keyword default named like a schema key, and
    ``module:.get('key')`` for every fallback lookup of one (``d.get(key, default)``)."""
    keys = _schema_keys() - {"description"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(rel.parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        scopes: list[tuple[ast.AST, str]] = [(tree, "")]
        while scopes:
            node, prefix = scopes.pop()
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    scopes.append((child, f"{prefix}{child.name}."))
                elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    qual = f"{prefix}{child.name}"
                    args = child.args
                    positional = args.posonlyargs + args.args
                    with_default = positional[len(positional) - len(args.defaults) :]
                    with_default += [
                        a
                        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                        if d is not None
                    ]
                    found += [f"{module}:{qual}({a.arg})" for a in with_default if a.arg in keys]
                    scopes.append((child, f"{qual}."))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in keys
            ):
                found.append(f"{module}:.get({node.args[0].value!r})")
    return found


def test_no_library_fallback_restates_a_setting():
    """A keyword default named like a schema key is a second default; list the few that only
    share a name (with the reason) in the stage's ``settings.NOT_SETTINGS``."""
    exempt = _exempt()
    for key, why in exempt.items():
        assert isinstance(why, str) and why.strip(), f"NOT_SETTINGS[{key!r}]: say why"
    found = sorted({f for f in _fallbacks() if f not in exempt})
    assert not found, f"{len(found)} fallback(s) restate a setting:\n" + "\n".join(found)
