"""The workflow's rules as Snakemake holds them, for the tests that check the rules.

:func:`loaded` loads the repository's Snakefile through Snakemake's API
(``conftest.snakemake_workflow``: parsed, nothing planned or run) under config files and an
optional overlay, once per combination and test session. The tests read its rule objects
(``rule.shellcmd``, ``rule.conda_env``, ``rule.log``, ``rule.resources``, ``rule.params``,
``rule.wildcard_constraints``, ``rule.input``, ``rule.output``, ``rule.snakefile``, ...), each
expression of the rule files evaluated for that config, not the rule files' text; a directive
that is a function of a job (``lambda wc: ...``) is called through :meth:`Loaded.evaluate`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import tempfile
from pathlib import Path

import yaml
from conftest import REPO, snakemake_workflow

DEMO = REPO / "config" / "config.yaml"
SCALE = REPO / "config" / "scale.yaml"
PAPER = REPO / "config" / "paper.yaml"
# Every rule: the demo config with the scale world on (rules/scale.smk defines scale_world only
# then).
EVERY_RULE = (DEMO, SCALE)


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A loaded workflow: its rules by name, the Snakefile's global wildcard constraints and the
    config its rules were built from."""

    rules: dict  # rule name -> snakemake.rules.Rule
    wildcard_constraints: dict[str, str]
    config: dict
    # The names the rule files' functions read (config, the helpers of rules/common.smk), as
    # this load left them, and the dict they read them from: Snakemake's module globals, which
    # every workflow loaded in this process shares, so a later load rebinds them.
    names: dict
    shared: dict

    def evaluate(self, value, **arguments):
        """``value`` of one of this workflow's rules' directives: as it is, or a function of the
        rule's arguments (``wildcards``, ``input``, ``attempt``, ...) called with those of
        ``arguments`` it names (its first, whatever its name, ``lambda wc: ...``, is the
        wildcards, as Snakemake hands them), while the names it reads are this load's."""
        if not callable(value):
            return value
        names = list(inspect.signature(value).parameters)
        args = {name: arguments[name] for name in names if name in arguments}
        if names and names[0] not in args:
            args[names[0]] = arguments["wildcards"]
        current = dict(self.shared)
        self.shared.update(self.names)
        try:
            return value(**args)
        finally:
            self.shared.clear()
            self.shared.update(current)


@functools.cache
def _load(configs: tuple[Path, ...], overlay: str) -> Loaded:
    from imagenot.plan.planning import placeholder_overlay

    with tempfile.TemporaryDirectory() as tmp:
        files = list(configs)
        if PAPER in configs:  # its external inputs: empty placeholders, while the rules load
            paper = yaml.safe_load(PAPER.read_text())
            files.append(Path(tmp) / "placeholders.yaml")
            files[-1].write_text(yaml.safe_dump(placeholder_overlay(Path(tmp) / "data", paper)))
        if overlay:
            files.append(Path(tmp) / "overlay.yaml")
            files[-1].write_text(overlay)
        (Path(tmp) / "work").mkdir()
        with snakemake_workflow(Path(tmp) / "work", files) as api:
            workflow = api._workflow
            return Loaded(
                {rule.name: rule for rule in workflow.rules},
                dict(workflow.wildcard_constraints),
                workflow.globals["config"],  # the validated copy the rules read (rules/common.smk)
                dict(workflow.globals),
                workflow.globals,
            )


def loaded(*configs: Path, overlay: dict | None = None) -> Loaded:
    """The workflow under ``configs`` (default :data:`EVERY_RULE`) and ``overlay`` (config keys
    merged over them, as a last ``--configfile``). With :data:`PAPER`, its external inputs (the
    LAION parts, the datasets' folders, the published weights) are empty placeholders while the
    Snakefile loads (imagenot.plan.planning.placeholder_overlay)."""
    return _load(tuple(configs) or EVERY_RULE, yaml.safe_dump(overlay) if overlay else "")


def rules(*configs: Path, overlay: dict | None = None) -> dict:
    """Rule name -> rule object of the workflow :func:`loaded` gives."""
    return loaded(*configs, overlay=overlay).rules


def runs_something(rule) -> bool:
    """Whether ``rule`` runs a job: a target rule (``all``, ``preflight``) names inputs only and
    runs nothing (Snakemake's ``norun``)."""
    return not rule.norun
