"""Config validation against the JSON schema in ``workflow/schemas`` (defaults filled in).

The top-level schema ``config.schema.yaml`` refers to one schema file per stage. A wrong key or
value raises :class:`ConfigError` naming the key path and the allowed values, before any job runs.

Lists of names are not written in the schema files: ``x-registry: KIND`` stands for "one of the
names registered in ``imagenot.registries`` KIND" and ``x-registry-keys: KIND`` on an object for
"its keys are such names". :func:`load_schema` expands both when it reads a schema, so a name
registered at run time validates (this is the only schema loader: the workflow, ``imagenot
validate-config`` and every ``from_config`` go through it).
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
MAIN_SCHEMA = "config.schema.yaml"


class ConfigError(ValueError):
    """Invalid workflow configuration; the message names the offending key."""


# libyaml's safe loader where PyYAML was built with it (the wheels are): the same documents,
# read about 5 times faster. The schemas are read at every Snakemake start and every
# `imagenot validate-config` (0.25 -> 0.05 CPU-s for the 13 schema files on this machine).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(path: Path) -> Any:
    with open(path) as f:
        return yaml.load(f, Loader=_SAFE_LOADER)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key given twice in one mapping (PyYAML, like Snakemake,
    silently keeps the last one: a typo-free but duplicated key would change a run unseen)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` merges; keys given beside it override, as YAML says
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(
                    f"{key_node.start_mark.name}, line {key_node.start_mark.line + 1}: duplicate "
                    f"key {key!r} (first on line {seen[key] + 1})"
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    """``json.loads``' object hook that refuses a key given twice (as YAML files are)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"duplicate key {key!r}")
        out[key] = value
    return out


# The top-level key that makes a YAML config a YTE template (https://yte-template-engine.github.io)
YTE_KEY = "__use_yte__"


def _yte(path: Path) -> Any:
    """A YAML config with :data:`YTE_KEY` as Snakemake reads it: through Snakemake's own
    config-file loader (``snakemake.common.configfile.load_configfile``, which renders the
    template with ``yte.process_yaml(..., require_use_yte=True)``), the same code path.
    Imported by name: only Snakemake's process and the commands people type read config files,
    where Snakemake is installed; a job's environment has none (its settings come as JSON)."""
    import importlib

    try:
        loader = importlib.import_module("snakemake.common.configfile").load_configfile
    except ImportError:
        raise ConfigError(
            f"config file {path} is a YTE template ({YTE_KEY}), which Snakemake renders: read "
            "it where Snakemake is installed (the workflow's .venv)"
        ) from None
    try:
        return loader(str(path))
    except Exception as exc:  # WorkflowError, or an error of the template's own code
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"config file {path}: its YTE template fails ({detail})") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: where (line, column; 1-based) and what. Its own text spans
    several lines and names the source as ``"<unicode string>"``, which tells a user nothing."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    if problem is None:
        problem = " ".join(str(exc).split())
    if mark is None:
        return problem
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"


