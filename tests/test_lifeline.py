"""No process outlives its job, no output appears after a failure.

A toy workflow on the CPU whose one job is a writer that writes when the test lets it
(tests/lifeline_writer.py: bound to its parent as every workflow job's ``imagenot`` command is,
writing through ``imagenot.core.io`` once ``out.txt.go`` exists), run with the workflow's shell prefix
(``exec``): Snakemake killed with SIGKILL, or the job's process sent SIGTERM, leaves no process
behind and no output, and the next ``snakemake -n`` plans the job again. A writer that finishes a
checkpoint on SIGTERM instead of dying (the train jobs) is stopped at its write. The test lets
the writer write only after the kill, so the order of events, not their timing, decides each
outcome. The rules' shell lines are single commands, so ``exec`` covers every one.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import snakemake_rules

from imagenot.core.lifeline import SHELL_PREFIX

REPO = Path(__file__).resolve().parents[1]
WRITER = REPO / "tests" / "lifeline_writer.py"
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")


def _workflow(tmp_path: Path, options: str = "", shell: str = "{cmd}") -> Path:
    """A one-rule workflow in ``tmp_path`` whose job runs the writer (``shell`` wraps it)."""
    cmd = f"{sys.executable} {WRITER} {{output}} {options}".strip()
    (tmp_path / "Snakefile").write_text(
        f"shell.prefix({SHELL_PREFIX!r})\n\n"
        "rule slow:\n"
        '    output: "out.txt"\n'
        f"    shell: {shell.format(cmd=cmd)!r}\n"
    )
    return tmp_path


def _start(wd: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    return subprocess.Popen(
        [SNAKEMAKE, "--cores", "1", "-d", str(wd), "-s", str(wd / "Snakefile")],
        cwd=wd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _wait_for(what, condition, seconds: float = 90) -> None:
    """Wait for an event (a bound, not a timing assertion: the events here take well under a
    second when the mechanism works, and never happen when it does not)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _let_write(wd: Path) -> None:
    """Let the writer go on to its write (tests/lifeline_writer.py waits for this file)."""
    (wd / "out.txt.go").touch()


def _writer_pid(wd: Path) -> int:
    pid_file = wd / "out.txt.pid"
    _wait_for("the job to start", lambda: pid_file.exists() and pid_file.read_text())
    return int(pid_file.read_text())


def _planned_again(wd: Path) -> bool:
    run = subprocess.run(
        [SNAKEMAKE, "-n", "--cores", "1", "-d", str(wd), "-s", str(wd / "Snakefile")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "workflow")},
    )
    assert run.returncode == 0, run.stderr
    return "slow" in run.stdout and "Nothing to be done" not in run.stdout + run.stderr


@pytest.mark.parametrize(
    ("options", "shell"),
    [
        ("", "{cmd}"),  # the workflow's rules: the command replaces the shell (exec)
        ("--ignore-term", "{cmd}"),  # a command that checkpoints on SIGTERM: stopped at its write
    ],
    ids=["exec", "ignores-sigterm"],
)
def test_kill_9_of_snakemake_leaves_no_process_and_no_output(tmp_path, options, shell):
    wd = _workflow(tmp_path, options=options, shell=shell)
    smk = _start(wd)
    try:
        writer = _writer_pid(wd)
        family = psutil.Process(smk.pid).children(recursive=True)
        assert writer in {p.pid for p in family}
        smk.kill()
        smk.wait(timeout=30)
        # the writer that ignores SIGTERM lives on until it tries to write: let it, now that
        # its job has ended
        _let_write(wd)
        _wait_for("the job's processes to end", lambda: all(_gone(p.pid) for p in family))
        assert _gone(writer)
    finally:
        if smk.poll() is None:
            smk.kill()
        _let_write(wd)  # a writer left behind by a failed check ends at its write
    assert not (wd / "out.txt").exists()
    assert _planned_again(wd)


