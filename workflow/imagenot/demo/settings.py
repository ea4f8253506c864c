"""The settings objects of the demo and scale worlds' rules (``demo-world``,
``scale-world-shard``): their config sections as frozen dataclasses.

Why: a world builder reading a dict turns a key misspelt in code into a KeyError deep in a run,
and a key the schema dropped goes unnoticed. Each class's fields are its section's keys;
:meth:`FromConfig.from_config` reads them from the validated config for the rule, and the
commands complete a hand-typed, partial section with the schema's defaults
(:func:`section_settings`) and parse it strictly: no field has a default of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from imagenot.core.settings import FromConfig

T = TypeVar("T")


@dataclass(frozen=True)
class DemoSettings(FromConfig):
    """The ``demo_world`` section but ``enabled`` (which only the plan reads)."""

    SECTIONS: ClassVar = ("demo_world",)

    seed: int
    rows_per_shard: int
    image_size: int
    jpeg_quality: int
    url_base: str
    n_survivors: int
    n_imagenet_classes: int
    n_shares_imagenet_lemma: int
    n_rare: int
    n_ancestors: int
    n_nsfw: int
    n_low_similarity: int
    captions_per_class_min: int
    captions_per_class_max: int
    captions_per_hazard_class: int
    rare_captions_max: int
    incidental_fraction: float
    two_class_captions: int
    label_noise: float
    broken_url_fraction: float
    corrupt_fraction: float
    non_image_fraction: float
    nsfw_image_fraction: float
    n_reference_copies: int
    n_within_copies: int
    n_lookalikes: int


@dataclass(frozen=True)
class ScaleSettings(FromConfig):
    """The ``scale_world`` section but ``enabled``, ``captions`` (the rule's input file) and
    ``captions_only`` (which only the plan reads)."""

    SECTIONS: ClassVar = ("scale_world",)

    seed: int
    rows_per_shard: int
    row_group_rows: int
    url_base: str
    n_synsets: int
    n_imagenet_classes: int
    zipf_exponent: float
    web_fraction: float
    web_lemma_fraction: float
    two_class_fraction: float
    no_noun_fraction: float
    filler_words_min: int
    filler_words_max: int
    nsfw_image_fraction: float


def section_settings(
    cls: type[T], text: str | Mapping[str, Any], schema: str, section: str, **overrides: Any
) -> T:
    """``cls`` from ``--settings`` JSON (or its loaded object): the rule's complete section, or a
    partial one typed by hand, completed with the schema's defaults (``schema``, the section's schema file) and
    validated there (an unknown key or a wrong value names the key), then parsed strictly."""
    from imagenot.core.config import ConfigError, validate_config
    from imagenot.core.settings import load, parse

    raw = {**(load(text) if isinstance(text, str) else text), **overrides}
    try:
        complete = validate_config(raw, schema=schema)
    except ConfigError as exc:
        raise ConfigError(f"{section}: {exc}") from exc
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return parse(cls, {k: v for k, v in complete.items() if k in names})
