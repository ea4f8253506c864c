"""Config validation against the JSON schema in ``workflow/schemas`` (defaults filled in).

The top-level schema ``config.schema.yaml`` refers to one schema file per stage. A wrong key or
value raises :class:`ConfigError` naming the key path and the allowed values, before any job runs.

A config file may add to a list instead of restating it: ``models+: [convnext_mini]`` adds to
the list that the files before it, or the schema's default, give; a later file's whole
``models:`` replaces the list, additions included, and one file gives one of the two
(:func:`resolve_additions`, run by the workflow and ``imagenot validate-config`` alike before
validation, :func:`check_config_files`).

Lists of names are not written in the schema files: ``x-registry: KIND`` stands for "one of the
names registered in ``imagenot.core.registries`` KIND" and ``x-registry-keys: KIND`` on an object for
"its keys are such names". :func:`load_schema` expands both when it reads a schema, so a name
registered at run time validates (this is the only schema loader: the workflow, ``imagenot
validate-config`` and every ``from_config`` go through it).

Over 500 lines because reading a config file, merging several, resolving their additions and
validating the result are the one path every reader of a config takes (the workflow,
``validate-config``, ``plan``, ``preflight``, each stage's settings): a refusal names the file
that gives the key only where the merge, the additions and the schema's error meet.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
MAIN_SCHEMA = "config.schema.yaml"


class ConfigError(ValueError):
    """Invalid workflow configuration; the message names the offending key. ``keys``: the key
    path (a tuple) of each problem where the schema names one, so that a caller that knows the
    config files names the file that gives it (:func:`check_config_files`); ``names_file``: the
    message already names its file."""

    def __init__(self, message: str, keys: Sequence[tuple] = (), names_file: bool = False):
        super().__init__(message)
        self.keys = list(keys)
        self.names_file = names_file


# libyaml's safe loader where PyYAML was built with it (the wheels are): the same documents,
# read about 5 times faster. The schemas are read at every Snakemake start and every
# `imagenot validate-config` (0.25 -> 0.05 CPU-s for the 13 schema files on this machine).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
    Imported by name, so that no job's environment is asked for Snakemake
    (tests/test_envs.py follows static imports): only Snakemake's process and the commands people
    type read config files, where Snakemake is installed; a job's settings come as JSON."""
    import importlib

    try:
        load_configfile = importlib.import_module("snakemake.common.configfile").load_configfile
    except ImportError:
        why = f"is a YTE template ({YTE_KEY}): read it where Snakemake is installed (the .venv)"
        raise ConfigError(f"config file {path} {why}") from None
    try:
        return load_configfile(str(path))
    except Exception as exc:  # WorkflowError, or an error of the template's own code
        detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"config file {path}: its YTE template fails ({detail})") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error in one line: where (line, column; 1-based) and what. Its own text spans
    several lines and names the source as ``"<unicode string>"``, which tells a user nothing."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    problem = problem or " ".join(str(exc).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def _missing_file_hint(path: Path) -> str:
    """For a config file that is not there: the config file beside it its name most resembles,
    or the missing folder."""
    folder = path.parent
    if not folder.is_dir():
        return f" (there is no folder {folder})"
    beside = [p.name for p in folder.iterdir() if p.suffix in (".yaml", ".yml", ".json")]
    match = did_you_mean(path.name, sorted(beside))
    return f" (did you mean {folder / match}?)" if match else ""