def read_config_file(path: str | os.PathLike) -> dict:
    """A config file as a dict, read as Snakemake reads a ``--configfile`` (JSON first, else
    YAML; a YAML file whose top level says ``__use_yte__: true`` is a YTE template, rendered
    by Snakemake's own loader: :func:`_yte`), so that ``imagenot validate-config`` checks what
    the workflow runs. Refused with ConfigError naming the file (and line): a file that is not
    UTF-8 (Snakemake's encoding), a key given twice, invalid YAML, an empty file, a top level
    that is no mapping."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {raw[exc.start]:#04x} on line {line}); "
            "save it as UTF-8, the encoding Snakemake reads config files in"
        ) from None
    try:  # Snakemake tries JSON first (no YTE then)
        config = json.loads(text, object_pairs_hook=_unique_pairs)
    except ConfigError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    except ValueError:
        try:
            config = yaml.load(text, Loader=_UniqueKeyLoader)
        except yaml.YAMLError as exc:
            raise ConfigError(
                f"config file {path} is not valid YAML: {_yaml_problem(exc)}"
            ) from None
        if isinstance(config, dict) and YTE_KEY in config:
            config = _yte(path)
    # An empty file or a list would merge as "no change" (or crash the merge): a config file that
    # says nothing is a mistake (a wrong path, a truncated copy), not an overlay.
    if config is None or config == {}:
        raise ConfigError(f"config file {path} is empty (a config file is a mapping of keys)")
    if not isinstance(config, dict):
        raise ConfigError(
            f"config file {path}: the top level is a {type(config).__name__}, not a mapping of "
            "config keys"
        )
    return config


REGISTRY_MARKER = "x-registry"
# ``x-name: true``: a name (imagenot.names); ``x-name: "ft-{name}"``: a string of that form.
NAME_MARKER = "x-name"
REGISTRY_KEYS_MARKER = "x-registry-keys"
# ``x-values: SCHEMA`` on a search-space hyperparameter (``{value: x}``, ``{choice: [...]}``, ...):
# every value it may take is SCHEMA (its domain: a momentum in [0, 1), a weight decay >= 0), so a
# value no job can use is refused where the config is checked, naming the key, not by torch in
# every training job after the dataset is built. A range (uniform, log_uniform) of an integer
# hyperparameter may have fractional bounds (a draw is rounded): its bounds are numbers.
VALUES_MARKER = "x-values"
# Schema of a registered name's value under an ``x-registry-keys`` object when the schema file
# does not describe it and its registry entry gives no ``params_schema``: no parameters.
_NO_PARAMETERS = {"type": "object", "default": {}, "additionalProperties": False, "properties": {}}


def _expand_registries(node: Any, where: str) -> Any:
    """``node`` with each registry marker replaced by the registry's current names (see the
    module docstring); ``where`` names the schema file in errors."""
    if isinstance(node, list):
        return [_expand_registries(n, where) for n in node]
    if not isinstance(node, dict):
        return node
    from imagenot import registries

    default = node.get("default")
    if isinstance(default, dict) and set(default) == {REGISTRY_MARKER}:
        # ``default: {x-registry: KIND}``: every registered name (a list of them, in order)
        node = {**node, "default": list(registries.names(default[REGISTRY_MARKER]))}
    out = {k: _expand_registries(v, where) for k, v in node.items()}

    if NAME_MARKER in out:
        from imagenot.names import name_schema

        out.update(name_schema(out[NAME_MARKER]))
    if REGISTRY_MARKER in out:
        out["enum"] = list(registries.names(out[REGISTRY_MARKER]))
    if VALUES_MARKER in out:
        domain = out[VALUES_MARKER]
        bound = {**domain, "type": "number"} if domain.get("type") == "integer" else domain
        out["properties"] = {
            **out.get("properties", {}),
            "value": domain,
            "choice": {"items": domain},
            "grid": {"items": domain},
            "uniform": {"items": bound},
            "log_uniform": {"items": bound},
        }
    if REGISTRY_KEYS_MARKER in out:
        kind = out[REGISTRY_KEYS_MARKER]
        reg = registries.registry(kind)
        props = dict(out.get("properties", {}))
        stale = sorted(set(props) - set(reg))
        if stale:
            raise ConfigError(
                f"schema {where}: properties {stale} are not registered {kind}; registered: "
                f"{', '.join(reg)}"
            )
        for name, entry in reg.items():
            if name not in props:
                own = getattr(entry, "params_schema", None)
                props[name] = copy.deepcopy(own if own is not None else _NO_PARAMETERS)
        out["properties"] = props
        if out.get("additionalProperties") is not False:  # else that already refuses the rest
            out["propertyNames"] = {"enum": list(reg)}
    return out


def load_schema(name: str, schema_dir: str | os.PathLike = SCHEMA_DIR) -> dict:
    """The schema file ``name`` with its registry markers expanded (names registered now)."""
    return _expand_registries(_load_yaml(Path(schema_dir) / name), name)


def _registry(schema_dir: Path) -> Registry:
    def retrieve(uri: str) -> Resource:
        name = uri.rsplit("/", 1)[-1]
        return Resource.from_contents(
            load_schema(name, schema_dir), default_specification=DRAFT202012
        )

    return Registry(retrieve=retrieve)


def _is_integer(checker, instance) -> bool:
    """An integer is an ``int``: JSON Schema also takes ``2.0``, which ``range``, ``%05d`` and
    tensor shapes refuse in a job long after validation said "valid"."""
    return isinstance(instance, int) and not isinstance(instance, bool)


def _with_defaults(validator_class):
    """A validator class that fills ``default`` values of ``properties`` while validating, and
    whose integers are ints (:func:`_is_integer`)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):
        if isinstance(instance, dict):
            for name, sub in props.items():
                if isinstance(sub, Mapping) and "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from validate_properties(validator, props, instance, schema)

    return jsonschema.validators.extend(
        validator_class,
        {"properties": properties},
        type_checker=validator_class.TYPE_CHECKER.redefine("integer", _is_integer),
    )


