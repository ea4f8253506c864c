"""The workflow as a Snakemake module, as the workflow catalog deploys it, and the code its jobs run.

A host folder holds `config/config.yaml` and a Snakefile of its own with `module imagenot:
snakefile: <clone>/Snakefile  config: config` and `use rule * from imagenot` (snakedeploy's form)
or `... as imagenot_*` beside a rule of its own; no profile of the clone is copied beside it.
Both forms plan the demo, and a real run of the prefixed form builds WordNet's noun lemmas and
the host's rule that reads them, with the run's hooks called from the host's handlers. The clone
it runs is a copy whose package was edited after the .venv was made (the .venv's editable install
names another folder): the edit reaches the jobs. The host's rule keeps its own shell (two
commands, both run) and the host's config dict comes back as the host wrote it. A module with no
package beside its rules (one loaded from a URL) gives its jobs a copy of the installed package
in the host's working directory, and stops in one line where no package is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
# what a clone needs to run (no profiles/: a host run has none)
CLONE_PARTS = ("Snakefile", "rules", "workflow", "config", "report", "envs")
# a line the copy's package prints when imported: in a job's log, the job ran the copy
EDITED = "imagenot: the edited checkout"

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "IMAGENOT_CHECKOUT")}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def tiny_config() -> dict:
    """The demo config with the tests' small overlay (.test/config-tiny.yaml), merged as
    Snakemake merges two --configfile files."""
    from snakemake.utils import update_config

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    update_config(config, yaml.safe_load((REPO / ".test" / "config-tiny.yaml").read_text()))
    return config


def host_folder(path: Path, snakefile: Path, prefixed: bool = True) -> Path:
    """A host folder using the workflow at ``snakefile`` as module ``imagenot``: prefixed, with a
    rule of its own reading the module's noun lemmas and the run's hooks in its handlers; else
    snakedeploy's form. It records the config dict it holds after the module is loaded."""
    (path / "config").mkdir(parents=True)
    (path / "config" / "config.yaml").write_text(yaml.safe_dump(tiny_config(), sort_keys=False))
    use = "use rule * from imagenot as imagenot_*" if prefixed else "use rule * from imagenot"
    own = (
        "rule host_lemmas:\n"
        "    input: rules.imagenot_noun_lemmas.output.lemmas\n"
        '    output: "host/lemmas.txt"\n'
        '    shell: "echo from the host > {output}; wc -c < {input} >> {output}"\n\n'
        "onstart:\n"
        "    imagenot.run_started()\n\n"
        "onsuccess:\n"
        "    imagenot.run_finished()\n\n"
        if prefixed
        else ""
    )
    (path / "Snakefile").write_text(
        "import json\n"
        "from pathlib import Path\n\n"
        'configfile: "config/config.yaml"\n\n'
        "module imagenot:\n"
        f"    snakefile: {str(snakefile)!r}\n"
        "    config: config\n\n"
        f"{use}\n\n"
        f"{own}"
        'Path("host_config.json").write_text(json.dumps(config))\n'
    )
    return path


@pytest.fixture(scope="module")
def edited_clone(tmp_path_factory) -> Path:
    """A copy of the clone whose package prints :data:`EDITED` when imported."""
    clone = tmp_path_factory.mktemp("clone")
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in CLONE_PARTS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, clone / name, ignore=skip)
        else:
            shutil.copy(source, clone / name)
    init = clone / "workflow" / "imagenot" / "__init__.py"
    init.write_text(
        init.read_text() + f"\nimport sys as _sys\n\nprint({EDITED!r}, file=_sys.stderr)\n"
    )
    return clone


@pytest.mark.parametrize("prefixed", [False, True], ids=["snakedeploy", "prefixed"])
def test_a_host_folder_plans_the_demo(tmp_path, prefixed):
    host = host_folder(tmp_path / "host", REPO / "Snakefile", prefixed)
    run = _run([SNAKEMAKE, "-n", "-p", "--cores", "2"], host)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    name = "imagenot_train_head_trial" if prefixed else "train_head_trial"
    # a TL head fit's own runtime in its line (its class's: no profile needed)
    assert f"rule {name}:" in run.stdout and "--runtime-min 240 " in run.stdout
    # every rule keeps what it says of itself under the host's names: no global directive (a
    # `localrules:` list) names a rule the host has renamed
    assert "not present in the Snakefile" not in run.stdout + run.stderr
    # the module validated a copy: the host's config holds what the host wrote, no defaults
    assert json.loads((host / "host_config.json").read_text()) == tiny_config()


