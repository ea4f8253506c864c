"""`--help` speaks to users: `imagenot --help` lists the commands people run and names the
workflow's steps apart; each user command's help has no reStructuredText and no module paths,
and every option says its default (or is required, or a switch)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from imagenot.cli import USER_COMMANDS, build_parser

# what a docstring leaks: reStructuredText roles and literals, dotted module paths
LEAKS = re.compile(r"``|:(?:mod|func|class|data):|\bimagenot\.[a-z_]+\.[a-z_]+")


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_the_top_help_lists_the_user_commands_and_the_steps_apart():
    out = subprocess.run(
        [sys.executable, "-m", "imagenot.cli", "--help"], capture_output=True, text=True
    ).stdout
    listed, steps = out.split("workflow steps")
    for name in USER_COMMANDS:
        assert re.search(rf"^\s+{name}\b", listed, re.M), name
    assert "train-trial" in steps and not re.search(r"^\s+train-trial\b", listed, re.M)
    assert not LEAKS.search(out), LEAKS.search(out)
    assert set(USER_COMMANDS) <= set(_commands())


@pytest.mark.parametrize("name", USER_COMMANDS)
def test_a_user_commands_help_speaks_to_users(name):
    command = _commands()[name]
    text = command.format_help()
    assert not LEAKS.search(text), f"{name} --help: {LEAKS.search(text)[0]!r}"
    one_of = {a for g in command._mutually_exclusive_groups if g.required for a in g._group_actions}
    switches = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction)
    silent = [
        a.option_strings[-1]
        for a in command._actions
        if a.option_strings
        and not isinstance(a, switches)
        and not a.required
        and a not in one_of
        and a.help != argparse.SUPPRESS
        and "default" not in (a.help or "")
    ]
    assert not silent, f"{name}: options without their default: {silent}"