def _key_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def _describe(error: jsonschema.ValidationError) -> str:
    key = _key_path(error)
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = (
            sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        )
        where = key if key != "<top level>" else "top level"
        return (
            f"unknown config key(s) {', '.join(repr(e) for e in extra)} under {where}; "
            f"allowed keys: {', '.join(allowed)}"
        )
    if NAME_MARKER in schema and isinstance(error.instance, str):
        from imagenot.names import NAME_PATTERN, name_problem

        # a key under a named section (propertyNames) or a value naming one: say which rule
        problem = name_problem(error.instance) if schema[NAME_MARKER] is True else None
        template = schema[NAME_MARKER]
        form = "" if template is True else f" of the form {template} with {{name}} ~ {NAME_PATTERN}"
        return f"config key {key}: name {problem or repr(error.instance) + form}"
    if error.validator == "enum":
        return f"config key {key}: {error.instance!r} is not allowed; allowed values: {error.validator_value}"
    return f"config key {key}: {error.message}"


def non_finite_numbers(node: Any, at: tuple = ()) -> list[tuple[str, float]]:
    """(dotted key, value) of every NaN or infinity in ``node``, a config or any part of it.

    Why a walk of the values and not the schema: JSON Schema's ``minimum``/``maximum`` are
    comparisons, and every comparison with NaN is false, so ``threshold: .nan`` passes
    ``minimum: 0, maximum: 1`` (and disables whatever the number bounds); infinity passes a
    one-sided bound. No key of the workflow means "not a number", so none may hold one: a new
    number key is covered without a schema edit."""
    if isinstance(node, float) and not math.isfinite(node):
        return [(".".join(str(p) for p in at) or "<top level>", node)]
    if isinstance(node, Mapping):
        items = node.items()
    elif isinstance(node, (list, tuple)):
        items = enumerate(node)
    else:
        return []
    return [bad for key, value in items for bad in non_finite_numbers(value, (*at, key))]


# Keys that were removed, with what replaces them: a config still naming one stops on one line
# saying so, instead of the schema's list of the keys allowed beside it.
REMOVED_KEYS = {
    "train.max_batch_per_gpu_overrides": "removed: each training job takes the "
    "largest per-GPU batch its site's preflight measured to fit its model on the card "
    '(`imagenot preflight`, docs/gpu.md "First hour on a GPU"); delete the key '
    "(train.max_batch_per_gpu stays, a ceiling for every model)",
}


def removed_key(config: Mapping) -> str | None:
    """The message for the first :data:`REMOVED_KEYS` entry ``config`` still names, else None."""
    for key, why in REMOVED_KEYS.items():
        *parents, last = key.split(".")
        node: Any = config
        for part in parents:
            node = node[part] if isinstance(node, Mapping) and part in node else None
        if isinstance(node, Mapping) and last in node:
            return f"config key {key}: {why}"
    return None


