"""The workflow's stages in DAG order, and the one config check the workflow and
``imagenot validate-config`` share.

Kept apart from ``imagenot.core.config`` (which every job imports) because it imports every stage plan:
only the Snakefile and ``validate-config`` need them all.
"""

from __future__ import annotations

import importlib

from imagenot.core.config import ConfigError, schema_default, validate_config
from imagenot.core.registries import load_plugins

# the stage plan modules (under imagenot.), in DAG order
STAGE_PLANS = (
    "demo.plan demo.scale_plan curate.plan acquire.plan train.plan evaluate.plan figures.plan "
    "diagnostics.plan audit.plan run.summary_plan"
).split()


def stage_plans() -> list:
    """The stage plan modules in DAG order (each may define ``check(config)`` and defines
    ``targets(config)``); imported here so that the workflow and ``imagenot validate-config`` run
    the same checks."""
    return [importlib.import_module(f"imagenot.{name}") for name in STAGE_PLANS]


def _no_check(config: dict) -> None:
    """A stage's check where its plan defines none."""


def check_workflow_config(config: dict, against_results: bool = True) -> dict:
    """Everything the workflow checks before any job runs: the schema (defaults filled), then
    each stage's cross-key checks, then (``against_results``) the results already in the working
    directory: that they are this study's (:mod:`imagenot.run.run_identity`: the demo's results are
    not the paper's), then each stage's checks of the config against them (``check_results``:
    the train stage's preregistration record). ``imagenot validate-config`` calls exactly this,
    so "valid" means the workflow accepts the config (run it where the workflow runs). The
    config's ``plugins`` (modules that register models, transformations, figures, tables or
    dataset kinds) are imported first: before validation, since they register names the
    schema's enums list, so an absent key takes the schema's default here, read from the schema.

    A schema error stops at once (the later checks read the keys it checks). Past it, every
    stage is checked and every refusal collected: one ValueError lists them all, one a line (the
    paper config's four data paths at once, not one per attempt)."""
    plugins = config["plugins"] if "plugins" in config else schema_default("plugins")
    if not isinstance(plugins, list):
        raise ValueError(f"config key plugins: a list of module names, got {plugins!r}")
    load_plugins(plugins)
    validate_config(config)
    problems: list[ValueError] = []

    def run(check) -> bool:
        try:
            check(config)
            return True
        except ValueError as exc:
            problems.append(exc)
        except Exception:
            # a later check tripping over a key an earlier one refused: that refusal says it
            if not problems:
                raise
        return False

    # config paths that reach a shell line as arguments of their own (imagenot.core.shell_line)
    from imagenot.core import shell_line

    run(shell_line.check)
    # each stage's keys, then (where they passed) the data on disk its jobs will read
    for plan in stage_plans():
        if run(getattr(plan, "check", _no_check)):
            run(getattr(plan, "check_data", _no_check))
    if against_results:
        from imagenot.run.run_identity import foreign_results

        foreign = foreign_results(config)
        if foreign:  # nothing of those results is compared with this config
            problems.append(ConfigError(foreign))
        else:
            for plan in stage_plans():
                run(getattr(plan, "check_results", _no_check))
    # each refusal once, though two stages' checks may reach the same key
    lines = list(dict.fromkeys(ln for problem in problems for ln in str(problem).splitlines()))
    if len(lines) == 1:
        raise problems[0]
    if lines:
        # the schema's own form of several problems (imagenot.core.config.validate_config)
        detail = "\n".join(f"  - {ln}" for ln in lines)
        raise ConfigError(f"invalid workflow config ({len(lines)} problem(s)):\n{detail}")
    return config
