"""docs/contributing.md's recipes are true: the files they name exist, each registry's module is
among the files a recipe touches, every rule has the directives the page says it needs, and the
site-keys table of docs/cluster.md (the SLURM-site recipe) names every key of the site schema.

Why: a recipe is followed by someone who does not know the code yet; a path that moved or a
directive the page asks for and the rules lack ("every rule needs resources:", which
23 rules have none of, by design) sends them the wrong way without any test failing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import snakemake_rules

REPO = Path(__file__).resolve().parents[1]
CONTRIBUTING = REPO / "docs" / "contributing.md"
CLUSTER = REPO / "docs" / "cluster.md"
# The directives every rule has (docs/contributing.md, "Checks before committing"); resources:
# is not among them (tests/test_slurm_profile.py: a rule's own sizing or the workflow profile's).
RULE_DIRECTIVES = ("log", "benchmark", "conda", "threads")
# Top folders of the repository a recipe may name a path in.
TOP = ("workflow/", "tests/", "benchmarks/", "docs/", "rules/", "report/", "profiles/", "config/")


def _named_paths(text: str) -> set[str]:
    """Every backticked repository path of ``text`` (a placeholder such as ``<step>`` kept)."""
    return {p for p in re.findall(r"`([^`\s]+)`", text) if p.startswith(TOP)}


def test_every_path_the_recipes_name_exists():
    missing = []
    for path in sorted(_named_paths(CONTRIBUTING.read_text(encoding="utf-8"))):
        if "<" in path or "*" in path:  # a pattern (`<step>`, `test_curate_*.py`): one matches
            pattern = re.sub(r"<[^>]+>", "*", path)
            if not list(REPO.glob(pattern)):
                missing.append(path)
        elif not (REPO / path).exists():
            missing.append(path)
    assert not missing, f"docs/contributing.md names paths that do not exist: {missing}"


# The registries a recipe of the page adds to (report figures, diagnostics figures and NSFW
# filters have none).
RECIPE_KINDS = ("models", "transforms", "dataset_kinds", "figures", "tables", "optimizers")
RECIPE_KINDS += ("schedulers", "encoders")


@pytest.mark.parametrize("kind", RECIPE_KINDS)
def test_each_registry_module_is_among_the_files_a_recipe_touches(kind):
    from imagenot.core.registries import REGISTRIES

    module = REGISTRIES[kind].partition(":")[0]
    path = "workflow/" + module.replace(".", "/") + ".py"
    text = CONTRIBUTING.read_text(encoding="utf-8")
    touched = text[text.index("**Files touched per recipe.**") :]
    touched = touched[: touched.index('\n\n"One file per recipe"')]
    assert f"`{path}`" in touched, f"{kind}: {path} is not listed as a file its recipe touches"


def _lacking(rule) -> list[str]:
    """The directives of :data:`RULE_DIRECTIVES` that rule object ``rule`` lacks (``threads:`` as
    the rule wrote it: Snakemake gives every rule one core by default)."""
    given = {
        "log": bool(rule.log),
        "benchmark": rule.benchmark is not None,
        "conda": rule.conda_env is not None,
        "threads": rule.ruleinfo.threads is not None,
    }
    return [d for d in RULE_DIRECTIVES if not given[d]]


def test_every_rule_has_the_directives_the_page_names():
    """Read on the rules as Snakemake holds them (tests/snakemake_rules.py), every rule that runs
    something (target rules, such as ``all``, only name inputs)."""
    text = " ".join(CONTRIBUTING.read_text(encoding="utf-8").split())
    named = ", ".join(f"`{d}:`" for d in RULE_DIRECTIVES[:-1]) + f" and `{RULE_DIRECTIVES[-1]}:`"
    assert f"every rule needs {named}" in text
    rules = {n: r for n, r in snakemake_rules.rules().items() if snakemake_rules.runs_something(r)}
    assert len(rules) > 30, sorted(rules)
    lacking = {name: ds for name, rule in rules.items() if (ds := _lacking(rule))}
    assert not lacking, f"rules without the directives docs/contributing.md names: {lacking}"


def test_the_site_keys_table_names_every_site_key():
    from imagenot.plan.slurm_profile import site_schema

    text = CLUSTER.read_text(encoding="utf-8")
    table = text[text.index("### Site keys") :]
    table = table[: table.index("\n\n", table.index("| flag |"))]
    rows = re.findall(r"^\| `--[\w-]+` \| `?(\w*)`? \|", table, flags=re.M)
    assert set(site_schema()["properties"]) <= set(rows), (
        f"site keys missing from docs/cluster.md: {set(site_schema()['properties']) - set(rows)}"
    )
