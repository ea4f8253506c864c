"""Every rule hands its command its files by role, checked on the rules as Snakemake holds them.

A step's files are one class of :mod:`imagenot.core.files` (``<stage>/files.py``): each field is a
role, and the command's parser is built from the fields. This test loads the Snakefile through
Snakemake's API (nothing is planned or run) and, for every rule whose shell runs an ``imagenot``
command, checks its rule object against that command's parser (``imagenot.cli.build_parser``):

- its ``input`` and ``output`` keys are the step's roles (inputs among the inputs, outputs among
  the outputs; beside them only :data:`imagenot.core.files.ORDER_ONLY`'s inputs), every required role
  is a key, and no entry is unnamed;
- its command is a step declared in :data:`imagenot.core.steps.STEPS` and the rule runs the line
  its declaration gives (``shell: step(NAME)``), which names every role, so every role is a key.

So a renamed or forgotten file, or a line written by hand, fails here in a second. Each check
is also run on planted wrong rules (a real rule's view, changed), which it must reject.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from conftest import snakemake_workflow

from imagenot.cli import build_parser
from imagenot.core import shell_line, steps
from imagenot.core.files import INPUT, ORDER_ONLY, OUTPUT

REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class RuleView:
    """What the check reads of a Snakemake rule: its name, its input and output keys with the
    number of entries no key names, and its shell line."""

    name: str
    keys: dict[str, tuple[str, ...]]  # side -> keys
    unnamed: dict[str, int]  # side -> entries without a key
    shell: str


def _keys(items) -> tuple[tuple[str, ...], int]:
    """(keys, entries no key covers) of a rule's ``input`` or ``output`` (a Snakemake
    ``Namedlist``: each key covers ``items[start:end]``, or ``items[start]`` when ``end`` is
    None)."""
    covered: set[int] = set()
    for start, end in items._names.values():
        covered.update(range(start, start + 1 if end is None else end))
    return tuple(items._names), len(items) - len(covered)


def view(rule) -> RuleView:
    inputs, outputs = _keys(rule.input), _keys(rule.output)
    return RuleView(
        rule.name,
        {INPUT: inputs[0], OUTPUT: outputs[0]},
        {INPUT: inputs[1], OUTPUT: outputs[1]},
        rule.shellcmd or "",
    )


@pytest.fixture(scope="module")
def rules(tmp_path_factory) -> dict[str, RuleView]:
    """Every rule of the workflow under the demo config with the scale world on (the rules only
    some configs define included), by name."""
    configs = [REPO / "config" / "config.yaml", REPO / "config" / "scale.yaml"]
    with snakemake_workflow(tmp_path_factory.mktemp("work"), configs) as api:
        return {rule.name: view(rule) for rule in api._workflow.rules}


@pytest.fixture(scope="module")
def parsers() -> dict:
    """Command name -> its parser."""
    return dict(build_parser()._subparsers._group_actions[0].choices)


def wiring_errors(rule: RuleView, parsers: dict) -> list[str]:
    """What is wrong with the wiring between ``rule`` and its command (empty: nothing)."""
    m = re.search(r"\bimagenot ([\w-]+)", rule.shell)
    if not m:
        return []
    command = m.group(1)
    if command not in parsers:
        return [f"{rule.name}: runs `imagenot {command}`, which is no command"]
    files = parsers[command]._defaults.get("files_class")
    if files is None:
        return [f"{rule.name}: `imagenot {command}` declares no files class"]
    errors = []
    for side in (INPUT, OUTPUT):
        if rule.unnamed[side]:
            errors.append(f"{rule.name}: {rule.unnamed[side]} {side} entry without a role")
        roles = files.roles(side)
        for key in rule.keys[side]:
            if key not in roles and not (side == INPUT and key in ORDER_ONLY):
                errors.append(f"{rule.name}: {side} key {key!r} is no {side} of {files.__name__}")
        for role in roles:
            if role not in rule.keys[side]:
                errors.append(f"{rule.name}: {files.__name__}'s {side} {role!r} is no {side} key")
    if not rule.shell.endswith(shell_line.quoted(steps.command(command))):
        errors.append(f"{rule.name}: its line is not its step's: `shell: step({command!r})`")
    return errors


def test_every_rule_hands_its_files_by_role(rules, parsers):
    run = [r for r in rules.values() if "imagenot " in r.shell]
    assert len(run) > 30, "too few rules that run a command"
    assert "scale_world" in rules  # a rule only some configs define is read too
    assert any(re.search(r"\bimagenot (accuracy-table|figure) ", r.shell) for r in run)
    errors = [e for rule in run for e in wiring_errors(rule, parsers)]
    assert not errors, "\n".join(errors)


def _changed(rule: RuleView, side: str | None = None, keys=None, shell=None, unnamed=0):
    """``rule`` with ``side``'s keys replaced (and ``unnamed`` entries), or its line."""
    if side is not None:
        rule = dataclasses.replace(
            rule,
            keys={**rule.keys, side: tuple(keys)},
            unnamed={**rule.unnamed, side: unnamed},
        )
    return rule if shell is None else dataclasses.replace(rule, shell=shell)


