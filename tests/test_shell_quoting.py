"""Config values reach the rules' commands as data, never as shell code (imagenot.core.shell_line).

- Every field of every rule's shell line, as Snakemake holds the rule, is shell-quoted (``:q``)
  or one of ``shell_line.PREQUOTED``; a planted line with a bare field is refused.
- Planted config paths holding ``$(...)``, backticks, ``;``, quotes, spaces and a newline go
  through the workflow: Snakemake plans the jobs that read them, and each job's shell line, run
  by bash with a ``python`` that records its arguments, hands the command the path as one
  literal argument (or inside its ``--settings`` JSON) and runs nothing of it.
- A config path that would reach a command as an argument starting with ``-`` is refused by
  ``imagenot validate-config`` in one line naming the key; ``./-name`` passes.
- A YTE-templated config is refused by ``imagenot validate-config`` unread (a planted template
  that writes a file writes nothing) unless ``--allow-templates`` asks for it to be rendered.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import snakemake_rules
import yaml
from conftest import snakemake_workflow

from imagenot.core import shell_line

REPO = Path(__file__).resolve().parents[1]

# one path component holding every kind of shell syntax a file name can hold
HOSTILE = 'a b $(touch SUB) `touch TICK`; touch SEMI; it\'s "q" & | > x\nnl'
MARKERS = ("SUB", "TICK", "SEMI")

# a python that records its arguments instead of running a command
RECORDER = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["ARGV_OUT"], "w") as out:
    json.dump(sys.argv[1:], out)
"""


def test_a_bare_field_is_found_and_quoting_adds_the_spec():
    line = "imagenot x {input.a} --s {params.settings} --t {threads} {{literal}} {log:q}"
    assert shell_line.unquoted(line) == ["{input.a}", "{threads}"]
    done = shell_line.quoted(line)
    assert shell_line.unquoted(done) == []
    assert "{{literal}}" in done and "{params.settings}" in done and "{log:q}" in done


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The planned jobs of curate_match (laion.dir), diagnostics_wordnet_stats (a class list of
    diagnostics.class_lists) and acquire_materialise_range (datasets.<name>.path, in the
    settings JSON), with each path under a folder named HOSTILE; and the workflow's rules."""
    from snakemake.settings.types import DAGSettings

    work = tmp_path_factory.mktemp("work")
    hostile = work / HOSTILE
    (hostile / "laion").mkdir(parents=True)
    for shard in ("part-00000.parquet", "part-00001.parquet"):
        (hostile / "laion" / shard).write_bytes(b"")
    shutil.copy(REPO / "resources" / "demo_class_list.txt", hostile / "list.txt")
    (hostile / "fashion").symlink_to("/usr/share/datasets/fashion-mnist")
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["demo_world"]["enabled"] = False
    config["laion"]["dir"] = f"{HOSTILE}/laion"
    config["laion"]["shards"] = ["part-00000.parquet", "part-00001.parquet"]
    config["diagnostics"] = {"class_lists": {"hostile": f"{HOSTILE}/list.txt"}}
    config["datasets"]["fashion_mnist"]["path"] = str(hostile / "fashion")
    configfile = work / "hostile.yaml"
    configfile.write_text(yaml.safe_dump(config))
    targets = {
        "results/curate/matches/00000.parquet",
        "results/diagnostics/list-hostile/wordnet_stats.json",
        "results/acquire/fashion_mnist/ranges/range-0.parquet",
    }
    with snakemake_workflow(work, [configfile]) as api:
        api.dag(dag_settings=DAGSettings(targets=targets))
        workflow = api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        jobs = {
            job.rule.name: SimpleNamespace(
                line=job.shellcmd,
                input=[str(f) for f in job.input],
                written=[str(f) for f in [*job.output, *job.log]],
                params=job.params,
            )
            for job in workflow.dag.needrun_jobs()
        }
        lines = {rule.name: rule.shellcmd for rule in workflow.rules if rule.shellcmd}
    return work, hostile, jobs, lines


def test_every_field_of_every_rule_is_quoted(planted):
    _, _, _, lines = planted
    assert len(lines) > 30  # every stage's rules are read
    bare = {name: shell_line.unquoted(line) for name, line in lines.items()}
    assert {name: fields for name, fields in bare.items() if fields} == {}
    # the check reads the rules' lines: a rule whose line bypasses job() is found
    assert shell_line.unquoted("imagenot match {input.shard} > {log}") == ["{input.shard}", "{log}"]


def _bare_shells(lines: dict[str, str | None]) -> list[str]:
    """The rules of ``lines`` (rule name -> its shell line as Snakemake holds it, None for none)
    whose line is not one ``job()`` built (rules/common.smk): the job's prefix
    (``lifeline.job_prefix()``, or a training job's ``{params.launch}``) before an ``imagenot``
    command whose every field is quoted."""
    from imagenot.core.lifeline import job_prefix

    prefixes = (f"{job_prefix()} imagenot ", "{params.launch} imagenot ")
    return sorted(
        name
        for name, line in lines.items()
        if not (line or "").startswith(prefixes) or shell_line.unquoted(line)
    )