def parse_config_text(text: str, path: str | os.PathLike) -> tuple[Any, bool]:
    """(the data of a config file's ``text``, whether it is JSON), parsed as Snakemake parses
    a ``--configfile`` (JSON first, else YAML), nothing in it run; a key given twice or invalid
    YAML is a ConfigError naming ``path``."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs), True
    except ConfigError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    except ValueError:
        pass
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader), False
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {_yaml_problem(exc)}") from None


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
        hint = _missing_file_hint(path) if isinstance(exc, FileNotFoundError) else ""
        raise ConfigError(f"config file {path}: {exc.strerror or exc}{hint}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte {raw[exc.start]:#04x} on line {line}); "
            "save it as UTF-8, the encoding Snakemake reads config files in"
        ) from None
    config, is_json = parse_config_text(text, path)
    if not is_json and isinstance(config, dict) and YTE_KEY in config:
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
# ``x-name: true``: a name (imagenot.core.names); ``x-name: "ft-{name}"``: a string of that form.
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
    from imagenot.core import registries

    default = node.get("default")
    if isinstance(default, dict) and set(default) == {REGISTRY_MARKER}:
        # ``default: {x-registry: KIND}``: every registered name (a list of them, in order)
        node = {**node, "default": list(registries.names(default[REGISTRY_MARKER]))}
    out = {k: _expand_registries(v, where) for k, v in node.items()}

    if NAME_MARKER in out:
        from imagenot.core.names import name_schema

        out.update(name_schema(out[NAME_MARKER]))
    if REGISTRY_MARKER in out:
        out["enum"] = list(registries.names(out[REGISTRY_MARKER]))
    if VALUES_MARKER in out:
        domain = out[VALUES_MARKER]
        bound = {**domain, "type": "number"} if domain.get("type") == "integer" else domain
        ranges = {"choice": domain, "grid": domain, "uniform": bound, "log_uniform": bound}
        listed = {form: {"items": items} for form, items in ranges.items()}
        out["properties"] = {**out.get("properties", {}), "value": domain, **listed}
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
    text = (Path(schema_dir) / name).read_text()
    return _expand_registries(yaml.load(text, Loader=_SAFE_LOADER), name)


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


def did_you_mean(word: str, known: Sequence[str]) -> str | None:
    """The known word closest to a mistyped ``word`` (difflib's ratio, at least 0.6), else None."""
    close = difflib.get_close_matches(word, [str(k) for k in known], n=1)
    return close[0] if close else None


def _unknown_keys(error: jsonschema.ValidationError) -> list[str]:
    """The keys an ``additionalProperties: false`` error is about (the mapping's unknown keys)."""
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if not isinstance(error.instance, dict):
        return []
    return sorted(set(error.instance) - set(schema.get("properties", {})), key=str)


def _error_keys(error: jsonschema.ValidationError) -> list[tuple]:
    """The key path(s) a schema error is about: each unknown key's own, else the error's."""
    at = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and _unknown_keys(error):
        return [(*at, extra) for extra in _unknown_keys(error)]
    return [at]


def _describe(error: jsonschema.ValidationError) -> str:
    key = ".".join(str(p) for p in error.absolute_path) or "<top level>"
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = _unknown_keys(error)
        where = key if key != "<top level>" else "top level"
        # a mistyped key: the known key it most resembles (a key meant as an addition,
        # `models+`, resembles its list: it went unresolved only where no list is known)
        hints = [
            f"{match!r} for {e!r}" if len(extra) > 1 else repr(match)
            for e in extra
            if (match := did_you_mean(str(e), allowed)) is not None
        ]
        hint = f" (did you mean {', '.join(hints)}?)" if hints else ""
        return (
            f"unknown config key(s) {', '.join(repr(e) for e in extra)} under {where}{hint}; "
            f"allowed keys: {', '.join(allowed)}"
        )
    if NAME_MARKER in schema and isinstance(error.instance, str):
        from imagenot.core.names import NAME_PATTERN, name_problem

        # a key under a named section (propertyNames) or a value naming one: say which rule
        problem = name_problem(error.instance) if schema[NAME_MARKER] is True else None
        template = schema[NAME_MARKER]
        form = "" if template is True else f" of the form {template} with {{name}} ~ {NAME_PATTERN}"
        return f"config key {key}: name {problem or repr(error.instance) + form}"
    if error.validator == "enum":
        allowed = error.validator_value
        words = [v for v in allowed if isinstance(v, str)]
        match = did_you_mean(error.instance, words) if isinstance(error.instance, str) else None
        hint = f" (did you mean {match!r}?)" if match is not None else ""
        return (
            f"config key {key}: {error.instance!r} is not allowed{hint}; allowed values: {allowed}"
        )
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


# A key the workflow does not read, and what replaces it: a config still naming it stops on one
# line saying so, instead of the schema's list of the keys allowed beside it.
_REPLACED = ("train", "max_batch_per_gpu_overrides")
_REPLACED_BY = (
    "removed: each training job takes the largest per-GPU batch its site's preflight measured "
    '(`.venv/bin/imagenot preflight`, docs/gpu.md "First hour on a GPU"); delete the key '
    "(train.max_batch_per_gpu stays, a ceiling for every model)"
)


def validate_config(
    config: dict, schema_dir: str | os.PathLike = SCHEMA_DIR, schema: str = MAIN_SCHEMA
) -> dict:
    """Validate ``config`` in place, filling defaults; raise ConfigError naming the key."""
    if _value_at(config, _REPLACED)[0]:
        raise ConfigError(f"config key {'.'.join(_REPLACED)}: {_REPLACED_BY}")
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
    non_finite = non_finite_numbers(config)
    problems = [
        f"config key {key}: {value} is not a finite number (NaN and infinity are refused)"
        for key, value in non_finite
    ] + [_describe(e) for e in errors]
    keys = [tuple(key.split(".")) for key, _ in non_finite if key != "<top level>"]
    keys += [path for e in errors for path in _error_keys(e)]
    if len(problems) == 1:  # the usual case: one line naming the key
        raise ConfigError(problems[0], keys=keys)
    if problems:
        detail = "\n".join(f"  - {p}" for p in problems[:10])
        raise ConfigError(
            f"invalid workflow config ({len(problems)} problem(s)):\n{detail}", keys=keys
        )
    return config


def load_config(path: str | os.PathLike) -> dict:
    """Read a YAML config file and validate it against the schema (defaults filled)."""
    return load_configs([path])


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


# A key ending in ADD_SUFFIX adds to a list: `models+: [convnext_mini]` appends to `models`.
# A suffix, not a YAML form of its own: Snakemake's --configfile merge replaces a list by what a
# later file gives (a mapping included), but keeps a key of another name beside it, so the
# addition reaches the config intact and is resolved there (resolve_additions).
ADD_SUFFIX = "+"

# A config file as read: (its name as given, its content), in --configfile order.
Source = tuple[str, Mapping]


def config_sources(paths: Sequence[str | os.PathLike]) -> list[Source]:
    """Each config file of ``paths`` read (:func:`read_config_file`), with its name."""
    return [(str(path), read_config_file(path)) for path in paths]


def shown_path(path: str | os.PathLike) -> str:
    """``path`` as a message names it: relative to the working directory when it lies below it
    (Snakemake holds its ``--configfile`` paths made absolute), else as it is."""
    given = Path(path)
    if given.is_absolute():
        try:
            return str(given.relative_to(Path.cwd()))
        except ValueError:
            pass
    return str(given)


def _value_at(node: Any, path: Sequence) -> tuple[bool, Any]:
    """(found, value) of key path ``path`` in ``node`` (a list item by its index)."""
    for part in path:
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and str(part).isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def _schema_at(path: Sequence[str]) -> Mapping | None:
    """The schema of the concrete key path ``path`` (a named entry's key, as ``datasets.mine``,
    through its section's ``additionalProperties``), else None. Reads YAML only."""
    try:
        return schema_node(".".join(map(str, path)), concrete=True)
    except ConfigError:
        return None


def _is_list_schema(schema: Mapping) -> bool:
    types = schema.get("type")
    return "array" in (types if isinstance(types, list) else [types])


def _list_keys(path: Sequence[str]) -> list[str]:
    """The keys of the section at ``path`` whose values are lists (schema), for a hint."""
    section = _schema_at(path) if path else load_schema(MAIN_SCHEMA)
    props = section.get("properties", {}) if section else {}
    return [n for n in props if (sub := _schema_at((*path, n))) and _is_list_schema(sub)]


_KINDS = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"))


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a section (a mapping of keys)"
    word = next((word for kind, word in _KINDS if isinstance(value, kind)), None)
    return f"{word} ({value!r})" if word else repr(value)


def resolve_additions(config: dict, sources: Sequence[Source] = ()) -> dict:
    """``config`` (merged from ``sources``, as ``--configfile`` merges them) with each addition
    resolved, in place: a key ``KEY+`` (:data:`ADD_SUFFIX`) holds a list of items appended to
    the list ``KEY``. The files are read in order, later files winning key by key: a file's
    whole ``KEY`` replaces the list (additions of the files before it included), a file's
    ``KEY+`` appends its items to the list as the files before it left it, or, where none gave
    it, to the schema's default. Snakemake's merge keeps only the last file's ``KEY+`` and
    ``KEY``, so each file's own are read from ``sources``. Refused in one line naming the file
    (and the key path): a file giving both ``KEY`` and ``KEY+``, ``KEY`` no list the schema
    knows (with the closest list key), ``KEY`` not a list, ``KEY+`` holding no list, an item
    already in the list (an addition that would list it twice). Run by the workflow and by
    ``imagenot validate-config`` alike, before validation (:func:`check_config_files`)."""
    plugins = f"plugins{ADD_SUFFIX}"
    if plugins in config:  # first: the plugins register names a list's default may hold
        _add(config, (), plugins, sources, config)
    _resolve_in(config, (), sources, config)
    return config


def _resolve_in(node: dict, at: tuple, sources: Sequence[Source], root: dict) -> None:
    for key in list(node):
        if key not in node:
            continue
        if isinstance(key, str) and len(key) > len(ADD_SUFFIX) and key.endswith(ADD_SUFFIX):
            _add(node, at, key, sources, root)
        elif isinstance(node[key], dict):
            _resolve_in(node[key], (*at, key), sources, root)


_MISSING = object()
_BOTH = (
    "{target} is given beside it: give the whole list ({base}: [...]) or the items to add "
    "({key}: [...]) in one file, not both"
)


def _add(node: dict, at: tuple, key: str, sources: Sequence[Source], root: dict) -> None:
    """Resolve the addition ``key`` of ``node``: each file in order replaces the list
    (``KEY``, whole) or appends to it (``KEY+``), from the schema's default; the merged
    config's own ``KEY`` and ``KEY+`` come last where they differ from the files' (Snakemake's
    ``--config`` on the command line; with no sources, the config itself).
    One source giving both is refused."""
    base = key[: -len(ADD_SUFFIX)]
    target = ".".join(map(str, (*at, base)))

    def refuse(name: str | None, why: str) -> ConfigError:
        where = f"{name}: " if name else ""
        return ConfigError(f"{where}config key {target}{ADD_SUFFIX}: {why}", names_file=True)

    steps: list[tuple[str | None, bool, Any]] = []  # (file, adds, value), in order
    for name, content in [*sources, ("--config" if sources else None, None)]:
        given = []
        for adds, part in ((False, base), (True, key)):
            if content is None:  # the merged config's own, where it differs from the files'
                last = next((v for _, a, v in reversed(steps) if a == adds), _MISSING)
                found, value = part in node and node[part] != last, node.get(part)
            else:
                found, value = _value_at(content, (*at, part))
            given += [(name, adds, value)] if found else []
        if len(given) == 2:
            raise refuse(name, _BOTH.format(target=target, base=base, key=key))
        steps += given
    for name, adds, items in steps:
        if adds and not isinstance(items, list):
            raise refuse(
                name,
                f"the items to add to {target} are a list ({base}{ADD_SUFFIX}: [...]), got "
                f"{_kind(items)}",
            )
    out: Any = _MISSING
    for name, adds, value in steps:
        if not adds:  # a whole list: it replaces what the files before gave or added
            out = copy.deepcopy(value)
            continue
        if out is _MISSING:
            out = _default_list(at, base, target, root, lambda why, n=name: refuse(n, why))
        if not isinstance(out, list):
            raise refuse(name, f"{target} is {_kind(out)}, not a list: {ADD_SUFFIX} adds to a list")
        for item in value:
            if item in out:
                raise refuse(name, f"{item!r} is already in {target} (an item is listed once)")
            out.append(copy.deepcopy(item))
    node[base] = out
    del node[key]


def _default_list(at: tuple, base: str, target: str, root: dict, refuse) -> list:
    """The schema's default of the list ``base`` at ``at``, which an addition no file's whole
    list precedes adds to; refused (``refuse(why)``) where the schema has no such list."""
    schema = _schema_at((*at, base))
    if schema is None:
        match = did_you_mean(base, _list_keys(at))
        hint = f" (did you mean {'.'.join(map(str, (*at, match)))}{ADD_SUFFIX}?)" if match else ""
        raise refuse(f"no list {target} to add to{hint}")
    if not _is_list_schema(schema):
        raise refuse(
            f"{target} is not a list (schema type {schema.get('type')!r}): {ADD_SUFFIX} adds to a "
            "list"
        )
    if "default" in schema and isinstance(root.get("plugins"), list):
        from imagenot.core.registries import load_plugins

        load_plugins(root["plugins"])  # a default of registered names lists theirs too
        schema = _schema_at((*at, base)) or schema
    return copy.deepcopy(schema.get("default", []))


def read_config_files(paths: Sequence[str | os.PathLike]) -> dict:
    """The config files ``paths`` merged in order, as ``--configfile`` merges them (a base, then
    overlays that change a few keys; later files win key by key), additions resolved
    (:func:`resolve_additions`); not validated."""
    sources = config_sources(paths)
    return resolve_additions(merge_sources(sources), sources)


def merge_sources(sources: Sequence[Source]) -> dict:
    """The contents of ``sources`` merged in order, as ``--configfile`` merges them (a copy:
    the sources are left as read)."""
    config: dict = {}
    for _, content in sources:
        config = merge_configs(config, copy.deepcopy(content))
    return config


def _files_of(exc: BaseException, sources: Sequence[Source]) -> list[str]:
    """The config files a refusal is about: for each key it names, the last file that gives it
    (the value that won the merge) or, for an item of a list that no file gives at that index
    (one a file added), the last file that gives or adds to that list; else every file."""
    names = [name for name, _ in sources]
    keys = getattr(exc, "keys", None) or [
        # a stage's cross-key check names its key in the house form, "config key a.b.c: ..."
        tuple(key.split("."))
        for key in re.findall(r"config key ([\w.+-]*[\w+])", str(exc))
    ]
    files: list[str] = []
    for key in keys:
        givers = [name for name, content in sources if _value_at(content, key)[0]]
        index = next((i for i, part in enumerate(key) if str(part).isdigit()), None)
        if not givers and index:  # an item of the list key[:index], added by a file
            *parents, listed = key[:index]
            givers = [
                name
                for name, content in sources
                if any(
                    _value_at(content, (*parents, part))[0]
                    for part in (listed, f"{listed}{ADD_SUFFIX}")
                )
            ]
        if not givers:
            return names
        if givers[-1] not in files:
            files.append(givers[-1])
    return files or names


def check_config_files(config: dict, sources: Sequence[Source], check) -> dict:
    """The one way the workflow (rules/common.smk) and ``imagenot validate-config`` check a
    config: ``config``, merged from ``sources`` (each config file read, in ``--configfile``
    order), with its additions resolved (:func:`resolve_additions`), then ``check`` (the
    workflow's config check, :func:`imagenot.core.stages.check_workflow_config`: a callable, so that
    this module imports no stage plan). A refusal is a ConfigError whose message starts with
    the file it is about: the file that gives the key a schema error names, else every file."""
    try:
        return check(resolve_additions(config, sources))
    except ValueError as exc:
        if getattr(exc, "names_file", False) or not sources:
            raise
        raise ConfigError(f"{', '.join(_files_of(exc, sources))}: {exc}", names_file=True) from exc


def load_configs(paths: Sequence[str | os.PathLike]) -> dict:
    """The config files ``paths`` merged (:func:`read_config_files`) and validated against the
    schema (defaults filled); an error names the file (:func:`check_config_files`)."""
    sources = config_sources(paths)
    return check_config_files(merge_sources(sources), sources, validate_config)


def schema_node(key: str, concrete: bool = False) -> Mapping[str, Any]:
    """The schema of config key ``key`` (dotted: ``laion.batch_rows``; a part in braces, as in
    ``datasets.{dataset}``, is any name of a mapping section: its ``additionalProperties``;
    ``concrete``: so is a name that is no property). Follows the stage schemas' ``$ref``
    ("#/$defs/x" in the file it is read from, "other.schema.yaml", or both); reads YAML only
    (no validation)."""
    document: Any = load_schema(MAIN_SCHEMA)  # the file a local "#/$defs/..." $ref points into
    node: Any = document
    for part in key.split("."):
        node = node if isinstance(node, Mapping) else {}
        entry = node.get("additionalProperties")
        if (concrete and part not in node.get("properties", {})) or part[:1] + part[-1:] == "{}":
            if not isinstance(entry, Mapping):
                raise ConfigError(f"config key {key}: {part} is not a named-entry section")
            node = entry
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        else:
            raise ConfigError(f"config key {key}: no such key in the schema ({part!r})")
        if isinstance(node, Mapping) and "$ref" in node:
            file, _, fragment = node["$ref"].partition("#")
            if file:
                document = load_schema(file.rsplit("/", 1)[-1])
            target = document
            for name in filter(None, fragment.split("/")):
                target = target[name]
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
