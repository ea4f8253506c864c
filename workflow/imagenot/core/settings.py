"""One settings object per rule.

Why: a config key spelled again at every hop (schema, shell string, argparse flag, function
keyword), each hop with a default of its own, lets the defaults drift apart. So each stage's
``settings.py`` holds its
rules' settings classes (frozen dataclasses deriving :class:`FromConfig`); a class's field names
*are* the schema's keys, and its one ``from_config(config, **wildcards)`` builds it from the
validated config (defaults live in the schema only). The rule hands the object over as one JSON
argument (:func:`to_arg`), the command parses it back (:func:`parse`), and the library functions
take the object itself, never its fields re-spelled as keyword arguments. The dataclass has no
defaults: a key the plan forgot, or one the command does not know, is an error naming the key,
never a silent fallback. ``tests/test_settings_schema.py`` walks every class against the schema.

Flag-by-flag argparse stays only for commands people type by hand (``rankings``,
``validate-config``, ``match``, ...).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from imagenot.core.typed_json import JsonError, read_object

T = TypeVar("T")
F = TypeVar("F", bound="FromConfig")


class SettingsError(JsonError):
    """A rule's settings argument does not match its dataclass (one line, names the key)."""


class FromConfig:
    """Base of every rule's settings dataclass (module docstring).

    A field is one of three things, and the class says which:

    - a **config key**: its name is a key of one of ``SECTIONS`` (dotted config paths, which may
      name the rule's wildcards: ``"datasets.{dataset}"``), and of one only, unless the class
      lists it in ``DATASET_OVERRIDES``: then the first section that holds the key in the
      validated config gives the value. So ``SECTIONS = ("datasets.{dataset}", "acquire")`` with
      ``DATASET_OVERRIDES = ("image_size",)`` reads a dataset's own ``image_size`` where it sets
      one, else ``acquire.image_size`` (whose default the schema fills). Why declared: a key
      taken from whichever section holds it first once let ``datasets.<name>.allow_fewer``
      (acquisition's, images short) switch off curation's stop for classes short as well;
      ``tests/test_settings_schema.py`` fails on a key two of a class's sections hold without
      the declaration, and here a config in which two do is an error naming the key;
    - a **wildcard** of the rule (``WILDCARDS``), passed to :meth:`from_config` by name;
    - **derived** (``DERIVED``: field -> why), computed by the class's own :meth:`from_config`
      from config keys (``per_class = ceil(images_per_class * (1 + oversample))``).

    The default :meth:`from_config` handles the first two; a class with derived fields overrides
    it, calls :meth:`config_values` and adds them.
    """

    SECTIONS: ClassVar[tuple[str, ...]] = ()
    DATASET_OVERRIDES: ClassVar[tuple[str, ...]] = ()
    WILDCARDS: ClassVar[tuple[str, ...]] = ()
    DERIVED: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def config_values(cls, config: Mapping[str, Any], **wildcards: Any) -> dict[str, Any]:
        """Every config-key and wildcard field's value (derived fields left out)."""
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            name = field.name
            if name in cls.WILDCARDS and name not in wildcards:
                raise SettingsError(f"{cls.__name__}.from_config: wildcard {name!r} not given")
            if name in cls.WILDCARDS:
                values[name] = wildcards[name]
            elif name not in cls.DERIVED:
                override = name in cls.DATASET_OVERRIDES
                values[name] = config_lookup(
                    config, cls.SECTIONS, name, wildcards, cls.__name__, override=override
                )
        return values

    @classmethod
    def from_config(cls: type[F], config: Mapping[str, Any], **wildcards: Any) -> F:
        """This rule's settings from the validated config and the job's wildcards."""
        return cls(**cls.config_values(config, **wildcards))


class PerDataset:
    """Mixin of the settings of a rule per dataset: ``from_config`` takes the ``dataset``
    wildcard by name, positionally too (``Settings.from_config(config, dataset)``), which the
    ``"datasets.{dataset}"`` section (the dataset's own value of a key, else the stage's) needs."""

    @classmethod
    def from_config(cls, config, dataset: str):
        return cls(**cls.config_values(config, dataset=dataset))  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True)
class Style(FromConfig):
    """Figure size, font and resolution, and the models a crowded figure names:
    ``analyse.figure_options``, the style every figure shares (:mod:`imagenot.core.figure_style`)."""

    SECTIONS: ClassVar = ("analyse.figure_options",)

    width_in: float
    font_size: float
    dpi: int
    top: int
    highlight: list[str]

    @classmethod
    def schema_defaults(cls) -> Style:
        """The style of a config that sets nothing (``imagenot rankings --report``'s, before
        its flags)."""
        from imagenot.core.config import schema_default

        section = cls.SECTIONS[0]
        return cls(
            **{f.name: schema_default(f"{section}.{f.name}") for f in dataclasses.fields(cls)}
        )

    @property
    def column_in(self) -> float:
        """Width of a single-column figure (half the text width, a little more for labels)."""
        return self.width_in * 0.55


def config_lookup(
    config: Mapping[str, Any],
    sections: tuple[str, ...],
    key: str,
    wildcards: Mapping[str, Any],
    owner: str = "settings",
    *,
    override: bool,
) -> Any:
    """``key`` from the one of ``sections`` (dotted paths, formatted with ``wildcards``) that
    holds it in ``config``, or with ``override`` (a dataset's own value of a stage's key) from
    the first that does; an error naming the key when none does (a config that skipped
    validation, whose defaults were never filled) or when two do without ``override`` (two
    meanings of one name: :class:`FromConfig`)."""
    holders = []
    for section in sections:
        where = section.format(**wildcards)
        node: Any = config
        for part in where.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if isinstance(node, Mapping) and key in node:
            holders.append((where, node[key]))
    if len(holders) > 1 and not override:
        both = " and ".join(f"{where}.{key}" for where, _ in holders)
        raise SettingsError(
            f"{owner}: config keys {both} both set {key}; a class reads a key from one section "
            "unless it lists the key in DATASET_OVERRIDES"
        )
    if holders:
        return holders[0][1]
    where = " or ".join(f"{s}.{key}" for s in sections) or key
    raise SettingsError(f"{owner}: config key {where} is missing (was the config validated?)")


