"""Config lookups for the demo stage's rules (pure functions of the workflow config).

The rule file rules/demo.smk calls these; Snakemake files themselves define no functions.
"""

from __future__ import annotations

from imagenot.core.paths import RESULTS

# The stage's files (rule demo_world's outputs, docs/contracts.md).
DEMO_DIR = f"{RESULTS}/demo_world"
LAION_DIR = f"{DEMO_DIR}/laion"
IMAGES = f"{DEMO_DIR}/images"
TRUTH = f"{DEMO_DIR}/truth.parquet"
PLANTED_DUPLICATES = f"{DEMO_DIR}/planted_duplicates.parquet"  # imagenot.demo.world.PLANTED_FILE
WORLD = f"{DEMO_DIR}/world.json"


class DemoConfigError(ValueError):
    """The demo_world and laion sections do not fit together."""


def enabled(config: dict) -> bool:
    """Whether this config builds the demo world."""
    return config["demo_world"]["enabled"]


def shard_files(config: dict) -> list[str]:
    """The demo world's metadata shard paths: the LAION shards the ``laion`` section names
    (``laion.shards``, else ``laion.shard_pattern`` x ``laion.n_shards``), under ``laion.dir``.
    The demo world is a data source like any other: curation reads the shards the laion section
    names and knows nothing of the demo; the demo writes exactly those files."""
    from imagenot.curate.plan import shard_files as laion_shard_files

    return [f"{LAION_DIR}/{name}" for name in laion_shard_files(config)]


def check(config: dict) -> None:
    """Stop before any job runs if the demo world would write its shards where curation does not
    read them."""
    if enabled(config) and config["laion"]["dir"].rstrip("/") != LAION_DIR:
        raise DemoConfigError(
            f"config key laion.dir is {config['laion']['dir']!r}: with demo_world.enabled it must "
            f"be {LAION_DIR!r} (where the demo world writes its shards)"
        )


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``: world.json when the demo world is enabled."""
    return [WORLD] if enabled(config) else []