def test_a_host_folder_runs_the_edited_checkout_without_a_profile(tmp_path, edited_clone):
    host = host_folder(tmp_path / "host", edited_clone / "Snakefile")
    run = _run([SNAKEMAKE, "--cores", "2", "host/lemmas.txt"], host)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    # the host's rule ran both its commands: no `exec` of the module's lines reached it
    text = (host / "host" / "lemmas.txt").read_text().splitlines()
    assert text[0] == "from the host" and int(text[1]) > 0
    # each job ran the copy's package, not the one the .venv's editable install names
    for log in ("prepare_wordnet.log", "noun_lemmas.log"):
        assert EDITED in (host / "results" / "logs" / log).read_text(), log
    # the run's hooks, called from the host's handlers: the study's record and the summary
    assert json.loads((host / "results" / "run.json").read_text())["world"] == "demo"
    assert "Done: host/lemmas.txt." in run.stderr
    assert json.loads((host / "host_config.json").read_text()) == tiny_config()


def test_the_workflow_plans_the_demo_without_a_profile():
    """The clone's own dry run, as README prints it, reads no profile: every job's memory and
    runtime come from its rule."""
    run = _run([SNAKEMAKE, "-n", "--workflow-profile", "none", "--forceall"], REPO)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "profile" not in run.stderr.lower()
    jobs = re.findall(r"^(?:local)?rule (\w+):\n((?:    .*\n)+)", run.stdout, re.M)
    jobs = [(rule, body) for rule, body in jobs if rule not in ("all", "preflight")]
    assert len(jobs) > 50
    for rule, body in jobs:
        resources = re.search(r"^    resources: (.*)$", body, re.M)
        assert resources and "mem_mb=" in resources.group(1), (rule, body[-300:])
        assert "runtime=" in resources.group(1), (rule, body[-300:])


@pytest.mark.parametrize(
    "checkout, refused",
    [(str(REPO / "workflow"), False), ("/nonexistent/clone/workflow", True)],
    ids=["the-checkout", "unseen-checkout"],
)
def test_a_job_refuses_another_copy_of_the_package(checkout, refused):
    """A job that cannot see its checkout (an image without it mounted) would import another
    copy: it stops with one line naming the checkout and what to do."""
    env = {**os.environ, "IMAGENOT_CHECKOUT": checkout, "PYTHONPATH": str(REPO / "workflow")}
    run = subprocess.run(
        [sys.executable, "-m", "imagenot", "--help"], env=env, capture_output=True, text=True
    )
    if refused:
        assert run.returncode == 1
        assert run.stderr.count("\n") == 1, run.stderr
        assert "not the checkout /nonexistent/clone" in run.stderr and "--bind" in run.stderr
    else:
        assert run.returncode == 0, run.stderr


def test_the_catalog_files_describe_the_workflow():
    """The workflow catalog's files: its usage (mandatory flags, software deployment, report)
    and the config folder's README, naming every config file there."""
    catalog = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text())
    usage = catalog["usage"]
    assert set(usage["software-stack-deployment"]) >= {"conda", "apptainer"}
    assert usage["report"] is True and "config/paper.yaml" in usage["mandatory-flags"]["desc"]
    readme = (REPO / "config" / "README.md").read_text()
    for path in (REPO / "config").glob("*.yaml"):
        assert f"`{path.name}`" in readme, path.name
    assert "workflow/schemas/" in readme


# a URL module (`github(...)`): the workflow's files without its package folder
URL_MODULE_PARTS = tuple(name for name in CLONE_PARTS if name != "workflow")


def installed_package() -> Path:
    """The folder holding the package this interpreter imports (``imagenot/``, ``schemas/``)."""
    import imagenot

    return Path(imagenot.__file__).resolve().parents[1]


def test_a_url_module_gives_its_jobs_a_copy_of_the_installed_package(tmp_path):
    """A module with no package beside its rules runs the installed one; its jobs (a host rule's
    shell line gets the same environment as the module's) import a copy of it in the host's
    working directory, byte for byte the installed code, and the module's own lines read it."""
    module = tmp_path / "module"
    module.mkdir()
    for name in URL_MODULE_PARTS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, module / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, module / name)
    host = host_folder(tmp_path / "host", module / "Snakefile", prefixed=False)
    with (host / "Snakefile").open("a") as snakefile:
        snakefile.write(
            "\nrule which_package:\n"
            '    output: "host/package.txt"\n'
            '    shell: \'echo $IMAGENOT_CHECKOUT > {output}; PYTHONPATH="$IMAGENOT_CHECKOUT" '
            'python -c "import imagenot; print(imagenot.__file__)" >> {output}\'\n'
        )
    run = _run([SNAKEMAKE, "--cores", "1", "host/package.txt"], host)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    staged = list((host / ".snakemake" / "imagenot-package").iterdir())
    assert len(staged) == 1 and not staged[0].name.startswith("."), staged
    copy = staged[0]
    installed = installed_package()
    py = sorted(p.relative_to(installed) for p in (installed / "imagenot").rglob("*.py"))
    assert py and py == sorted(p.relative_to(copy) for p in (copy / "imagenot").rglob("*.py"))
    for rel in py:
        assert (copy / rel).read_bytes() == (installed / rel).read_bytes(), rel
    assert sorted(p.name for p in (copy / "schemas").iterdir()) == sorted(
        p.name for p in (installed / "schemas").iterdir()
    )
    named, imported = (host / "host" / "package.txt").read_text().splitlines()
    assert Path(named) == copy.resolve()
    assert Path(imported) == copy.resolve() / "imagenot" / "__init__.py"
    # the module's jobs run the copy and check it: a dry run prints their lines
    dry = _run([SNAKEMAKE, "-n", "-p", "--cores", "1", "--forceall", "noun_lemmas"], host)
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-4000:]
    assert 'PYTHONPATH="$IMAGENOT_CHECKOUT" exec python -m imagenot' in dry.stdout
    assert list((host / ".snakemake" / "imagenot-package").iterdir()) == [copy]


