"""Config lookups for the demo stage's rules (pure functions of the workflow config).

The rule file rules/demo.smk calls these; Snakemake files themselves define no functions.
"""

from __future__ import annotations

DEMO_DIR = "results/demo_world"


def enabled(config: dict) -> bool:
    """Whether this config builds the demo world."""
    return bool(config.get("demo_world", {}).get("enabled", False))


def shard_name(index: int) -> str:
    """Stem of the demo world's metadata shard number ``index``: ``part-00000``, ..."""
    return f"part-{index:05d}"


def shard_names(config: dict) -> list[str]:
    """Stems of the demo world's metadata shards: ``part-00000``, ``part-00001``, ..."""
    return [shard_name(i) for i in range(config.get("demo_world", {}).get("n_shards", 4))]


def shard_files(config: dict) -> list[str]:
    """The demo world's metadata shard paths."""
    return [f"{DEMO_DIR}/laion/{name}.parquet" for name in shard_names(config)]


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``: world.json when the demo world is enabled."""
    return [f"{DEMO_DIR}/world.json"] if enabled(config) else []


def settings(config: dict) -> dict:
    """``imagenot demo-world --settings`` (imagenot.demo.settings.DemoSettings): the
    ``demo_world`` section but ``enabled``."""
    from imagenot.demo.settings import DemoSettings, fields_of

    return fields_of(DemoSettings, config["demo_world"])
