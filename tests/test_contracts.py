"""A file path is written once, and docs/contracts.md names the same files.

Every file under results/ is a named pattern of ``imagenot.core.paths``, a stage's
``imagenot.<stage>.paths`` or a last stage's plan: the producing rule's ``output:``, the
consuming rules' ``input:`` and the plans' file lists use the name, never the spelling. These tests find the pattern
modules from the package's source (a module-level constant built on ``RESULTS`` or another
root of ``imagenot.core.paths``), so a stage
added later is covered without a list to keep.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "workflow" / "imagenot"
CONTRACTS = REPO / "docs" / "contracts.md"
RULE_FILES = [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]


def _module_constants(path: Path) -> list[str]:
    """Names of the module-level string constants assigned in the file at ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, (ast.Constant, ast.JoinedStr))
        ):
            names.append(node.targets[0].id)
    return names


def pattern_modules() -> dict[str, list[str]]:
    """Module name -> its own path constants, for each module that builds one on RESULTS or on
    a root of ``imagenot.core.paths`` (FIGURES, TABLES, ...)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "RESULTS" not in text and "imagenot.core.paths import" not in text:
            continue  # (a pattern is built on RESULTS or on a root of imagenot.core.paths)
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        names = [n for n in _module_constants(path) if n.isupper() or n.startswith("_")]
        if names:
            found[module] = names
    return found


def patterns() -> dict[str, str]:
    """``module.NAME`` -> pattern, for every public path constant under results/."""
    out = {}
    for module, names in pattern_modules().items():
        mod = importlib.import_module(module)
        for name in names:
            value = getattr(mod, name)
            if not name.startswith("_") and isinstance(value, str) and value.startswith("results"):
                out[f"{module}.{name}"] = value
    return out


def _documented() -> dict[str, str]:
    """Every path under results/ that docs/contracts.md names in a code span (``R/...``), as a
    pattern (``R`` -> ``results``, a field's format spec dropped, no trailing slash)."""
    text = CONTRACTS.read_text(encoding="utf-8")
    out = {}
    for span in re.findall(r"`(R/[^`\s]*)`", text):
        path = re.sub(r"\{(\w+):[^}]*\}", r"{\1}", "results" + span[1:]).rstrip("/")
        out[path] = span
    return out


def test_the_pattern_modules_are_found():
    modules = pattern_modules()
    for module in ("imagenot.core.paths", "imagenot.train.paths", "imagenot.curate.paths"):
        assert module in modules
    assert "imagenot.acquire.paths.PART_STATUS" in patterns()


def test_the_results_root_is_defined_once():
    defined = [module for module, names in pattern_modules().items() if "RESULTS" in names] + [
        p.name for p in RULE_FILES if re.search(r"^RESULTS\s*=", p.read_text(), re.M)
    ]
    assert defined == ["imagenot.core.paths"]


def test_no_two_names_spell_the_same_path():
    seen: dict[str, str] = {}
    for name, pattern in patterns().items():
        key = re.sub(r"\{\w+\}", "{}", pattern)
        assert key not in seen, f"{name} and {seen[key]} both spell {pattern}"
        seen[key] = name


def test_rules_name_paths_and_never_spell_them():
    """A rule file writes no path under results/ itself: only its log and benchmark (one per
    rule, under LOGS and BENCH)."""
    spelt = []
    for path in RULE_FILES:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"\{RESULTS\}|[\"']results/", code):
                spelt.append(f"{path.name}:{n}: {line.strip()}")
    assert not spelt, "\n".join(spelt)


def test_each_pattern_is_documented():
    documented = _documented()
    missing = [f"{name} ({p})" for name, p in patterns().items() if p not in documented]
    assert not missing, "docs/contracts.md does not name: " + ", ".join(missing)


# Folders whose files a job names itself (no rule names them one by one), and why.
JOB_FOLDERS = {
    "imagenot.core.paths.DATASET": "a materialising job's tars (shards/)",
    "imagenot.core.paths.NLTK_DATA": "the nltk corpus",
    "imagenot.train.paths.RUN": "a trial's checkpoints and metrics (trial-{trial}/)",
    "imagenot.curate.paths.EMBEDDINGS": "an embedding job's resumable chunks",
    "imagenot.demo.plan.LAION_DIR": "shards named by laion.shard_pattern",
    "imagenot.demo.plan.IMAGES": "the demo world's JPEG files",
    "imagenot.demo.scale_plan.LAION_DIR": "shards named by laion.shard_pattern",
    "imagenot.train.preflight_plan.PREFLIGHT": "reports named by the site",
}


def test_each_documented_path_is_a_pattern_or_lies_in_a_folder_a_job_fills():
    """A documented path is a named pattern, or a file a job writes inside a folder of
    JOB_FOLDERS (a trial's metrics in its run folder, a dataset's tars in the dataset folder);
    any other path under a stage's folder is a spelling no rule or plan has."""
    named = patterns()
    folders = [named[name] for name in JOB_FOLDERS]
    # a pattern, or one file of it (`R/tables/published_check.csv`: a {table})
    known = [re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(p))) for p in named.values()]
    unknown = [
        span
        for path, span in _documented().items()
        if not any(k.fullmatch(path) for k in known)
        and not any(path.startswith(f + "/") for f in folders)
    ]
    assert not unknown, "docs/contracts.md names paths no pattern has: " + ", ".join(unknown)


@pytest.mark.parametrize(
    ("name", "wildcards"),
    [
        ("imagenot.curate.paths.CAPTIONS", {"dataset", "shard"}),
        ("imagenot.acquire.paths.ROUND_PART_STATUS", {"dataset", "round", "part"}),
        ("imagenot.train.paths.FINAL_MODEL", {"dataset", "protocol", "model", "seed"}),
        ("imagenot.evaluate.paths.ROBUSTNESS", {"dataset", "protocol", "model", "seed"}),
    ],
)
def test_patterns_carry_the_rules_wildcards(name, wildcards):
    """The patterns are Snakemake patterns: the wildcards the rules' jobs are planned by."""
    assert set(re.findall(r"\{(\w+)\}", patterns()[name])) == wildcards
