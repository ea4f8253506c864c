"""Config lookups for the scale world's rule (pure functions of the workflow config).

The scale world writes its shards where the ``laion`` section says the LAION shards are, under
the names ``laion.shard_pattern`` gives for i = 0 .. ``laion.n_shards`` - 1 (the real laion2B-en
names in config/scale.yaml). Taking names and count from ``laion`` keeps one source of truth: the
curation rules read exactly the files this rule writes, whatever their own wildcards look like.
rules/scale.smk calls these; Snakemake files themselves define no functions.
"""

from __future__ import annotations

import os
import re
import string

from imagenot.core import paths
from imagenot.curate import paths as curate_paths

SCALE_DIR = f"{paths.RESULTS}/scale_world"
LAION_DIR = f"{SCALE_DIR}/laion"


class ScaleConfigError(ValueError):
    """The scale_world and laion sections do not fit together."""


def enabled(config: dict) -> bool:
    """Whether this config builds the scale world."""
    return config["scale_world"]["enabled"]


def _pattern_parts(pattern: str) -> tuple[str, str, str]:
    """(prefix, format spec of field ``i``, suffix) of a shard pattern with one field ``i``."""
    parts = list(string.Formatter().parse(pattern))
    fields = [i for i, (_, name, _, _) in enumerate(parts) if name is not None]
    if len(fields) != 1 or parts[fields[0]][1] != "i":
        raise ScaleConfigError(
            f"config key laion.shard_pattern {pattern!r}: the scale world needs exactly one "
            "field {i...} (the shard index)"
        )
    at = fields[0]
    prefix = "".join(literal for literal, *_ in parts[: at + 1])
    return prefix, parts[at][2], "".join(literal for literal, *_ in parts[at + 1 :])


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def output_pattern(config: dict) -> str:
    """The rule's output: ``<laion.dir>/<pattern with the index as wildcard {shard}>``."""
    prefix, _, suffix = _pattern_parts(config["laion"]["shard_pattern"])
    return f"{_escape(LAION_DIR)}/{_escape(prefix)}{{shard}}{_escape(suffix)}"


def shard_constraint(config: dict) -> str:
    """Wildcard constraint of the rule's ``{shard}``: the index as the pattern formats it."""
    _, spec, _ = _pattern_parts(config["laion"]["shard_pattern"])
    return "[0-9]+" if re.fullmatch(r"0?\d*d?", spec) else ".+"


def captions_path(config: dict) -> str:
    """The real web captions the scale world resamples (an input of every shard job): a relative
    path missing from the working directory is the clone's file (:func:`imagenot.core.paths.shipped`:
    config/scale.yaml's ``resources/captions/...``)."""
    return paths.shipped(config["scale_world"]["captions"])


def shard_index(shard: str) -> int:
    """The shard index from the rule's wildcard (``00042`` -> 42)."""
    return int(shard)


def shard_files(config: dict) -> list[str]:
    """Paths of every shard of the scale world (those the curation rules read)."""
    pattern = config["laion"]["shard_pattern"]
    return [f"{LAION_DIR}/{pattern.format(i=i)}" for i in range(config["laion"]["n_shards"])]


def check(config: dict) -> None:
    """Stop before any job runs if the scale world would be written where nobody reads it."""
    if not enabled(config):
        return
    laion = config["laion"]
    if laion["dir"].rstrip("/") != LAION_DIR:
        raise ScaleConfigError(
            f"config key laion.dir is {laion['dir']!r}: with scale_world.enabled it must be "
            f"{LAION_DIR!r} (where the scale world writes its shards)"
        )
    if laion["shards"]:
        raise ScaleConfigError(
            "config key laion.shards: the scale world names its shards from laion.shard_pattern "
            "and laion.n_shards; leave laion.shards empty"
        )
    if config["demo_world"]["enabled"]:
        raise ScaleConfigError(
            "config keys demo_world.enabled and scale_world.enabled: enable one world, not both"
        )
    _pattern_parts(laion["shard_pattern"])
    cfg = config["scale_world"]
    captions = captions_path(config)
    if not os.path.isfile(captions):
        raise ScaleConfigError(f"config key scale_world.captions: no file {captions}")
    if cfg["filler_words_min"] > cfg["filler_words_max"]:
        raise ScaleConfigError("config key scale_world.filler_words_min is above filler_words_max")
    shares = ("web_fraction", "web_lemma_fraction", "two_class_fraction", "no_noun_fraction")
    if sum(cfg[k] for k in shares) > 1:
        raise ScaleConfigError(f"config keys scale_world.{{{','.join(shares)}}} sum above 1")


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``: the shards when the scale world is enabled."""
    return shard_files(config) if enabled(config) else []


def run_targets(config: dict) -> list[str]:
    """What a scale run builds: each LAION-built dataset's manifest, or its caption selection
    when ``scale_world.captions_only`` (images are then never fetched)."""
    names = [n for n, spec in config["datasets"].items() if spec["kind"] == "laion"]
    if config["scale_world"]["captions_only"]:
        return [curate_paths.SELECTION.format(dataset=n) for n in names]
    return [paths.MANIFEST.format(dataset=n) for n in names]
