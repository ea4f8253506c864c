"""Documented commands work exactly as written from a fresh clone, with no activated venv:
the benchmark commands of README.md and docs/*.md name the venv's
interpreter, name scripts and options that exist, and the Snakemake jobs they start find
``imagenot`` although the shell's PATH does not hold the venv."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import NO_SLURM, load_benchmark
from trial_records import write_slot

from imagenot.plan.planning import placeholder_overlay

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


VENV_TOOLS = ("imagenot", "snakemake", "pytest", "python", "python3", "pip", "ruff")


# where one command of a shell line ends and the next begins
COMMAND_BREAK = re.compile(r"&&|\|\||[;|]|\$\(")


def test_shell_blocks_run_the_venvs_tools_from_a_fresh_shell():
    """A ```bash block of README.md and docs/ is copied as is into a shell without an activated
    venv: each command of a line (after `&&`, `|`, `;` or `$(` too) that starts with a tool the
    venv installs names it as `.venv/bin/<tool>`."""
    bad = []
    for doc in DOCS:
        block = False
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("```"):
                block = line.startswith("```bash") and not block
                continue
            if not block or line.lstrip().startswith("#"):
                continue
            for command in COMMAND_BREAK.split(line):
                words = command.split()
                if words and words[0] in VENV_TOOLS:
                    bad.append(f"{doc.name}:{number}: {line.strip()}")
    assert not bad, "use .venv/bin/<tool>:\n" + "\n".join(bad)


# An inline code span that starts with one of the workflow's commands (`imagenot ...`,
# `snakemake ...`) or with the venv's interpreter, test runner or installer (`python ...`,
# `pytest ...`, `pip ...`), outside fenced blocks.
INLINE_COMMAND = re.compile(r"(?<![`\w/.])`((?:imagenot|snakemake|python3?|pytest|pip)\s[^`]*)`")


def inline_commands(text: str) -> list[tuple[int, str]]:
    """(line, span) of each inline code span of a document that is a command to run: a workflow
    command or a venv tool with an argument or an option (`snakemake -n`, `imagenot ci --n 100`,
    `python tests/test_envs.py --write`; a name alone, `imagenot rankings`, is the command's
    name), outside fenced blocks and headings. A bare `python`, `pytest` or `pip` is the
    venv's when the span runs or installs a file of the clone (`pytest tests/x.py`,
    `pip install -r envs/requirements.lock`); one that names none (`python -m imagenot` in a
    job's env, `python3 -m venv`, `pip install .` into an environment of the reader's) is
    another environment's tool. A span
    that elides or templates its arguments (`imagenot ... > {log} 2>&1`: a rule's shell line)
    is no command to copy."""
    prose = FENCE.sub(lambda m: "\n" * m[0].count("\n"), text)
    found = []
    for m in INLINE_COMMAND.finditer(prose):
        words = m[1].split()
        line_start = prose.rfind("\n", 0, m.start()) + 1
        if "{" in m[1] or "..." in m[1] or prose[line_start:].startswith("#"):
            continue
        minimum = 3 if words[0] == "imagenot" else 2  # imagenot SUB ARG; snakemake OPTION
        if words[0] not in ("imagenot", "snakemake") and not any(
            w != "." and (REPO / w.split("/")[0]).exists() for w in words[1:]
        ):
            continue
        if len(words) >= minimum or any(w.startswith("-") for w in words[1:]):
            found.append((prose.count("\n", 0, m.start()) + 1, " ".join(words)))
    return found


def test_inline_commands_name_the_venvs_tools():
    """A command printed in the prose (`.venv/bin/snakemake -n`) runs as printed without an
    activated venv, as a ```bash block's does: it names `.venv/bin/<tool>`."""
    bad = [
        f"{doc.relative_to(REPO)}:{line}: `{span}`"
        for doc in DOCS
        for line, span in inline_commands(doc.read_text(encoding="utf-8"))
    ]
    assert not bad, "name .venv/bin/<tool> in these spans:\n" + "\n".join(bad)


def test_inline_commands_are_told_from_command_names():
    """The planted cases of the check above: bare commands with arguments are found, in a table
    cell or across a line break too; names, prefixed commands, rule shell lines and headings
    are not."""
    text = (
        "Run `snakemake -n` or `imagenot ci --accuracy 75 --n 100`; `imagenot rankings TABLE\n"
        "--report DIR` | `imagenot validate-config my.yaml` |\n"
        "`python tests/test_envs.py --write`, `pytest tests/test_figures.py -x`, and\n"
        "`pip install -r envs/requirements.lock`;\n"
        "Not: `imagenot rankings`, `imagenot`, `.venv/bin/snakemake -n`, `imagenot ... > {log}`,\n"
        "`python -m imagenot`, `python3 -m venv`, `pip install .`, `.venv/bin/pytest tests -x`,\n"
        "```bash\nsnakemake -n\n```\n"
        "## What `snakemake --report` trusts\n"
    )
    assert inline_commands(text) == [
        (1, "snakemake -n"),
        (1, "imagenot ci --accuracy 75 --n 100"),
        (1, "imagenot rankings TABLE --report DIR"),
        (2, "imagenot validate-config my.yaml"),
        (3, "python tests/test_envs.py --write"),
        (3, "pytest tests/test_figures.py -x"),
        (4, "pip install -r envs/requirements.lock"),
    ]


def test_benchmark_jobs_find_imagenot_without_an_activated_venv(monkeypatch):
    """A fresh shell's PATH has no venv: the jobs that a benchmark's Snakemake starts must still
    find `imagenot` and `snakemake` (else every job fails with exit 127)."""
    run = load_benchmark("snakemake_run")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    env = run.snakemake_env()
    done = subprocess.run(["imagenot", "--help"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert Path(run.SNAKEMAKE).parent == Path(sys.executable).parent


# ---- every fenced command block, as printed -------------------------------------------
# Each ```bash block of README.md and docs/*.md is run from the root of a fresh clone (a folder
# shaped like one: the checkout's files linked, no results/), in a shell whose PATH holds no venv
# and whose HOME is empty, in document order: a command may use what an earlier one wrote (the
# site profile). A ```yaml block whose first line names a file (`# my-change.yaml`) is written
# there first. Commands that would run for minutes are checked with -n or --help (`mode` says
# which and why), so a drifted document fails here.
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
NAMED_YAML = re.compile(r"#\s*(?P<name>[\w.-]+\.ya?ml)\s*$")
# The paper as README section 4 prints it: a changed line fails until this test changes with it.
PAPER_COMMAND = (
    ".venv/bin/snakemake --profile slurm --configfile config/paper.yaml"
    " --directory ../imagenot-paper"
)
SITE_COMMAND = (
    ".venv/bin/imagenot slurm-profile --partition cpu --gpu-partition gpu --account my_lab"
)
CLONE = "imagenot"  # the fake clone's folder name, as docs/cluster.md's `../imagenot` names it


def fenced_blocks(doc: Path) -> list[tuple[int, str, str]]:
    """(line of the opening fence, language, body) of every fenced block of ``doc``."""
    text = doc.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 1, m["lang"], m["body"]) for m in FENCE.finditer(text)
    ]


def shell_commands(body: str, first: int) -> list[tuple[int, str]]:
    """(line, command) of a shell block: continuation lines joined, comment lines dropped."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, line in enumerate(body.splitlines(), first + 1):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        start = start if pending else number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line.strip()))
        pending = ""
    return out


def mode(tokens: list[str]) -> tuple[str, str]:
    """How a documented command is checked, and why."""
    program = tokens[0]
    if program == "make":
        return "make-n", "the whole demo or test suite takes minutes: `make -n` checks the target"
    if program == "apptainer":
        return "skip", "building the image takes minutes and Apptainer; its input must exist"
    if program == "bash" and tokens[1].startswith("benchmarks/"):
        assert (REPO / tokens[1]).is_file(), f"{tokens[1]} does not exist"
        return "skip", (
            "a GPU check: minutes on one GPU; its --cpu smoke run is tests/test_gpu_check.py"
        )
    if program == ".venv/bin/python" and tokens[1].startswith("benchmarks/"):
        return "help", "a benchmark runs for minutes: --help loads the script (options: above)"
    if program.endswith(".venv/bin/snakemake"):
        if {"--dag", "--rulegraph"} & set(tokens):
            return "run", "draws the plan only"
        return "dry", "a run builds datasets and trains models: -n plans every job of it"
    if program.endswith(".venv/bin/imagenot"):
        return "run", "seconds on the CPU"
    raise AssertionError(f"no rule for `{program}`: add one to mode() in this test")


def fake_clone(root: Path) -> Path:
    """``root/imagenot`` shaped like a fresh clone: this checkout's files linked, config/ copied
    with config/paper.yaml pointed at a small fake data layout under ``root`` (empty LAION parts
    named as the config lists them, ImageNet / CIFAR-10 / weights folders; the authors' class
    lists and the published tables are the clone's own, in resources/), no results/."""
    from snakemake.utils import update_config

    clone = root / CLONE
    clone.mkdir()
    for name in (
        *("Snakefile", "rules", "workflow", "profiles", "envs", "report", "resources"),
        *("containers", "benchmarks", "scripts", "tests", "docs", ".test", ".venv"),
        *("Makefile", "pyproject.toml"),
    ):
        if (REPO / name).exists():
            (clone / name).symlink_to(REPO / name)
    (clone / "config").mkdir()
    for config in (REPO / "config").glob("*.yaml"):
        (clone / "config" / config.name).write_text(config.read_text())
    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    update_config(paper, placeholder_overlay(root / "data", paper))
    (clone / "config" / "paper.yaml").write_text(yaml.safe_dump(paper, sort_keys=False))
    return clone


def fresh_shell(home: Path) -> dict[str, str]:
    """A new user's shell: no venv on PATH (the scontrol stub of conftest kept: no SLURM
    here), an empty HOME."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join([str(NO_SLURM), "/usr/bin", "/bin"])
    env["HOME"] = str(home)
    return env


def _no_deployment_tool(home: Path, tokens: list[str]) -> list[str]:
    """`--sdm env-modules` when the site profile's deployment tool (conda, apptainer) is not
    installed here: -n then plans without creating environments. Nothing otherwise."""
    if "slurm" not in tokens:
        return []
    site = yaml.safe_load((home / ".config/snakemake/slurm/config.yaml").read_text())
    method = site.get("software-deployment-method")  # none: the clone's .venv, nothing to deploy
    return [] if method is None or shutil.which(method) else ["--sdm", "env-modules"]


def _same_plan_key(tokens: list[str]) -> tuple[str, ...]:
    """A dry run's command with its ``--directory`` named only as "a sibling of the clone": two
    commands of one document that differ only in which empty sibling folder they run in (the
    paper in ../imagenot-paper, then in ../imagenot-run) plan the same jobs from the same
    relative paths, and the second is not planned again (a paper plan is about 16 CPU-s)."""
    out = list(tokens)
    if "--directory" in out:
        at = out.index("--directory") + 1
        if at < len(out) and Path(out[at]).parent == Path(".."):
            out[at] = "../<sibling>"
    return tuple(out)


def test_a_plan_in_another_sibling_folder_is_the_same_plan_and_nothing_else_is():
    paper = shlex.split(PAPER_COMMAND)
    elsewhere = [*paper[:-1], "../imagenot-run"]
    assert _same_plan_key(elsewhere) == _same_plan_key(paper)
    assert _same_plan_key([*paper[:-1], "/scratch/run"]) != _same_plan_key(paper)  # not a sibling
    assert _same_plan_key(paper[:-2]) != _same_plan_key(paper)  # the clone itself
    assert _same_plan_key([*paper[:2], "preflight", *paper[2:]]) != _same_plan_key(paper)


def run_documented(doc: Path, root: Path, done: dict[str, str]) -> list[str]:
    """Run ``doc``'s blocks in a fresh clone under ``root``; the failures, one message each.
    ``done``: commands already run as printed (command -> where), not run twice."""
    clone, home = fake_clone(root), root / "home"
    home.mkdir()
    env, failures = fresh_shell(home), []
    planned: dict[tuple[str, ...], str] = {}  # this document's dry runs, by _same_plan_key
    for first, lang, body in fenced_blocks(doc):
        named = NAMED_YAML.fullmatch(body.splitlines()[0]) if lang == "yaml" else None
        if named:
            (clone / named["name"]).write_text(body)
        if lang != "bash":
            continue
        for line, command in shell_commands(body, first):
            where = f"{doc.name}:{line}"
            tokens = shlex.split(command, comments=True)
            how, why = mode(tokens)
            # a trailing comment makes no other command; a site profile is written into each
            # document's own fresh HOME, so `slurm-profile` runs wherever it is printed
            same = shlex.join(tokens)
            if same in done and "slurm-profile" not in tokens:
                print(f"{where}: as at {done[same]}")
                if how == "dry":
                    planned.setdefault(_same_plan_key(tokens), where)
                continue
            if how == "dry" and _same_plan_key(tokens) in planned:
                print(f"{where}: the plan of {planned[_same_plan_key(tokens)]} in another folder")
                continue
            print(f"{where}: {how} ({why}): {command}")
            if how == "skip":
                assert all((clone / t).exists() for t in tokens if t.endswith(".def")), where
                continue
            argv = {
                "run": ["bash", "-o", "pipefail", "-c", command],
                "dry": [*tokens, "-n", *_no_deployment_tool(home, tokens)],
                "make-n": ["make", "-n", *tokens[1:]],
                "help": [*tokens[:2], "--help"],
            }[how]
            ran = subprocess.run(
                argv, cwd=clone, env=env, capture_output=True,
                text=True, timeout=600,
            )  # fmt: skip
            out = ran.stdout + ran.stderr
            if ran.returncode != 0:
                failures.append(f"{where}: `{command}` exited {ran.returncode}:\n{out[-3000:]}")
                continue
            done[same] = where
            if how == "dry":
                planned[_same_plan_key(tokens)] = where
            if command == PAPER_COMMAND:  # the paper alone: its rules, none of the demo's
                models = yaml.safe_load((clone / "config" / "paper.yaml").read_text())
                published = rf"^train_published\s+{len(models['train']['models'])}$"
                assert re.search(published, out, re.M), out[-3000:]
                assert "demo_world" not in out, out[-3000:]
    return failures


_DONE: dict[str, str] = {}  # the same command in two documents runs once (command -> where)


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_documented_command_block_works_as_printed(doc, tmp_path):
    failures = run_documented(doc, tmp_path, _DONE)
    assert not failures, "\n\n".join(failures)


def test_the_readme_prints_the_paper_command_this_test_runs():
    """README section 4's run is PAPER_COMMAND exactly (and the site profile before it), so
    the command the block test plans is the one users copy."""
    commands = [
        c for first, lang, body in fenced_blocks(REPO / "README.md") if lang == "bash"
        for _, c in shell_commands(body, first)
    ]  # fmt: skip
    assert PAPER_COMMAND in commands
    assert any(c.startswith(SITE_COMMAND) for c in commands)
    assert commands.index(PAPER_COMMAND) > next(
        i for i, c in enumerate(commands) if c.startswith(SITE_COMMAND)
    )


def test_validate_config_checks_the_config_snakemake_reads(tmp_path):
    """A --configfile is the whole config, never merged over config/config.yaml (which Snakemake
    reads only without one): at the clone's root an overlay given alone is refused by
    `snakemake -n` with the line `imagenot validate-config` prints for it, and accepted by both
    after its base (Snakemake's rule: it does not merge it over the demo config)."""
    clone = fake_clone(tmp_path)
    env = fresh_shell(tmp_path / "home")
    (clone / "my-changes.yaml").write_text("curate:\n  threshold: 0.6\n")

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True)

    checked = run(".venv/bin/imagenot", "validate-config", "my-changes.yaml")
    assert checked.returncode == 2, checked.stdout
    message = checked.stderr.strip().split("error: ", 1)[1]
    assert message.startswith("my-changes.yaml: "), message  # the file, named as given
    planned = run(".venv/bin/snakemake", "-n", "--configfile", "my-changes.yaml")
    assert planned.returncode != 0, planned.stdout[-2000:]
    assert f"invalid workflow config: {message}" in planned.stdout + planned.stderr
    based = run(".venv/bin/imagenot", "validate-config", "config/config.yaml", "my-changes.yaml")
    assert based.returncode == 0, based.stderr  # and -n plans it: README section 5's block


def test_a_local_run_finds_imagenot_without_an_activated_venv(tmp_path):
    """`.venv/bin/snakemake ...` from a shell whose PATH has no venv: the job's shell line finds
    `imagenot` (rules/common.smk puts the bin folder of Snakemake's interpreter first on PATH).
    Before, every job exited 127 after Snakemake had removed its old outputs. One real job, the
    cheapest: WordNet as an NLTK corpus."""
    clone = fake_clone(tmp_path)
    env = fresh_shell(tmp_path / "home")
    assert shutil.which("imagenot", path=env["PATH"]) is None
    ran = subprocess.run(
        [".venv/bin/snakemake", "--cores", "1", "results/wordnet/nltk_data"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    log = clone / "results" / "logs" / "prepare_wordnet.log"
    assert ran.returncode == 0, (ran.stderr[-3000:], log.read_text() if log.is_file() else "")
    assert "WordNet ready" in log.read_text()


def test_the_readme_rule_graph_is_the_demos(tmp_path):
    """docs/rulegraph.svg, README's picture (`make rulegraph`), has exactly the rules of the demo
    config's rule graph: a rule added to the workflow fails here until the picture is redrawn
    (three training rules were missing)."""
    clone = fake_clone(tmp_path)
    ran = subprocess.run(
        [".venv/bin/snakemake", "--rulegraph"], cwd=clone, env=fresh_shell(tmp_path / "home"),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    planned = set(re.findall(r'\[label = "(\w+)"', ran.stdout))
    drawn = set(re.findall(r">(\w+)</text>", (REPO / "docs" / "rulegraph.svg").read_text()))
    assert len(planned) > 30
    assert planned == drawn, (
        f"run make rulegraph: missing {planned - drawn}, extra {drawn - planned}"
    )


PYTEST_SPAN = re.compile(r"`(\.venv/bin/python -m pytest [^`]*)`")


def test_documented_pytest_commands_select_tests(tmp_path):
    """A documented `.venv/bin/python -m pytest ... -k WORD` selects at least one test (pytest
    exits 5 when none is collected): `-k resume` on a module without such a test ran nothing."""
    found = [(d.name, m[1]) for d in DOCS for m in PYTEST_SPAN.finditer(d.read_text("utf-8"))]
    assert found
    for doc, command in found:
        argv = [*shlex.split(command), "--collect-only", "-q", "-p", "no:cacheprovider"]
        ran = subprocess.run(
            argv, cwd=REPO, env=fresh_shell(tmp_path), capture_output=True, text=True
        )
        assert ran.returncode == 0, f"{doc}: `{command}` selects no test:\n{ran.stdout[-1000:]}"


# README section 5's change and docs/reruns.md's amendment of it
CHANGE_DOCS = (REPO / "README.md", REPO / "docs" / "reruns.md")


def _readme_yaml(name: str) -> dict:
    """The ```yaml block whose first line names ``name``, in README.md or docs/reruns.md."""
    for doc in CHANGE_DOCS:
        for _, lang, body in fenced_blocks(doc):
            named = NAMED_YAML.fullmatch(body.splitlines()[0]) if lang == "yaml" else None
            if named and named["name"] == name:
                return yaml.safe_load(body)
    raise AssertionError(f"neither README nor docs/reruns.md has a yaml block named {name}")


# Validation accuracies (%) for every trial of the demo's record, by name: two fixed ones (the
# named model at chance, or trained) and seeded draws of any value; 10 classes, 100 validation
# images (an accuracy is a whole number of them), so that at chance means at most 19 %.
ACCURACIES = {
    "every trial at chance": lambda rng: 9.0,
    "every trial trained": lambda rng: 80.0,
    **{f"drawn {seed}": (lambda rng: float(rng.randint(0, 100))) for seed in range(6)},
}


def test_the_readme_changes_hold_whatever_the_demos_accuracies(tmp_path, monkeypatch):
    """README section 5's my-change.yaml and docs/reruns.md's my-amendment.yaml, as printed,
    against the demo's preregistration record with every trial's result, under accuracies of
    any value (a machine's own: README section 2): the new model is accepted and leaves the five models' training
    settings as they were; AlexNet-mini's override alone is refused naming `scope: model`;
    with its amendment it is accepted exactly when that model's trials are all at chance, and
    otherwise refused naming "trained above chance"."""
    import copy
    import json
    import random

    from imagenot.core.config import merge_configs, read_config_file, resolve_additions
    from imagenot.core.stages import check_workflow_config
    from imagenot.train import plan as train_plan
    from imagenot.train.paths import PREREGISTRATION, TRAIN
    from imagenot.train.prereg import register, trial_results
    from imagenot.train.search import at_chance
    from imagenot.train.settings import DrawSettings, FinalSettings, TrialSettings

    change, amended = _readme_yaml("my-change.yaml"), _readme_yaml("my-amendment.yaml")
    # the prose before the amendment: the same override, for AlexNet-mini, with the five models
    assert "`{alexnet_mini: 8}` in place of `{convnext_mini: 8}`" in " ".join(
        CHANGE_DOCS[1].read_text(encoding="utf-8").split()
    )
    swapped = json.dumps(change["train"]["spaces"]).replace("convnext_mini", "alexnet_mini")
    assert amended["train"]["spaces"] == json.loads(swapped)
    (amendment,) = amended["train"]["amendments"]
    demo = read_config_file(REPO / "config" / "config.yaml")
    monkeypatch.chdir(tmp_path)
    valid = check_workflow_config(copy.deepcopy(demo), against_results=False)
    drawn = [DrawSettings.from_config(valid, *run) for run in train_plan._drawn(valid)]
    for s in drawn:
        register(
            tmp_path / PREREGISTRATION,
            s.experiment,
            s.definition,
            s.model,
            s.amendments,
            tmp_path / TRAIN / s.experiment,
            s.model_settings,
        )

    def checked(overlay: dict) -> dict:
        merged = merge_configs(copy.deepcopy(demo), copy.deepcopy(overlay))
        return check_workflow_config(
            resolve_additions(merged, [("config.yaml", demo), ("overlay", overlay)])
        )

    outcomes = {}
    for name, accuracy in ACCURACIES.items():
        rng = random.Random(name)
        for s in drawn:
            for trial in range(s.definition["budget"]):
                slot = tmp_path / TRAIN / s.experiment / s.model / "stage-0" / f"slot-{trial}.json"
                write_slot(slot, trial=trial, num_classes=10, n_val=100, val_accuracy=accuracy(rng))
        # my-change.yaml: a model without results, accepted; the trained ones' jobs unchanged
        new = checked(change)
        added = {(d, p) for d, p, m in train_plan._drawn(new) if m == "convnext_mini"}
        assert len(added) == len(valid["train"]["experiments"]) == 4, name
        for d, p, m in train_plan._drawn(valid):
            for settings, extra in (
                (DrawSettings, ()),
                (TrialSettings, (0,)),
                (FinalSettings, (0,)),
            ):
                assert settings.from_config(new, d, p, m, *extra) == settings.from_config(
                    valid, d, p, m, *extra
                ), (name, settings.__name__, d, p, m)
        # AlexNet-mini's override without its amendment: refused
        with pytest.raises(ValueError, match="scope: model"):
            checked({"train": {"spaces": amended["train"]["spaces"]}})
        # my-amendment.yaml: accepted exactly when the model's trials are all at chance
        evidence = trial_results(tmp_path / TRAIN / amendment["experiment"], amendment["model"])
        allowed = all(at_chance(r["val_accuracy"], r["num_classes"], r["n_val"]) for r in evidence)
        if allowed:
            checked(amended)
        else:
            with pytest.raises(ValueError, match="trained above chance"):
                checked(amended)
        outcomes[name] = allowed
    assert outcomes["every trial at chance"] and not outcomes["every trial trained"]
