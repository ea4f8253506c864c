"""A finished run moved to another folder (home to scratch, as clusters require), or run from a
second clone at the same commit, plans nothing.

Snakemake reruns a job when the set of its inputs, its parameters or its rule's code differs
from what it recorded for the job's outputs. So none of them may hold a path of the clone or of
the working directory: every file under results/ is named relative to the working directory, and
the package files jobs read (plotting modules, the shipped published accuracies) are recorded by
their digest (imagenot.core.io.code_version), not their path. Checked statically on every
job of the demo's and the paper's DAG, as Snakemake's own persistence would record it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import snakemake_workflow

REPO = Path(__file__).resolve().parents[1]


def _recorded(workdir: Path, configfiles: list[Path]) -> list[tuple[str, str, str]]:
    """(rule, what, value) of every input, parameter and rule code that Snakemake records for the
    jobs of ``configfiles``' DAG in ``workdir`` (its API: the DAG is built, nothing runs)."""
    from snakemake.settings.types import DAGSettings

    with snakemake_workflow(workdir, configfiles) as workflow_api:
        workflow_api.dag(dag_settings=DAGSettings())
        workflow = workflow_api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        persistence = workflow.persistence
        out = []
        for job in workflow.dag.jobs:
            name = job.rule.name
            out += [(name, "input", value) for value in persistence._input(job)]
            out += [(name, "param", value) for value in persistence._params(job)]
            out.append((name, "code", persistence._code(job.rule) or ""))
        return out


def _absolute(recorded: list[tuple[str, str, str]], workdir: Path) -> list[str]:
    """The records that hold a path of the clone or of the working directory."""
    return [
        f"{rule} {what}: {value[:160]}"
        for rule, what, value in recorded
        if str(REPO) in value or str(workdir) in value
    ]


def _paper(tmp_path: Path) -> tuple[Path, Path]:
    from imagenot.plan.planning import placeholder_overlay

    overlay = tmp_path / "placeholders.yaml"
    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    overlay.write_text(yaml.safe_dump(placeholder_overlay(tmp_path / "data", paper)))
    lists = {}  # copies outside the clone: a configured path is the user's, not the clone's
    for name, path in paper["diagnostics"]["class_lists"].items():
        lists[name] = str(tmp_path / "lists" / Path(path).name)
        Path(lists[name]).parent.mkdir(exist_ok=True)
        Path(lists[name]).write_text("n01828556\nn03262809\n")  # two WordNet noun synsets
    classes = tmp_path / "lists.yaml"
    classes.write_text(yaml.safe_dump({"diagnostics": {"class_lists": lists}}))
    return overlay, classes


@pytest.mark.parametrize("config", ["demo", "paper"])
def test_no_job_records_a_path_of_the_clone_or_the_working_directory(tmp_path, monkeypatch, config):
    configs = [REPO / "config" / "config.yaml"]
    if config == "paper":
        configs = [REPO / "config" / "paper.yaml", *_paper(tmp_path)]
    workdir = tmp_path / "run"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    recorded = _recorded(workdir, configs)
    assert len({rule for rule, _, _ in recorded}) > 30
    absolute = _absolute(recorded, workdir)
    assert not absolute, "\n".join(absolute)
    figures = [value for rule, what, value in recorded if rule == "figure" and what == "param"]
    assert any("sha256:" in value for value in figures)  # the plotting module, by its digest


def test_a_class_list_given_by_its_absolute_path_is_found(tmp_path, monkeypatch):
    """The check's planted case: a config naming a file by its absolute path in the working
    directory (a user's class list) makes the job that reads it record that path."""
    workdir = tmp_path / "run"
    (workdir / "lists").mkdir(parents=True)
    monkeypatch.chdir(workdir)
    mine = workdir / "lists" / "mine.txt"
    mine.write_text("n01828556\nn03262809\n")  # two WordNet noun synsets
    overlay = tmp_path / "lists.yaml"
    overlay.write_text(yaml.safe_dump({"diagnostics": {"class_lists": {"mine": str(mine)}}}))
    recorded = _recorded(workdir, [REPO / "config" / "config.yaml", overlay])
    assert any(str(mine) in line for line in _absolute(recorded, workdir))


def test_a_figures_recorded_code_changes_with_its_module_only(tmp_path):
    """The figure rule's parameter follows the content of the module, not its place."""
    from imagenot.core.io import code_version
    from imagenot.figures.plan import code

    module = Path(code("relative_progress"))
    copy = tmp_path / "elsewhere" / module.name
    copy.parent.mkdir()
    copy.write_bytes(module.read_bytes())
    assert code_version(str(copy)) == code_version(str(module))
    edited = tmp_path / "edited" / module.name
    edited.parent.mkdir()
    edited.write_bytes(module.read_bytes() + b"# edited\n")
    assert code_version(str(edited)) != code_version(str(module))
