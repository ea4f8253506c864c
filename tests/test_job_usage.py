"""Every workflow job records its own peak memory and CPU time (imagenot.core.job_usage): the last
line of its log, however its command ends, with children and declared workers counted."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import snakemake_rules

from imagenot import cli
from imagenot.core import job_usage

REPO = Path(__file__).resolve().parents[1]


def _imagenot(*args: str, env_on: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(job_usage.ENV, None)
    if env_on:
        env[job_usage.ENV] = "1"
    cmd = [sys.executable, "-m", "imagenot.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)


MISSING_PART = (
    *("--parts", "missing.parquet", "--manifest", "x/manifest.parquet"),
    *("--classes", "x/classes.txt", "--fingerprint", "x/fingerprint.txt"),
    *("--settings", '{"seed": 0}'),
)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("--version",), 0),  # argparse's SystemExit(0)
        (("acquire-gather", "--parts", "x"), 2),  # argparse usage error: SystemExit(2)
        # bad input: the one-line error, then the usage line
        (("acquire-gather", *MISSING_PART), 2),
    ],
)
def test_a_job_ends_its_log_with_its_usage_however_its_command_ends(args, code, tmp_path):
    run = _imagenot(*args)
    assert run.returncode == code, run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(job_usage.PREFIX), run.stderr
    usage = job_usage.parse(run.stderr)
    assert usage["peak_rss_mb"] == usage["self_rss_mb"] > 20  # an interpreter, no children
    assert usage["children_rss_mb"] == 0 and usage["workers"] is None
    assert usage["cpu_s"] > 0 and usage["wall_s"] > 0


def test_without_the_workflow_variable_a_command_writes_no_usage_line():
    bad = ("acquire-gather", *MISSING_PART)
    run = _imagenot(*bad, env_on=False)
    assert job_usage.PREFIX not in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_a_command_that_crashes_still_records_its_usage(monkeypatch, capsys):
    """An unexpected exception keeps its traceback (a bug), and the usage line is written."""
    monkeypatch.setenv(job_usage.ENV, "1")

    def crash(args):
        raise RuntimeError("a bug")

    parser = cli.build_parser()
    parse = parser.parse_args
    parser.parse_args = lambda argv=None: argparse.Namespace(**{**vars(parse(argv)), "func": crash})
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["train-select", "--results", "x", "--selection", "y"])
    assert job_usage.parse(capsys.readouterr().err)["peak_rss_mb"] > 0


CHILD = "b = b'x' * ({mb} * 2**20)"  # written bytes: resident, unlike a calloc'ed bytearray

PARENT = """
import json, subprocess, sys
from imagenot.core import job_usage
held = b'y' * (120 * 2**20)
del held  # freed again: the peak (high-water mark) keeps it
subprocess.run([sys.executable, "-c", {child!r}], check=True)
print(json.dumps(job_usage.usage()))
job_usage.declare_workers(3)
job_usage.declare_workers(2)  # the largest declaration counts
print(json.dumps(job_usage.usage()))
"""


def test_peak_is_the_high_water_mark_of_the_job_and_counts_children_and_workers():
    code = PARENT.format(child=CHILD.format(mb=200))
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    one, three = map(json.loads, run.stdout.splitlines())
    assert one["self_rss_mb"] >= 120  # freed before the end, still the peak
    assert 200 <= one["children_rss_mb"] < 260
    # one child at a time: self + the child; three declared workers: self + 3 x the largest
    assert one["peak_rss_mb"] == pytest.approx(one["self_rss_mb"] + one["children_rss_mb"], abs=0.2)
    assert three["workers"] == 3
    # each figure is rounded to 0.1 MB: three times the child's rounding plus two more
    assert three["peak_rss_mb"] == pytest.approx(
        three["self_rss_mb"] + 3 * three["children_rss_mb"], abs=0.3
    )


def test_parse_takes_the_last_usage_line_and_ignores_other_text():
    text = (
        "imagenot job-usage: {not json\n"
        "some log line\n"
        'imagenot job-usage: {"peak_rss_mb": 1.0}\n'
        'imagenot job-usage: {"peak_rss_mb": 2.0}\n'
        "Traceback (most recent call last):\n"
    )
    assert job_usage.parse(text) == {"peak_rss_mb": 2.0}
    assert job_usage.parse("no line here\n") is None


def test_every_rule_runs_an_imagenot_command_into_its_log():
    """The usage line comes from imagenot's CLI: a rule running anything else (a shell line
    of another program, run:, script:, wrapper:, notebook:) would have no measured peak. Read on
    the rules as Snakemake holds them (tests/snakemake_rules.py); rules/common.smk's code that
    hands the jobs the variable is read as text (it is Python the Snakefile runs, no rule)."""
    from imagenot.core.lifeline import job_prefix

    rules = snakemake_rules.rules()
    shells = 0
    for name, rule in rules.items():
        if not snakemake_rules.runs_something(rule):
            continue
        for directive in ("script", "wrapper", "notebook"):
            assert getattr(rule, directive) is None, f"{name}: {directive}:"
        assert rule.shellcmd, f"{name}: run: or no shell line"  # a run: rule has no shell line
        shells += 1
        # training's launcher (torchrun / srun, train.launch.launcher) starts `imagenot` ranks,
        # each of which records its own line
        command = rule.shellcmd.removeprefix("{params.launch} ").removeprefix(f"{job_prefix()} ")
        assert command.startswith("imagenot "), f"{name}: shell line {rule.shellcmd!r}"
        assert command.endswith(" > {log:q} 2>&1"), f"{name}: a shell line not logged: {command!r}"
    assert shells >= 30
    common = (REPO / "rules" / "common.smk").read_text()
    assert "os.environ[job_usage.ENV] = " in common
