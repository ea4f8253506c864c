"""JSON in and out of frozen dataclasses, driven by their type hints: one reader for every file
or argument the package reads as a typed object (a rule's ``--settings``, a rankings report).

Why: a value read from JSON is checked against its field's type on the way in, so a missing,
unknown or mistyped key is one :class:`JsonError` naming the source (a file, a flag) and the
dotted key, not a ``KeyError`` or a wrong type three modules later. Why hand-written rather
than pydantic (installed): every job is a short process, and ``from pydantic import
TypeAdapter`` took 116-192 ms plus 39-79 ms to build the report's schema, against 33 ms for
this module's import (pydantic 2.14.3, 5 runs on a loaded 2-core machine); and the report's
conventions below (flat sections, ``{}`` for None, an int kept as written) would need a
serializer on every class, where here they are field metadata, read and written in one place.

Reading (:func:`read`, :func:`read_object`):

- ``bool``, ``int``, ``str`` take exactly their JSON kind (true is not an integer); ``float``
  takes any number and gives a float, :data:`Real` any number kept as written;
- ``X | None`` takes null; a union takes the option of the value's own JSON kind;
- ``list[X]``, ``tuple[X, ...]``, ``dict[str, X]`` (``Mapping``) check every element;
  ``Any`` (and bare ``list``, ``dict``) take any JSON;
- a dataclass takes an object with every field without a default, and no other key.

Writing (:func:`write_fields`): field order is key order; a field with the default None is
absent while None, unless :data:`WRITTEN_IF` says when it is written; :data:`FLAT` and
:data:`EMPTY_IS_NONE` below.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")

Real = int | float
"""A number kept as JSON wrote it: an int stays an int, so a file read and written again is the
same bytes. A plain ``float`` field converts an int, so that ``0`` and ``0.0`` in a config give
the same settings object (a training job's identity is the JSON of its parsed settings)."""

FLAT = "flat"
"""Field metadata: the nested object's keys are written into (and read from) its parent."""
WRITTEN_IF = "written_if"
"""Field metadata: ``predicate(obj)``, whether an optional field is written (even as null)."""
EMPTY_IS_NONE = "empty_is_none"
"""Field metadata: None is written as ``{}`` (and ``{}`` read as None; null is refused)."""

_NONE = type(None)


class JsonError(ValueError):
    """JSON that does not match its type; one line naming the source and the key."""


def read(value: Any, hint: Any, *, source: str, at: str = "") -> Any:
    """``value`` (parsed JSON) as the type ``hint``, checked all the way down; ``source`` (a
    file, a flag) and ``at`` (the dotted key of ``value`` in it, "" = the whole) name it in a
    :class:`JsonError`."""
    if hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _union(value, hint, args, source, at)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return read_object(hint, value, source=source, at=at)
    container = origin or hint
    if container in (list, tuple):
        if not isinstance(value, list | tuple):
            raise _wrong(value, hint, source, at)
        if container is tuple and args and args[1:] != (...,):
            raise TypeError(f"typed JSON reads tuple[X, ...], not {hint!r}")
        item = args[0] if args else Any
        items = [read(v, item, source=source, at=f"{at}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if container is tuple else items
    if container in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise _wrong(value, hint, source, at)
        item = args[1] if args else Any
        return {k: read(v, item, source=source, at=_at(at, k)) for k, v in value.items()}
    if _hint_kind(hint) != _kind(value) or (hint is int and not isinstance(value, int)):
        raise _wrong(value, hint, source, at)
    return float(value) if hint is float else value


def read_object(cls: type[T], obj: Any, *, source: str, at: str = "") -> T:
    """The ``cls`` instance of the JSON object ``obj`` (:func:`read`); every key missing or
    unknown at this level is named at once, in one line."""
    if not isinstance(obj, Mapping):
        raise _wrong(obj, cls, source, at)
    hints = _hints(cls)
    flat: dict[str, tuple[type, list[str]]] = {}
    names, missing = [], []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.metadata.get(FLAT):
            sub = _not_none(hints[f.name])
            keys = [g.name for g in dataclasses.fields(sub)]
            names += keys
            if _required(f) or any(k in obj for k in keys):  # read: its missing keys named here
                flat[f.name] = (sub, keys)
                missing += [
                    _at(at, g.name)
                    for g in dataclasses.fields(sub)
                    if g.name not in obj and _required(g)
                ]
            continue
        names.append(f.name)
        if f.name not in obj and _required(f):
            missing.append(_at(at, f.name))
    unknown = [_at(at, k) for k in obj if k not in names]
    if unknown or missing:
        found = [
            f"{what} key(s) {keys}"
            for what, keys in (("unknown", unknown), ("missing", missing))
            if keys
        ]
        takes = f"; {cls.__name__} takes keys {names}" if unknown else ""
        raise JsonError(f"{source}: {', '.join(found)}{takes}")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in flat:
            sub, keys = flat[f.name]
            part = {k: obj[k] for k in keys if k in obj}
            values[f.name] = read_object(sub, part, source=source, at=at)
        elif f.name in obj:
            value, hint = obj[f.name], hints[f.name]
            if f.metadata.get(EMPTY_IS_NONE):
                if value == {}:
                    values[f.name] = None
                    continue
                hint = _not_none(hint)
            values[f.name] = read(value, hint, source=source, at=_at(at, f.name))
    return cls(**values)


def write_fields(obj: Any) -> dict[str, Any]:
    """The dataclass instance ``obj`` as a JSON-ready dict (module docstring: how each field is
    written); a nested dataclass with a ``to_json`` method writes itself."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if not _written(obj, f, value):
            continue
        if f.metadata.get(FLAT):
            out.update(_plain(value))
        elif value is None and f.metadata.get(EMPTY_IS_NONE):
            out[f.name] = {}
        else:
            out[f.name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_json = getattr(value, "to_json", None)
        return to_json() if to_json is not None else write_fields(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _written(obj: Any, f: dataclasses.Field, value: Any) -> bool:
    if WRITTEN_IF in f.metadata:
        return f.metadata[WRITTEN_IF](obj)
    return value is not None or _required(f) or bool(f.metadata.get(EMPTY_IS_NONE))


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _union(value: Any, hint: Any, args: tuple, source: str, at: str) -> Any:
    """The option of ``value``'s own JSON kind says best what is wrong inside it (an object's
    wrong key, not "must be an object or null"); numbers try ``int`` before ``float``."""
    if value is None and _NONE in args:
        return None
    kind = _kind(value)
    options = [a for a in args if a is not _NONE and _hint_kind(a) in (kind, "any")]
    if len(options) == 1 and kind in ("object", "list"):
        return read(value, options[0], source=source, at=at)
    for option in options:
        try:
            return read(value, option, source=source, at=at)
        except JsonError:
            continue
    raise _wrong(value, hint, source, at)


def _not_none(hint: Any) -> Any:
    """``X`` of ``X | None``."""
    options = [a for a in typing.get_args(hint) if a is not _NONE]
    return options[0] if options else hint


def _at(at: str, name: str) -> str:
    """The dotted key of ``name`` inside the key ``at`` ("" = the whole)."""
    return f"{at}.{name}" if at else name


def _wrong(value: Any, hint: Any, source: str, at: str) -> JsonError:
    where = f"key {at} " if at else ""
    return JsonError(f"{source}: {where}must be {_names(hint)}, not {_shown(value)}")


# Each JSON kind: the Python types of its values (bool before the numbers it subclasses), and
# what it is called in a message.
_KINDS = {
    "object": ((Mapping,), "an object"),
    "list": ((list, tuple), "a list"),
    "boolean": ((bool,), "true or false"),
    "null": ((_NONE,), "null"),
    "number": ((int, float), "a number"),
    "string": ((str,), "a string"),
}


def _kind(value: Any) -> str:
    """The JSON kind of a value."""
    return next(
        (kind for kind, (types_, _) in _KINDS.items() if isinstance(value, types_)), "other"
    )


def _hint_kind(hint: Any) -> str:
    """The JSON kind of the values a type hint takes ("any" for ``Any``)."""
    if hint is Any:
        return "any"
    origin = typing.get_origin(hint) or hint
    if origin is dict or dataclasses.is_dataclass(origin):
        return "object"
    kind = next((kind for kind, (types_, _) in _KINDS.items() if origin in types_), None)
    if kind is None:
        raise TypeError(f"typed JSON has no reading of the type {hint!r}")
    return kind


def _names(hint: Any) -> str:
    """What a type hint takes, in words (``int | float``: "a number")."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = typing.get_args(hint) if union else (hint,)
    words = [_word(a) for a in options if not (a is int and float in options)]
    return " or ".join(dict.fromkeys(words))


def _word(hint: Any) -> str:
    if hint is int:
        return "an integer"
    return "any JSON" if hint is Any else _KINDS[_hint_kind(hint)][1]


def _shown(value: Any) -> str:
    """``value`` as JSON, cut to 40 characters."""
    text = json.dumps(value, default=repr)
    return text if len(text) <= 40 else text[:37] + "..."