def test_a_wrong_step_rule_fails(rules, parsers):
    """A rule of a declared step (accuracy_table): healthy as the workflow holds it; a role
    renamed, forgotten or handed without a key, or a line written by hand, fails."""
    base = rules["accuracy_table"]
    assert "accuracy-table" in steps.STEPS and not wiring_errors(base, parsers)
    inputs, outputs = base.keys[INPUT], base.keys[OUTPUT]

    def says(rule, words):
        errors = wiring_errors(rule, parsers)
        assert any(words in e for e in errors), errors

    renamed = ["evaluations" if k == "robustness" else k for k in inputs]
    says(_changed(base, INPUT, renamed), "input key 'evaluations' is no input")
    says(
        _changed(base, OUTPUT, [k for k in outputs if k != "per_image_table"]), "'per_image_table'"
    )
    says(_changed(base, INPUT, inputs, unnamed=1), "input entry without a role")
    by_hand = base.shell.replace(" --per-image-table {output.per_image_table:q}", "")
    assert by_hand != base.shell
    says(_changed(base, shell=by_hand), "its line is not its step's")


def test_a_rule_of_no_step_fails(rules, parsers):
    """The rankings rule, whose command is a toolbox command too: healthy as the workflow holds
    it; a line naming no command, or a command declaring no files, fails."""
    base = rules["rankings_json"]
    assert not wiring_errors(base, parsers)
    for command, words in (("nothing", "which is no command"), ("ci", "declares no files")):
        shell = base.shell.replace("imagenot rankings", f"imagenot {command}")
        errors = wiring_errors(_changed(base, shell=shell), parsers)
        assert any(words in e for e in errors), errors


def test_a_steps_line_and_call_come_from_its_declaration(monkeypatch):
    """The line of a declared step names each role under its flag (a positional role bare),
    its settings and the options a rule hands; the command calls the handler with the files
    object, the settings object and each option by name, and refuses a settings key it lacks
    in one line."""
    from imagenot.cli import main

    assert steps.command("figure") == (
        "imagenot figure {input.accuracy} --pdf {output.pdf} --png {output.png}"
        " --settings {params.settings} > {log} 2>&1"
    )
    line = steps.command("evaluate-robustness")
    assert line.endswith(
        "--settings {params.settings} --threads {threads} {params.gpu_job} > {log} 2>&1"
    )
    seen = {}
    monkeypatch.setattr(
        "imagenot.curate.cli.prepare_wordnet",
        lambda files, settings, dict_dir: seen.update(f=files, s=settings, d=dict_dir),
    )
    argv = ["prepare-wordnet", "--nltk-data", "out"]
    assert main([*argv, "--settings", '{"dict_dir": "/wn"}']) == 0
    assert (seen["f"].nltk_data, seen["s"].dict_dir, seen["d"]) == ("out", "/wn", None)
    assert main([*argv, "--dict-dir", "d"]) == 0 and (seen["s"], seen["d"]) == (None, "d")
    with pytest.raises(SystemExit, match=r"imagenot prepare-wordnet: .*dict_dir"):
        main([*argv, "--settings", "{}"])


def test_a_commands_file_flags_are_built_from_its_roles():
    """The parser a files class builds: a flag per role (``_`` read ``-``), lists after one flag,
    an optional list or file that a rule hands empty (``--reserve`` then the next flag) read as
    none, a positional role without a flag, and a required role that is missing or handed
    empty refused."""
    import argparse

    from imagenot.acquire.files import PlanFiles
    from imagenot.figures.files import RankingsFiles

    parser = argparse.ArgumentParser(exit_on_error=False)
    PlanFiles.add_arguments(parser)
    argv = ["--selections", "s0", "s1", "--status", "a", "b", "--reserve", "--assignment", "x"]
    argv += ["--download-stats", "d", "--download-stats-csv", "dc"]
    argv += ["--classes-report", "c", "--classes-report-csv", "cc"]
    files = PlanFiles.from_args(parser.parse_args(argv))
    assert files.selections == ["s0", "s1"] and files.reserve == [] and files.classes_report == "c"
    with pytest.raises(SystemExit):  # --assignment missing
        parser.parse_args([a for a in argv if a not in ("--assignment", "x")])
    parser = argparse.ArgumentParser()
    RankingsFiles.add_arguments(parser)
    files = RankingsFiles.from_args(parser.parse_args(["t.csv"]))
    assert (files.table, files.per_image, files.out) == (["t.csv"], None, None)
    # an optional file the rule hands as an empty list: its flag alone reads as none
    files = RankingsFiles.from_args(parser.parse_args(["--per-image", "--out", "o", "t.csv"]))
    assert (files.table, files.per_image, files.out) == (["t.csv"], None, "o")
    files = RankingsFiles.from_args(parser.parse_args(["--per-image", "p", "t.csv"]))
    assert files.per_image == "p"
    parser = argparse.ArgumentParser()
    PlanFiles.add_arguments(parser)
    with pytest.raises(SystemExit):  # a required role's flag alone is refused
        parser.parse_args([a for a in argv if a != "x"])
