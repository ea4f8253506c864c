"""The workflow's stages in DAG order, and the one config check the workflow and
``imagenot validate-config`` share.

Kept apart from ``imagenot.config`` (which every job imports) because it imports every stage plan:
only the Snakefile and ``validate-config`` need them all.
"""

from __future__ import annotations

from imagenot.config import schema_default, validate_config
from imagenot.registries import load_plugins


def stage_plans() -> list:
    """The stage plan modules in DAG order (each may define ``check(config)`` and defines
    ``targets(config)``); imported here so that the workflow and ``imagenot validate-config`` run
    the same checks."""
    from imagenot import summary_plan
    from imagenot.acquire import plan as acquire_plan
    from imagenot.curate import plan as curate_plan
    from imagenot.demo import plan as demo_plan
    from imagenot.demo import scale_plan
    from imagenot.diagnostics import plan as diagnostics_plan
    from imagenot.evaluate import plan as evaluate_plan
    from imagenot.figures import plan as figures_plan
    from imagenot.train import plan as train_plan

    return [
        demo_plan,
        scale_plan,
        curate_plan,
        acquire_plan,
        train_plan,
        evaluate_plan,
        figures_plan,
        diagnostics_plan,
        summary_plan,
    ]


def check_workflow_config(config: dict, against_results: bool = True) -> dict:
    """Everything the workflow checks before any job runs: the schema (defaults filled), then
    each stage's cross-key checks, then (``against_results``) each stage's checks of the config
    against the results already in the working directory (``check_results``: the train stage's
    preregistration record). ``imagenot validate-config`` calls exactly this, so "valid" means
    the workflow accepts the config (run it where the workflow runs). The config's ``plugins``
    (modules that register models, transformations, figures, tables or dataset kinds) are
    imported first: before validation, since they register names the schema's enums list, so an
    absent key takes the schema's default here, read from the schema."""
    plugins = config["plugins"] if "plugins" in config else schema_default("plugins")
    if not isinstance(plugins, list):
        raise ValueError(f"config key plugins: a list of module names, got {plugins!r}")
    load_plugins(plugins)
    validate_config(config)
    for plan in stage_plans():
        if hasattr(plan, "check"):
            plan.check(config)
    if against_results:
        for plan in stage_plans():
            if hasattr(plan, "check_results"):
                plan.check_results(config)
    return config