@pytest.mark.parametrize(
    "shell",
    [
        "{cmd}",  # the workflow's rules: the job's shell *is* the command (exec)
        "bash -c '{cmd}; true'",  # a shell left between: the command dies with it (lifeline)
    ],
    ids=["exec", "nested-shell"],
)
def test_sigterm_to_the_jobs_shell_fails_the_job_and_nothing_is_written_later(tmp_path, shell):
    wd = _workflow(tmp_path, shell=shell)
    smk = _start(wd)
    try:
        writer = _writer_pid(wd)
        job_shell = psutil.Process(writer).parent()
        if shell == "{cmd}":
            assert job_shell.pid == smk.pid or "snakemake" in " ".join(job_shell.cmdline())
            job_shell = psutil.Process(writer)
        else:
            assert "bash" in job_shell.name()
        job_shell.send_signal(signal.SIGTERM)
        assert smk.wait(timeout=90) != 0  # Snakemake records the job failed
    finally:
        if smk.poll() is None:
            smk.kill()
        _let_write(wd)  # the write the writer was waiting for: it must never come now
    _wait_for("the job to end", lambda: _gone(writer))
    assert not (wd / "out.txt").exists()
    assert _planned_again(wd)


def test_an_unkilled_job_still_writes_its_output(tmp_path):
    """The checks do not stop a job whose workflow is alive (the tests above could pass on a
    writer that never writes)."""
    wd = _workflow(tmp_path)
    _let_write(wd)
    smk = _start(wd)
    try:
        assert smk.wait(timeout=120) == 0, smk.stderr.read()
    finally:
        if smk.poll() is None:
            os.killpg(smk.pid, signal.SIGKILL)  # its job dies with it (the lifeline)
    assert (wd / "out.txt").read_text() == "done\n"


def test_every_rule_runs_one_command_that_replaces_its_shell():
    """``exec`` at the start of every rule's line (its own, not a global ``shell.prefix``, which
    would change a host workflow's rules) replaces the shell with the first command of a line: a
    second command (``;``, ``&&``, ``|``, ``$(...)``) would never run, or would keep a shell
    alive. The lines are read on the rules as Snakemake holds them (tests/snakemake_rules.py);
    that rules/common.smk sets no global prefix is read in its code (Python, no rule)."""
    from imagenot.core.lifeline import job_prefix

    common = (REPO / "rules" / "common.smk").read_text()
    assert "shell.prefix(" not in common and "lifeline.job_prefix()" in common
    assert SHELL_PREFIX.rstrip().endswith("exec")
    assert job_prefix().startswith("set -euo pipefail; ") and " exec python -m" in job_prefix()
    n = 0
    for name, rule in snakemake_rules.rules().items():
        if not snakemake_rules.runs_something(rule):
            continue
        line = rule.shellcmd
        assert line, f"{name}: run: or no shell line"  # a run: rule has no shell line
        n += 1
        command = line.removeprefix(f"{job_prefix()} ").removeprefix("{params.launch} ")
        assert command != line and command.startswith("imagenot "), f"{name}: {line}"
        assert not re.search(r"&&|\|\||;|\||\$\(|`", command), f"{name}: {line}"
    assert n > 20


def test_a_workflow_jobs_imagenot_command_binds_to_its_parent(tmp_path):
    """``imagenot`` run by a workflow job (rules/common.smk sets job_usage.ENV) asks for the
    lifeline; run by hand it does not."""
    from imagenot.core import job_usage

    code = (
        "from imagenot import cli; from imagenot.core import lifeline;"
        f" cli.main(['validate-config', {str(REPO / 'config' / 'config.yaml')!r}]);"
        " print('bound' if lifeline._bound else 'free')"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    for value, expected in (("1", "bound"), ("", "free")):
        run = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,  # results/ there, never the working tree's
            env={**env, job_usage.ENV: value},
            capture_output=True,
            text=True,
        )
        assert run.stdout.strip().splitlines()[-1] == expected, run.stderr


def test_a_process_whose_given_parent_is_gone_ends_when_it_binds():
    """A pool's worker is handed its job's pid (``bind_to_parent(parent=...)``): one still starting
    when its job was killed has another parent by the time it binds, and ends then; one whose
    parent is the given one goes on."""
    code = (
        "import os, sys; from imagenot.core import lifeline;"
        " lifeline.bind_to_parent(parent=int(sys.argv[1])); print('alive')"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    ours = subprocess.run(
        [sys.executable, "-c", code, str(os.getpid())], env=env, capture_output=True, text=True
    )
    assert ours.returncode == 0 and ours.stdout.strip() == "alive", ours.stderr
    # planted: a parent that is not this process's (the job that started it, since killed)
    gone = subprocess.run(
        [sys.executable, "-c", code, str(os.getpid() + 10**6)], env=env, capture_output=True
    )
    assert gone.returncode == -signal.SIGTERM and b"alive" not in gone.stdout
