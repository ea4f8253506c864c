"""Every rule's settings class against the schema: a setting is written once.

Walks every :class:`imagenot.core.settings.FromConfig` class of every stage's ``settings.py`` and
fails when a field is neither a schema key of the class's sections, nor a wildcard, nor a
derived value with its reason; when ``from_config`` on the schema-default config differs from the
schema's default; when two of a class's sections hold a field's key and the class does not
declare it a dataset override; and when library code keeps a fallback of its own: a keyword
default, a ``.get(key)``/``.get(key, default)``/``.pop(key, default)`` or a command-line flag's
literal default whose name is a schema key (a stage's settings module lists the few that only
share a name with a key, each with its reason, in ``NOT_SETTINGS``).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import imagenot
from imagenot.core.config import schema_node, validate_config
from imagenot.core.settings import FromConfig

PACKAGE = Path(imagenot.__file__).parent

# The section of a dataset's own keys (DATASET_OVERRIDES: the keys that override a stage's).
DATASET_SECTION = "datasets.{dataset}"

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
    "split": "test",
    "part": "0",
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
    names = []
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
        if name in cls.DATASET_OVERRIDES:
            assert len(held) == 2 and held[0] == DATASET_SECTION, (
                f"{cls.__name__}.{name} is declared a dataset override, but is held by {held}: "
                f"an override is a key of {DATASET_SECTION} and of one stage section"
            )
        else:
            assert len(held) == 1, (
                f"{cls.__name__}.{name} is a key of {held}: one meaning per key name. Rename "
                f"one, or (a dataset's own value of the stage's key) list it in "
                f"{cls.__name__}.DATASET_OVERRIDES"
            )
    stray = set(cls.DATASET_OVERRIDES) - set(keyed)
    assert not stray, f"{cls.__name__}.DATASET_OVERRIDES names no config-key field: {stray}"


def _overrides() -> dict[str, set[str]]:
    """Per dataset key that some class declares an override: the stage sections it overrides."""
    found: dict[str, set[str]] = {}
    for cls in CLASSES:
        for name in cls.DATASET_OVERRIDES:
            held = [s for s in cls.SECTIONS if name in _schema_props(s)]
            found.setdefault(name, set()).update(held[1:])
    return found


def test_a_dataset_key_overrides_one_stage_key_and_says_which():
    """``datasets.<name>.K`` has one meaning: every class that reads it reads it in place of
    the same stage's K, and its schema description names that key (``default acquire.K``), so
    that what a user reads is what the code does. A dataset key whose description names a
    default no class reads it in place of is an error as well (``allow_fewer``)."""
    overrides = _overrides()
    two = {name: sorted(sections) for name, sections in overrides.items() if len(sections) > 1}
    assert not two, f"dataset keys overriding two stages' keys of the same name: {two}"
    documented = {}
    for name, node in _schema_props(DATASET_SECTION).items():
        said = re.findall(rf"default (\w+)\.{name}\b", str(node.get("description", "")))
        if said:
            documented[name] = set(said)
    assert documented == overrides, (
        f"datasets.<name>.K descriptions say 'default S.K' for {documented}; the settings "
        f"classes read {overrides}"
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
    from imagenot.core.config import SCHEMA_DIR, load_schema

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
    """``module:function(param)`` for every keyword default named like a schema key;
    ``module:.get('key')`` for every lookup of one that tolerates its absence (``d.get(key)``,
    ``d.get(key, default)``: the validated config holds every key with a default) and
    ``module:.pop('key')`` for ``d.pop(key, default)``; ``module:add_argument(--flag)`` for a
    command-line flag named like a schema key with a literal default of its own."""
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
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method, args = node.func.attr, node.args
            named = bool(args) and isinstance(args[0], ast.Constant) and args[0].value in keys
            if named and (method == "get" or (method == "pop" and len(args) == 2)):
                found.append(f"{module}:.{method}({args[0].value!r})")
            elif method == "add_argument" and _restated_default(node, keys):
                found.append(f"{module}:add_argument({_flag(node)})")
    return found


def _flag(call: ast.Call) -> str:
    """The option string of an ``add_argument`` call (its first, ``--device``)."""
    return next((a.value for a in call.args if isinstance(a, ast.Constant)), "?")


def _restated_default(call: ast.Call, keys: set[str]) -> bool:
    """Whether an ``add_argument`` call gives a flag named like a schema key (``--device``,
    dest ``device``) a literal default of its own, instead of None or one read from the schema
    (``schema_default(...)``, a settings object's field)."""
    options = {k.arg: k.value for k in call.keywords}
    if "default" not in options:
        return False
    dest = options.get("dest")
    name = dest.value if isinstance(dest, ast.Constant) else _flag(call).lstrip("-")
    if name.replace("-", "_") not in keys:
        return False
    try:
        return ast.literal_eval(options["default"]) is not None
    except ValueError:  # a call, a name or an attribute: computed, not restated here
        return False


def test_no_library_fallback_restates_a_setting():
    """A keyword default, a ``.get``/``.pop`` fallback or a flag default named like a schema key
    is a second default (``--device auto`` kept ``train.device`` from evaluation);
    list the few that only share a name (with the reason) in the stage's
    ``settings.NOT_SETTINGS``, and nothing else there."""
    exempt = _exempt()
    for key, why in exempt.items():
        assert isinstance(why, str) and why.strip(), f"NOT_SETTINGS[{key!r}]: say why"
    fallbacks = set(_fallbacks())
    found = sorted(fallbacks - set(exempt))
    assert not found, f"{len(found)} fallback(s) restate a setting:\n" + "\n".join(found)
    stale = sorted(set(exempt) - fallbacks)  # an exemption no code needs is dead: delete it
    assert not stale, f"{len(stale)} NOT_SETTINGS entries name no fallback:\n" + "\n".join(stale)
