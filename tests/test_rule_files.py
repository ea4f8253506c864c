"""Every rule hands its command its files by role, checked without running Snakemake.

A step's files are one class of :mod:`imagenot.files` (``<stage>/files.py``): each field is a
role, and the command's parser is built from the fields. This test reads the Snakefile and
rules/*.smk as text and, for every rule whose shell runs an ``imagenot`` command, checks against
that command's parser (``imagenot.cli.build_parser``):

- its ``input`` and ``output`` keys are the step's roles (inputs among the inputs, outputs among
  the outputs; beside them only :data:`imagenot.files.ORDER_ONLY`'s inputs), every required role
  is a key, and no entry is unnamed;
- the shell hands each key under its own flag (``--class-scores {input.class_scores}``; a
  positional role bare), and names no ``{input.x}``/``{output.x}`` that is no key;
- every flag the shell spells is one the command's parser knows.

So a renamed or forgotten file, or a flag the command lost, fails here in a second. Each check
is also run on planted wrong rules, which it must reject.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from imagenot.cli import build_parser
from imagenot.files import INPUT, ORDER_ONLY, OUTPUT, flag

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Rule:
    name: str
    sections: dict[str, list[str]] = field(default_factory=dict)  # section -> its lines
    parent: str | None = None  # ``use rule parent as name with:``


def parse_rules(text: str) -> dict[str, Rule]:
    """Rule name -> its sections' lines (each section's lines below its header), from the text
    of a Snakefile or .smk file; a rule may sit inside an ``if`` (any indentation)."""
    rules: dict[str, Rule] = {}
    lines = text.splitlines()
    header = re.compile(r"^(\s*)(?:rule (\w+)|use rule (\w+) as (\w+) with):\s*$")
    i = 0
    while i < len(lines):
        m = header.match(lines[i])
        if not m:
            i += 1
            continue
        indent = len(m.group(1))
        rule = Rule(m.group(2) or m.group(4), parent=m.group(3))
        rules[rule.name] = rule
        section = None
        i += 1
        while i < len(lines):
            line = lines[i]
            depth = len(line) - len(line.lstrip())
            if line.strip() and depth <= indent:
                break
            s = re.match(rf"^ {{{indent + 4}}}(\w+):(.*)$", line)
            if s:
                section = s.group(1)
                rule.sections[section] = [s.group(2)] if s.group(2).strip() else []
            elif section is not None:
                rule.sections[section].append(line)
            i += 1
    return rules


def all_rules() -> dict[str, Rule]:
    rules: dict[str, Rule] = {}
    for path in [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]:
        rules.update(parse_rules(path.read_text(encoding="utf-8")))
    return rules


def section_keys(lines: list[str]) -> tuple[list[str], list[str]]:
    """(keys, unnamed entries) of an input/output section: the entries at its first
    indentation (a ``report(`` or ``lambda`` spanning lines continues deeper or closes with
    ``)``)."""
    body = [ln for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    if not body:
        return [], []
    depth = len(body[0]) - len(body[0].lstrip())
    keys, unnamed = [], []
    for line in body:
        if len(line) - len(line.lstrip()) != depth or line.strip().startswith(")"):
            continue
        m = re.match(r"\s*(\w+)=", line)
        if m:
            keys.append(m.group(1))
        else:
            unnamed.append(line.strip())
    return keys, unnamed


def shell_text(lines: list[str]) -> str:
    """The shell command's text: its string literals joined (an f-string's ``{{`` read as
    ``{``)."""
    parts = []
    for line in lines:
        for prefix, body in re.findall(r'(f?)"((?:[^"\\]|\\.)*)"', line):
            parts.append(body.replace("{{", "{").replace("}}", "}") if prefix else body)
    return "".join(parts)


def resolved(rule: Rule, rules: dict[str, Rule], section: str) -> list[str] | None:
    """A section of ``rule``, or of the rule it is declared from (``use rule``)."""
    while rule is not None:
        if section in rule.sections:
            return rule.sections[section]
        rule = rules.get(rule.parent) if rule.parent else None
    return None


def commands():
    """Command name -> its parser."""
    parser = build_parser()
    return dict(parser._subparsers._group_actions[0].choices)


def wiring_errors(rule: Rule, rules: dict[str, Rule], parsers: dict) -> list[str]:
    """What is wrong with the wiring between ``rule`` and its command (empty: nothing)."""
    shell = shell_text(resolved(rule, rules, "shell") or [])
    m = re.search(r"\bimagenot ([\w-]+)", shell)
    if not m:
        return []
    command = m.group(1)
    if command not in parsers:
        return [f"{rule.name}: runs `imagenot {command}`, which is no command"]
    parser = parsers[command]
    errors = []
    known = {s for action in parser._actions for s in action.option_strings}
    for spelled in re.findall(r"(?<![\w{-])(--?[a-zA-Z][\w-]*)", shell[m.end() :]):
        if spelled not in known:
            errors.append(f"{rule.name}: `imagenot {command}` has no option {spelled}")
    files = parser._defaults.get("files_class")
    if files is None:
        return [*errors, f"{rule.name}: `imagenot {command}` declares no files class"]
    keys: dict[str, str] = {}
    for side in (INPUT, OUTPUT):
        found, unnamed = section_keys(resolved(rule, rules, side) or [])
        errors += [f"{rule.name}: {side} entry without a role: {u}" for u in unnamed]
        roles = files.roles(side)
        for key in found:
            keys[key] = side
            if key not in roles and not (side == INPUT and key in ORDER_ONLY):
                errors.append(f"{rule.name}: {side} key {key!r} is no {side} of {files.__name__}")
        for role in roles:
            if role not in found and not files.role(role)["optional"]:
                errors.append(f"{rule.name}: {files.__name__}'s {side} {role!r} is no {side} key")
    handed = {}
    for spelled, side, key in re.findall(r"(?:(--[\w-]+) )?\{(input|output)\.(\w+)\}", shell):
        handed[key] = (spelled, side)
        if keys.get(key) != side:
            errors.append(f"{rule.name}: the shell names {{{side}.{key}}}, which is no {side} key")
    for key, side in keys.items():
        if key not in files.roles(side):  # an order-only input, or a key reported above
            continue
        want = "" if files.role(key)["positional"] else flag(key)
        if key not in handed or handed[key] != (want, side):
            got = handed.get(key, ("nothing", side))[0] or "no flag"
            errors.append(
                f"{rule.name}: {side}.{key} must be handed as `{want} {{{side}.{key}}}`".replace(
                    "` {", "`{"
                )
                + f", not under {got}"
            )
    return errors


def test_every_rule_hands_its_files_by_role():
    rules, parsers = all_rules(), commands()
    run = [
        r for r in rules.values() if "imagenot " in shell_text(resolved(r, rules, "shell") or [])
    ]
    assert len(run) > 30, "the rule reader found too few rules that run a command"
    errors = [e for rule in run for e in wiring_errors(rule, rules, parsers)]
    assert not errors, "\n".join(errors)


CALIBRATION = """
rule curate_calibration:
    input:
        class_scores=curate_paths.CLASS_SCORES,
    output:
        csv=report(
            curate_paths.CALIBRATION,
            caption="../report/curate_calibration.rst",
        ),
        summary=curate_paths.CALIBRATION_SUMMARY,
        figure=curate_paths.CALIBRATION_FIGURE,
    log:
        f"{LOGS}/curate_calibration/{{dataset}}.log",
    params:
        settings=lambda wc: to_arg(x),
    shell:
        "imagenot curate-calibration --class-scores {input.class_scores}"
        " --settings {params.settings} --csv {output.csv} --summary {output.summary}"
        " --figure {output.figure} > {log} 2>&1"
"""


def _planted(text: str) -> list[str]:
    rules = parse_rules(text)
    return wiring_errors(rules["curate_calibration"], rules, commands())


@pytest.mark.parametrize(
    "old, new, says",
    [
        # a role renamed in the rule (key and placeholder) but not in the step's files
        ("class_scores=", "scores=", "input key 'scores' is no input"),
        # an output forgotten by the rule
        ("        figure=curate_paths.CALIBRATION_FIGURE,\n", "", "'figure' is no output key"),
        # a key handed under another flag
        ("--csv {output.csv}", "--summary {output.csv}", "output.csv must be handed as"),
        # a flag the command does not know
        ("--settings {params.settings}", "--setting {params.settings}", "has no option"),
        # a placeholder naming no key
        ('{input.class_scores}"', '{input.scores}"', "names {input.scores}"),
        # a file handed without a name
        ("        class_scores=curate_paths.CLASS_SCORES,\n", "        X,\n", "without a role"),
        # a command whose files are not declared by role
        ("imagenot curate-calibration", "imagenot validate-config", "declares no files class"),
    ],
)
def test_a_wrong_rule_fails(old, new, says):
    assert not _planted(CALIBRATION), "the planted rule's base must pass"
    assert old in CALIBRATION
    errors = _planted(CALIBRATION.replace(old, new))
    assert any(says in e for e in errors), errors


def test_a_use_rule_is_checked_with_its_parents_shell():
    text = CALIBRATION + (
        "\n\nuse rule curate_calibration as other with:\n"
        "    output:\n        csv=A,\n        summary=B,\n        figures=C,\n"
    )
    rules = parse_rules(text)
    errors = wiring_errors(rules["other"], rules, commands())
    assert any("output key 'figures' is no output" in e for e in errors), errors


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
    assert (files.table, files.per_image, files.out) == ("t.csv", None, None)
    # an optional file the rule hands as an empty list: its flag alone reads as none
    files = RankingsFiles.from_args(parser.parse_args(["--per-image", "--out", "o", "t.csv"]))
    assert (files.table, files.per_image, files.out) == ("t.csv", None, "o")
    files = RankingsFiles.from_args(parser.parse_args(["--per-image", "p", "t.csv"]))
    assert files.per_image == "p"
    parser = argparse.ArgumentParser()
    PlanFiles.add_arguments(parser)
    with pytest.raises(SystemExit):  # a required role's flag alone is refused
        parser.parse_args([a for a in argv if a != "x"])