def validate_config(
    config: dict, schema_dir: str | os.PathLike = SCHEMA_DIR, schema: str = MAIN_SCHEMA
) -> dict:
    """Validate ``config`` in place, filling defaults; raise ConfigError naming the key."""
    if (removed := removed_key(config)) is not None:
        raise ConfigError(removed)
    schema_dir = Path(schema_dir)
    main = load_schema(schema, schema_dir)
    cls = _with_defaults(jsonschema.validators.validator_for(main))
    validator = cls(main, registry=_registry(schema_dir))
    try:
        errors = sorted(
            validator.iter_errors(config),
            key=lambda e: (len(e.absolute_path), str(e.absolute_path)),
        )
    except Unresolvable as exc:  # a referenced schema file failed to load: say why, not where
        cause: BaseException = exc
        while cause.__cause__ is not None:
            cause = cause.__cause__
        if isinstance(cause, ConfigError):
            raise cause from None
        raise ConfigError(f"schema {exc}: {type(cause).__name__}: {cause}") from exc
    problems = [
        f"config key {key}: {value} is not a finite number (NaN and infinity are refused)"
        for key, value in non_finite_numbers(config)
    ] + [_describe(e) for e in errors]
    if len(problems) == 1:  # the usual case: one line naming the key
        raise ConfigError(problems[0])
    if problems:
        detail = "\n".join(f"  - {p}" for p in problems[:10])
        raise ConfigError(f"invalid workflow config ({len(problems)} problem(s)):\n{detail}")
    return config


def load_config(path: str | os.PathLike) -> dict:
    """Read a YAML config file and validate it against the schema (defaults filled)."""
    path = Path(path)
    config = read_config_file(path)
    try:
        return validate_config(config)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def merge_configs(base: Mapping, overlay: Mapping) -> dict:
    """Snakemake's ``--configfile A B`` merge: nested mappings key by key, other values (lists
    included) replaced by the overlay's."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_configs(out[key], value)
        else:
            out[key] = value
    return out


def read_config_files(paths: Sequence[str | os.PathLike]) -> dict:
    """The config files ``paths`` merged in order, as ``--configfile`` merges them (a base, then
    overlays that change a few keys; later files win key by key); not validated."""
    config: dict = {}
    for path in paths:
        config = merge_configs(config, read_config_file(path))
    return config


def load_configs(paths: Sequence[str | os.PathLike]) -> dict:
    """:func:`read_config_files`, validated against the schema (defaults filled); an error names
    the files."""
    config = read_config_files(paths)
    try:
        return validate_config(config)
    except ConfigError as exc:
        raise ConfigError(f"{', '.join(map(str, paths))}: {exc}") from exc


def schema_node(key: str) -> Mapping[str, Any]:
    """The schema of config key ``key`` (dotted: ``laion.batch_rows``; a part in braces, as in
    ``datasets.{dataset}``, is any name of a mapping section: its ``additionalProperties``).
    Follows the stage schemas' ``$ref``; reads YAML only (no validation)."""
    document: Any = load_schema(MAIN_SCHEMA)  # the file a local "#/$defs/..." $ref points into
    node: Any = document
    for part in key.split("."):
        if part.startswith("{") and part.endswith("}"):
            node = node.get("additionalProperties") if isinstance(node, Mapping) else None
            if not isinstance(node, Mapping):
                raise ConfigError(f"config key {key}: {part} is not a named-entry section")
        else:
            props = node.get("properties", {}) if isinstance(node, Mapping) else {}
            if part not in props:
                raise ConfigError(f"config key {key}: no such key in the schema ({part!r})")
            node = props[part]
        if "$ref" in node:
            ref = node["$ref"]
            if ref.startswith("#/"):  # train.spaces.{space}: the train schema's $defs.space
                target = document
                for name in ref[2:].split("/"):
                    target = target[name]
            else:
                document = target = load_schema(ref.rsplit("/", 1)[-1])
            node = {**target, **node}
    return node


def schema_default(key: str) -> Any:
    """The schema's default of config key ``key`` (dotted: ``laion.batch_rows``), for the flags
    of commands people type by hand that mirror a config key: the default lives in the schema
    only, never in a copy. Reads YAML only (:func:`schema_node`), so a command line pays
    milliseconds for it. Through :func:`load_schema`, so a default that names a registry
    (``{x-registry: figures}``) comes back as the registered names."""
    node = schema_node(key)
    if "properties" in node:
        raise ConfigError(f"config key {key} is a section; a flag mirrors one of its keys")
    if "default" not in node:
        raise ConfigError(f"config key {key}: the schema gives it no default")
    return copy.deepcopy(node["default"])
