"""Config lookups for the demo stage's rules (pure functions of the workflow config).

The rule file rules/demo.smk calls these; Snakemake files themselves define no functions.
"""

from __future__ import annotations


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``."""
    return []
