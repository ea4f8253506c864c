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


def _rules() -> dict[str, str]:
    """Rule name -> its block, for every rule of the Snakefile and rules/*.smk that runs
    something (target rules, such as ``all``, only name inputs)."""
    from test_envs import is_target_rule

    blocks = {}
    for path in [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]:
        parts = re.split(r"^(?:rule|checkpoint) (\w+):", path.read_text(), flags=re.M)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            blocks[name] = re.split(r"^\S", body, maxsplit=1, flags=re.M)[0]
    return {name: body for name, body in blocks.items() if not is_target_rule(body)}


def test_every_rule_has_the_directives_the_page_names():
    text = " ".join(CONTRIBUTING.read_text(encoding="utf-8").split())
    named = ", ".join(f"`{d}:`" for d in RULE_DIRECTIVES[:-1]) + f" and `{RULE_DIRECTIVES[-1]}:`"
    assert f"every rule needs {named}" in text
    rules = _rules()
    assert len(rules) > 30, sorted(rules)
    lacking = {
        name: [d for d in RULE_DIRECTIVES if not re.search(rf"^    {d}:", body, re.M)]
        for name, body in rules.items()
    }
    lacking = {name: ds for name, ds in lacking.items() if ds}
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
