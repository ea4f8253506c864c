"""Documented commands work exactly as written from a fresh clone, with no activated venv
(issue 25, point 6): the benchmark commands of README.md and docs/*.md name the venv's
interpreter, name scripts and options that exist, and the Snakemake jobs they start find
``imagenot`` although the shell's PATH does not hold the venv."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_benchmark

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# a benchmark command as a user copies it: interpreter, script, then options up to the end of
# the code span or line
COMMAND = re.compile(
    r"(?P<python>[\w./-]*python3?) (?P<script>benchmarks/[\w]+\.py)(?P<args>[^`\n]*)"
)


def documented_commands() -> list[tuple[str, str, str, str]]:
    found = []
    for doc in DOCS:
        for m in COMMAND.finditer(doc.read_text(encoding="utf-8")):
            found.append((doc.name, m["python"], m["script"], m["args"]))
    return found


def test_documented_benchmark_commands_use_the_venv_interpreter_and_exist():
    commands = documented_commands()
    assert len(commands) > 10  # the pattern still finds the documented commands
    for doc, python, script, _ in commands:
        # a bare `python` is the system interpreter in a fresh shell: no torch, no imagenot
        assert python == ".venv/bin/python", f"{doc}: `{python} {script}` needs .venv/bin/python"
        assert (REPO / script).is_file(), f"{doc}: {script} does not exist"


@pytest.mark.parametrize("script", sorted({c[2] for c in documented_commands()}))
def test_documented_benchmark_options_exist(script):
    """Every option a document gives a benchmark is one its --help lists."""
    help_text = subprocess.run(
        [sys.executable, script, "--help"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    for doc, _, name, args in documented_commands():
        if name != script:
            continue
        for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", args):
            assert option in help_text, f"{doc}: {script} has no option {option}"


VENV_TOOLS = ("imagenot", "snakemake", "pytest", "python", "python3", "ruff")


def test_shell_blocks_run_the_venvs_tools_from_a_fresh_shell():
    """A ```bash block of README.md and docs/ is copied as is into a shell without an activated
    venv: a line starting with a tool the venv installs names it as `.venv/bin/<tool>`."""
    bad = []
    for doc in DOCS:
        block = False
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                block = line.startswith("```bash") and not block
                continue
            words = line.split()
            if block and words and words[0] in VENV_TOOLS:
                bad.append(f"{doc.name}:{number}: {line.strip()}")
    assert not bad, "use .venv/bin/<tool>:\n" + "\n".join(bad)


def test_benchmark_jobs_find_imagenot_without_an_activated_venv(monkeypatch):
    """A fresh shell's PATH has no venv: the jobs that a benchmark's Snakemake starts must still
    find `imagenot` and `snakemake` (before, every job failed with exit 127)."""
    run = load_benchmark("snakemake_run")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    env = run.snakemake_env()
    done = subprocess.run(["imagenot", "--help"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert Path(run.SNAKEMAKE).parent == Path(sys.executable).parent