def test_every_shell_line_is_built_by_job():
    """Every rule, those defined only under some configs (the scale world's) included
    (tests/snakemake_rules.py: the demo config with the scale world on), runs a ``job(...)`` or
    ``step(...)`` line, which quotes."""
    from imagenot.core.lifeline import job_prefix

    rules = snakemake_rules.rules()
    assert "scale_world" in rules
    lines = {n: r.shellcmd for n, r in rules.items() if snakemake_rules.runs_something(r)}
    assert len(lines) > 30
    assert _bare_shells(lines) == []
    planted = {
        "a": f"{job_prefix()} imagenot x {{input.a:q}} > {{log:q}} 2>&1",
        "b": "cat {input:q} > {log:q} 2>&1",  # not job()'s
        "c": None,  # run:
        "d": f"{job_prefix()} imagenot x {{input.a}} > {{log:q}} 2>&1",  # a bare field
        "e": "{params.launch} imagenot train-x {output.y:q}",
    }
    assert _bare_shells(planted) == ["b", "c", "d"]


def _run(line: str, cwd: Path, argv_out: Path) -> subprocess.CompletedProcess:
    """``line`` run by bash in ``cwd``, ``python`` recording its arguments in ``argv_out``."""
    bin_dir = cwd / "recorder-bin"
    bin_dir.mkdir(exist_ok=True)
    python = bin_dir / "python"
    python.write_text(RECORDER)
    python.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ARGV_OUT": str(argv_out)}
    env["IMAGENOT_CHECKOUT"] = str(REPO / "workflow")  # as rules/common.smk sets it
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.parametrize(
    "rule", ["curate_match", "diagnostics_wordnet_stats", "acquire_materialise_range"]
)
def test_a_hostile_config_path_reaches_its_command_literally(planted, rule):
    work, hostile, jobs, _ = planted
    job = jobs[rule]
    assert "$(touch SUB)" in job.line  # the planted path is in the line Snakemake runs
    for path in job.written:  # the folders Snakemake makes before a job
        (work / path).parent.mkdir(parents=True, exist_ok=True)
    argv_out = work / f"{rule}.argv.json"
    done = _run(job.line, work, argv_out)
    assert done.returncode == 0, done.stderr
    argv = json.loads(argv_out.read_text())
    assert argv[:2] == ["-m", "imagenot"]
    for marker in MARKERS:  # nothing of the path ran
        assert not list(work.rglob(marker)), marker
    if rule == "acquire_materialise_range":
        settings = json.loads(argv[argv.index("--settings") + 1])
        assert settings["path"] == str(hostile / "fashion")
        assert [settings] == [json.loads(w) for w in shlex.split(job.params.settings)]
    else:  # every planted input is one argument, as Snakemake planned it
        planted_inputs = [path for path in job.input if HOSTILE in path]
        assert planted_inputs and all(path in argv for path in planted_inputs)


def _validate(tmp_path: Path, overlay: dict) -> subprocess.CompletedProcess:
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(overlay))
    cmd = [sys.executable, "-m", "imagenot", "validate-config"]
    cmd += [str(REPO / "config" / "config.yaml"), str(path)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_a_config_path_that_reads_as_an_option_is_refused_by_key():
    config = {
        "laion": {"dir": "-laion"},
        "train": {"weights_dir": "./-w"},
        "diagnostics": {"reference_classes": None, "class_lists": {"a": "l.txt", "b": "-b.txt"}},
    }
    with pytest.raises(ValueError, match=r"^config key laion\.dir: '-laion' starts with '-'"):
        shell_line.check(config)
    config["laion"]["dir"] = "./-laion"  # the same folder, read as a value
    with pytest.raises(ValueError, match=r"^config key diagnostics\.class_lists\.b: '-b\.txt'"):
        shell_line.check(config)
    config["diagnostics"]["class_lists"]["b"] = "b.txt"
    shell_line.check(config)  # healthy: nothing starts with '-'
    config["diagnostics"]["reference_classes"] = "-ref.txt"
    with pytest.raises(ValueError, match=r"^config key diagnostics\.reference_classes"):
        shell_line.check(config)
    config["diagnostics"]["reference_classes"] = None
    config["scale_world"] = {"captions": "-captions.parquet"}
    with pytest.raises(ValueError, match=r"^config key scale_world\.captions"):
        shell_line.check(config)


def test_validate_config_refuses_a_leading_dash_in_one_line(tmp_path):
    done = _validate(tmp_path, {"train": {"weights_dir": "-weights"}})
    assert done.returncode != 0
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert (
        len(lines) == 1 and "config key train.weights_dir: '-weights' starts with '-'" in lines[0]
    )


TEMPLATE = """\
__use_yte__: true
__definitions__:
  - import pathlib
  - pathlib.Path("RAN").write_text("the template's code ran")
seed: 0
"""


def test_validate_config_reads_a_templated_config_without_running_it(tmp_path):
    template = tmp_path / "sent.yaml"
    template.write_text(TEMPLATE)
    base = str(REPO / "config" / "config.yaml")
    cmd = [sys.executable, "-m", "imagenot", "validate-config", base, str(template)]
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}

    def validate(*flags):
        return subprocess.run([*cmd, *flags], cwd=tmp_path, env=env, capture_output=True, text=True)

    refused = validate()
    assert refused.returncode != 0 and not (tmp_path / "RAN").exists()
    lines = [ln for ln in refused.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "is a YTE template (__use_yte__)" in lines[0], refused.stderr
    assert "--allow-templates" in lines[0]
    # asked for by the flag, the template is rendered as Snakemake renders it
    allowed = validate("--allow-templates")
    assert allowed.returncode == 0, allowed.stderr
    assert (tmp_path / "RAN").read_text() == "the template's code ran"