def omitted_when(empty: Any) -> dict:
    """A field's metadata: the field is left out of the settings' JSON while it equals ``empty``
    (None, ``{}``) and read back as ``empty`` when absent, so that adding such a field to a
    rule's settings reruns only the jobs that set it, not every finished job of the rule
    (Snakemake compares the text). Not a default: the settings object always sets it."""
    return {"omitted_when": empty}


def to_json(settings: Mapping[str, Any] | Any) -> str:
    """A settings dict (or dataclass) as compact, key-sorted JSON: the same config gives the same
    text, so Snakemake's params-change detection reruns a job exactly when its settings change.
    A dataclass field marked :func:`omitted_when` is left out while empty."""
    if dataclasses.is_dataclass(settings) and not isinstance(settings, type):
        empty = [
            f.name
            for f in dataclasses.fields(settings)
            if "omitted_when" in f.metadata
            and getattr(settings, f.name) == f.metadata["omitted_when"]
        ]
        settings = {k: v for k, v in dataclasses.asdict(settings).items() if k not in empty}
    return json.dumps(settings, sort_keys=True, separators=(",", ":"))


def to_arg(settings: Mapping[str, Any] | Any) -> str:
    """:func:`to_json`, shell-quoted for a rule's ``shell:`` line."""
    return shlex.quote(to_json(settings))


def load(text: str, *, what: str = "--settings") -> dict:
    """The JSON object in ``text``; ``@path`` reads it from a file (for settings too long for a
    command line)."""
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SettingsError(f"{what}: cannot read {path}: {exc.strerror}") from None
        what = f"{what} {path}"
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise SettingsError(f"{what} must be a JSON object, not {type(raw).__name__}")
    return raw


def parse(cls: type[T], text: str | Mapping[str, Any], *, what: str = "--settings") -> T:
    """``text`` (JSON, ``@file`` or an already-loaded mapping) as a ``cls`` instance, read by
    :func:`imagenot.core.typed_json.read_object`: every field must be given and no other key, and
    every value has its field's type all the way down (an int is a valid float and becomes
    one; ``X | None`` accepts null; nested dataclasses, lists and dicts are checked element by
    element). A field with a default may be omitted: use that for values the command, not the
    config, decides. The error names ``what`` (the flag, and the file of ``@file``) and the
    key."""
    raw = dict(text) if isinstance(text, Mapping) else load(text, what=what)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if "omitted_when" in f.metadata and f.name not in raw:
            raw[f.name] = copy.deepcopy(f.metadata["omitted_when"])
    source = f"{what} {text[1:]}" if isinstance(text, str) and text.startswith("@") else what
    try:
        return read_object(cls, raw, source=source)
    except JsonError as exc:
        raise SettingsError(str(exc)) from None


def parse_or_exit(cls: type[T], text: str, command: str) -> T:
    """:func:`parse` for a command's ``main``: a wrong key exits with one line naming the command
    and the key (``imagenot <command>: ...``), no traceback."""
    try:
        return parse(cls, text)
    except SettingsError as exc:
        raise SystemExit(f"imagenot {command}: {exc}") from None


# Names of schema keys used for something else (tests/test_settings_schema.py's guard): the
# cost plan's reading of a dry run's jobs and of optional dataset keys; the dataset reader's
# choice of split.
_PER_MODEL_GPUS = "the model whose GPUs per job are asked for (train.gpus_per_job_overrides)"
_PER_MODEL = (
    "estimate:job_gpus experiments:gpus experiments:gpus_per_node experiments:nodes "
    "launch:launcher resources:slot_mem_mb resources:slot_threads resources:threads"
)
NOT_SETTINGS = {
    **{f"imagenot.train.{f}(model)": _PER_MODEL_GPUS for f in _PER_MODEL.split()},
    "imagenot.core.dataset:read_manifest(split)": "which split to read, not acquire's split sizes",
    "imagenot.plan.costs:.get('mem_mb')": "a dry-run job's resources, not resources.<rule>.mem_mb",
    "imagenot.plan.costs:.get('n_shards')": "laion.n_shards has no default (laion.shards instead)",
    "imagenot.analyse.transfer:.get('protocol')": "a comparison's protocol in the summary layout",
    "imagenot.plan.planning:.get('gpu')": "a dry-run job's GPU request, not resources.classes.gpu",
    "imagenot.plan.measured:.get('gpu')": "the GPU a preflight report names, not a config key",
    "imagenot.run.run_summary:.get('download')": "a dataset's download record in the run summary",
    "imagenot.run.run_summary:.get('weights')": "the weights a published run's result.json names",
    "imagenot.core.dataset:folder_of(classes)": "the classes.txt handed to a command, not a key",
    "imagenot.train.trials:.get('hyperparameters')": "a definition's or result's, not a space's",
    "imagenot.train.trials:.get('budget')": "a preregistered definition's, not a space's",
    "imagenot.train.trials:.get('seed')": "a definition's or result's, not the config's seed",
    "imagenot.core.config:.get('plugins')": "the merged files' plugins, before validation",
    "imagenot.plan.schedule:recommend(gpus)": "the plan's --gpus, not resources.gpus",
}