def test_a_url_module_without_the_package_stops_in_one_line(tmp_path):
    """No package beside the rules and none importable: Snakemake stops before any job, saying
    what to do, in one line."""
    module = tmp_path / "module"
    module.mkdir()
    shutil.copy(REPO / "Snakefile", module / "Snakefile")
    shutil.copytree(REPO / "rules", module / "rules")
    host = host_folder(tmp_path / "host", module / "Snakefile", prefixed=False)
    hide = "import sys; sys.modules['imagenot'] = None; from snakemake.cli import main; main()"
    run = _run([sys.executable, "-c", hide, "-n", "--cores", "1"], host)
    assert run.returncode != 0
    lines = [line for line in run.stderr.splitlines() if "imagenot workflow:" in line]
    assert len(lines) == 1 and "nor installed where Snakemake runs" in lines[0], run.stderr


def _package(path: Path, body: str = "") -> Path:
    (path / "imagenot" / "__pycache__").mkdir(parents=True)
    (path / "imagenot" / "__init__.py").write_text(body)
    (path / "imagenot" / "__pycache__" / "x.cpython-312.pyc").write_bytes(b"compiled")
    (path / "schemas").mkdir()
    (path / "schemas" / "config.schema.yaml").write_text("type: object\n")
    return path


def test_staged_package_copies_once_per_content(tmp_path):
    from imagenot.core import checkout

    installed = _package(tmp_path / "site")
    work = tmp_path / "work"
    first = checkout.staged_package(installed, work, "0.2.0")
    assert first.parent == work / checkout.STAGED and first.name.startswith("0.2.0-")
    assert (first / "imagenot" / "__init__.py").is_file()
    assert (first / "schemas" / "config.schema.yaml").is_file()
    assert not (first / "imagenot" / "__pycache__").exists()
    # a second call (a cluster job's Snakemake) finds it: nothing is copied again
    (first / "imagenot" / "marker").write_text("")
    assert checkout.staged_package(installed, work, "0.2.0") == first
    assert (first / "imagenot" / "marker").is_file()
    # a changed package (same version) gets a folder of its own
    (installed / "imagenot" / "__init__.py").write_text("x = 1\n")
    second = checkout.staged_package(installed, work, "0.2.0")
    assert second != first and (second / "imagenot" / "__init__.py").read_text() == "x = 1\n"
    # compiled bytecode is no part of the content
    (installed / "imagenot" / "__pycache__" / "y.cpython-312.pyc").write_bytes(b"other")
    assert checkout.staged_package(installed, work, "0.2.0") == second


def test_staged_package_never_uses_a_partial_copy(tmp_path, monkeypatch):
    from imagenot.core import checkout

    installed = _package(tmp_path / "site")
    work = tmp_path / "work"
    copytree = shutil.copytree
    calls = []

    def cut_short(source, target, **kwargs):
        calls.append(source)
        if len(calls) == 2:  # the package copied, the schemas not: the copy is cut short
            raise OSError("disk full")
        return copytree(source, target, **kwargs)

    monkeypatch.setattr(checkout.shutil, "copytree", cut_short)
    with pytest.raises(OSError, match="disk full"):
        checkout.staged_package(installed, work)
    assert list((work / checkout.STAGED).iterdir()) == []
    monkeypatch.setattr(checkout.shutil, "copytree", copytree)
    staged = checkout.staged_package(installed, work)
    assert (staged / "schemas" / "config.schema.yaml").is_file()
    assert [p.name for p in (work / checkout.STAGED).iterdir()] == [staged.name]
    with pytest.raises(SystemExit, match="no package to stage"):
        checkout.staged_package(tmp_path / "empty", work)
