"""One validation: `imagenot validate-config` accepts exactly what the workflow accepts, and bad
configs get one line naming the key, file or line (no traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import snakemake_workflow

REPO = Path(__file__).resolve().parents[1]


def _workdir(tmp_path):
    """An empty working folder: validation and planning read results/ there (the preregistration
    record), never the working tree's, which `make demo` or a user's own run fills."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return work


def _plan_dry(tmp_path, overlay):
    """`snakemake -n` of the demo config and ``overlay``, from the clone's root, results/ in an
    empty folder."""
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--directory", str(_workdir(tmp_path)),
         "--configfile", "config/config.yaml", str(overlay)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )  # fmt: skip


def _validate_cmd(tmp_path, overlay: str):
    """`imagenot validate-config` of the demo config and ``overlay``, as its own process."""
    path = tmp_path / "overlay.yaml"
    path.write_text(overlay)
    config = str(REPO / "config" / "config.yaml")
    return subprocess.run(
        [sys.executable, "-m", "imagenot.cli", "validate-config", config, str(path)],
        capture_output=True,
        text=True,
        cwd=_workdir(tmp_path),
    )


def _validate(tmp_path, overlay: str):
    """`imagenot validate-config` of the demo config and ``overlay`` through the command's own
    entry point (imagenot.cli.main) in this process, from an empty working folder: its exit
    status and output. An exception the command does not turn into its one-line error fails
    the test here, as a traceback would in its own process (which
    test_the_workflow_refuses_what_validate_config_refuses runs)."""
    path = tmp_path / "overlay.yaml"
    path.write_text(overlay)
    return _validate_files(_workdir(tmp_path), REPO / "config" / "config.yaml", path)


def _validate_files(work: Path, *files: Path) -> subprocess.CompletedProcess:
    """`imagenot validate-config` of ``files`` from ``work``, in this process (``_validate``)."""
    import contextlib
    import io

    from imagenot.cli import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.chdir(work)
        with contextlib.redirect_stderr(err):
            code = main(["validate-config", *map(str, files)])
    return subprocess.CompletedProcess([], code, out.getvalue(), err.getvalue())


def _plan(tmp_path, overlay: Path) -> str:
    """The message the workflow stops on when planning the demo config and ``overlay``, results/
    in an empty folder: the Snakefile parsed through Snakemake's API in this process (its
    configfiles merged as ``--configfile`` merges them), which raises the ``SystemExit`` that
    `snakemake -n` prints as its one line (test_the_workflow_refuses_what_validate_config_refuses
    runs it as its own process). A config the workflow accepts fails the test."""
    from snakemake.settings.types import DAGSettings

    configs = [REPO / "config" / "config.yaml", overlay]
    with pytest.raises(SystemExit) as stopped, snakemake_workflow(_workdir(tmp_path), configs) as w:
        w.dag(dag_settings=DAGSettings())
    return str(stopped.value)


@pytest.mark.parametrize(
    ("overlay", "message"),
    [
        ("seed: 1\nseed: 2\n", "line 2: duplicate key 'seed'"),
        ("curate:\n  threshold: 1.5\n", "curate.threshold"),
        ("curate:\n  query_template: '{name}'\n", "curate.query_template"),
        ("curate:\n  query_template: '{name} is {gloss} {x}'\n", "unknown: x"),
        (
            "demo_world: {enabled: false}\nlaion:\n  shard_pattern: part.parquet\n  n_shards: 2\n",
            "needs the field {i}",
        ),
        ("analyse:\n  reference_dataset: imagnet\n", "analyse.reference_dataset: 'imagnet'"),
        ("curate:\n  encoder: {backend: test_only_hashed_words}\n", "allow_test_only"),
    ],
)
def test_bad_configs_are_refused_in_one_line(repo_root, tmp_path, overlay, message):
    run = _validate(tmp_path, overlay)
    assert run.returncode == 2, run.stdout
    assert message in run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) <= 3


def test_published_list_with_imagenet_classes_is_refused_unless_allowed(repo_root, tmp_path):
    from imagenot.core.wordnet import imagenet_wnids

    listed = tmp_path / "classes.txt"
    listed.write_text("n02084071\n" + imagenet_wnids()[0] + "\n")  # dog (generic), tench
    spec = {"kind": "laion", "classes": {"from_file": str(listed)}}
    run = _validate(tmp_path, yaml.safe_dump({"datasets": {"mine": spec}}))
    assert run.returncode == 2 and "1 ImageNet class(es)" in run.stderr
    assert "allow_imagenet_classes" in run.stderr
    spec["classes"]["allow_imagenet_classes"] = True
    run = _validate(tmp_path, yaml.safe_dump({"datasets": {"mine": spec}}))
    assert run.returncode == 0, run.stderr


def test_files_the_clone_ships_are_found_from_any_working_folder(repo_root, tmp_path):
    """README's resources/demo_class_list.txt and config/scale.yaml's resources/captions/...
    from an empty working folder are the clone's files: validate-config accepts them, as the
    workflow does; a relative path the clone does not ship is refused by both alike, naming the
    key."""
    listed = {"kind": "laion", "classes": {"from_file": "resources/demo_class_list.txt"}}
    listed["classes"]["allow_imagenet_classes"] = True
    run = _validate(tmp_path, yaml.safe_dump({"datasets": {"listed": listed}}))
    assert run.returncode == 0, run.stderr
    run = _validate_files(_workdir(tmp_path), REPO / "config" / "scale.yaml")
    assert run.returncode == 0, run.stderr
    listed["classes"]["from_file"] = "resources/absent.txt"
    checked, planned = _refusals(tmp_path, {"datasets": {"listed": listed}})
    assert checked == planned, (checked, planned)
    assert checked == "config key datasets.listed.classes.from_file: no file resources/absent.txt"
    overlay = tmp_path / "captions.yaml"
    overlay.write_text(yaml.safe_dump({"scale_world": {"captions": "resources/absent.parquet"}}))
    run = _validate_files(_workdir(tmp_path), REPO / "config" / "scale.yaml", overlay)
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert "config key scale_world.captions: no file resources/absent.parquet" in run.stderr


def test_the_shipped_configs_are_valid(repo_root, tmp_path):
    """config.yaml as shipped; paper.yaml once its data paths point at folders that exist
    (imagenot.plan.planning's placeholders, as `imagenot plan` plans it): as shipped, its
    placeholder /data paths are refused, naming the key. (paper.yaml's diagnostics read the
    published class lists shipped in resources/class_lists/.) Checked in an empty working
    folder: the check reads the preregistration record under results/ there, and the working
    tree's, left by `make demo`, holds the demo's search definitions, not the paper's."""
    from imagenot.plan.planning import placeholder_overlay

    work = tmp_path / "work"
    work.mkdir()

    def run(*files):
        return _validate_files(work, *files)

    config = repo_root / "config"
    for files in ([config / "config.yaml"], [config / "scale.yaml"]):
        done = run(*files)
        assert done.returncode == 0 and "valid" in done.stdout, done.stderr
    paper = yaml.safe_load((config / "paper.yaml").read_text())
    # the class lists' paths are relative to the clone's root: absolute from the empty folder
    lists = tmp_path / "lists.yaml"
    class_lists = {k: str(repo_root / v) for k, v in paper["diagnostics"]["class_lists"].items()}
    lists.write_text(yaml.safe_dump({"diagnostics": {"class_lists": class_lists}}))
    overlay = tmp_path / "placeholders.yaml"
    placeholders = placeholder_overlay(tmp_path / "inputs", paper)
    overlay.write_text(yaml.safe_dump(placeholders))
    done = run(config / "paper.yaml", lists, overlay)
    assert done.returncode == 0 and "valid" in done.stdout, done.stderr
    if not (repo_root / paper["datasets"]["imagenet"]["path"]).is_dir():
        done = run(config / "paper.yaml", lists)
        assert done.returncode == 2 and "datasets.imagenet.path" in done.stderr, done.stderr


def test_the_workflow_refuses_what_validate_config_refuses(repo_root, tmp_path):
    """The same bad overlay stops `snakemake -n` before any job, with the same message, and
    `imagenot validate-config`, each as its own process: one line, no traceback (the cases below
    run both in this process, each refusing with the message these processes print)."""
    overlay = tmp_path / "bad.yaml"
    overlay.write_text("curate:\n  query_template: '{name}'\n")
    checked = _validate_cmd(tmp_path, overlay.read_text())
    assert checked.returncode == 2, checked.stdout
    assert "Traceback" not in checked.stderr and len(checked.stderr.strip().splitlines()) == 1
    planned = _plan_dry(tmp_path, overlay)
    assert planned.returncode != 0, planned.stdout
    out = planned.stdout + planned.stderr
    assert "Traceback" not in out and "KeyError" not in out, out[-2000:]
    lines = [line for line in out.splitlines() if line.startswith("invalid workflow config: ")]
    assert len(lines) == 1, out[-2000:]
    assert "curate.query_template" in lines[0]
    path = tmp_path / "overlay.yaml"  # where _validate_cmd wrote it
    message = checked.stderr.strip().split("error: ", 1)[1]
    assert message.startswith(f"{path}: config key curate.query_template")  # the file that gives it
    assert lines[0] == f"invalid workflow config: {overlay}: {message.split(f'{path}: ', 1)[1]}"
    assert _plan(tmp_path, overlay) == lines[0]  # what the cases below compare


# ------------------------------------------------------------------------------------------
# What the workflow would refuse (at planning or in a job), validate-config refuses
# first, with the same message. Bad datasets are generated from the registry's declarations.


def _refusals(tmp_path, overlay: dict) -> tuple[str, str]:
    """The message of validate-config (after the config files it names) and of the workflow's
    planning (after "invalid workflow config: ", ``_plan``) for the same overlay; both refuse
    before any job."""
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(overlay))
    checked = _validate(tmp_path, path.read_text())
    assert checked.returncode == 2, checked.stdout
    assert "Traceback" not in checked.stderr and len(checked.stderr.strip().splitlines()) == 1
    planned = _plan(tmp_path, path)
    assert "\n" not in planned and "KeyError" not in planned, planned
    assert planned.startswith("invalid workflow config: "), planned
    # both name the same file(s) first: the overlay where it gives the key
    checked_line = checked.stderr.strip().split("error: ", 1)[1]
    planned_line = planned.removeprefix("invalid workflow config: ")
    assert checked_line.partition(f"{path}: ")[0] == planned_line.partition(f"{path}: ")[0]
    return checked_line.split(f"{path}: ", 1)[1], planned_line.split(f"{path}: ", 1)[1]


def _kind_cases():
    from imagenot.acquire.kinds import DATASET_KINDS
    from imagenot.acquire.plan import EVERY_KIND

    schema_keys = set(_dataset_schema_keys())
    cases = []
    for kind, entry in DATASET_KINDS.items():
        for key in entry.required_keys:
            cases.append(pytest.param(kind, "drop", key, id=f"{kind}-without-{key}"))
        if entry.keys is not None:
            foreign = sorted(schema_keys - {*EVERY_KIND, *entry.keys})
            if foreign:
                cases.append(pytest.param(kind, "add", foreign[0], id=f"{kind}-with-{foreign[0]}"))
    return cases


def _dataset_schema_keys() -> list[str]:
    from imagenot.core.config import load_schema

    return list(load_schema("datasets.schema.yaml")["additionalProperties"]["properties"])


# A valid value of each key a kind may require or be given; a kind declaring a new required
# key makes _valid_spec fail until the key gets a value here.
def _values(tmp_path) -> dict:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "train").mkdir(exist_ok=True)  # an empty data folder is refused
    return {
        "path": str(data),
        "classes": "discover",
        "n_classes": 10,
        "images_per_class": 5,
        "allow_fewer": True,
        "max_train_per_class": 3,
        "image_size": 32,
        "test_per_class": 2,
        "val_per_class": 1,
    }


def _valid_spec(kind: str, tmp_path) -> dict:
    from imagenot.acquire.kinds import DATASET_KINDS

    values = _values(tmp_path)
    entry = DATASET_KINDS.entry(kind)
    missing = sorted(set(entry.required_keys) - set(values))
    assert not missing, f"give required key(s) {missing} of kind {kind!r} a value in _values"
    return {"kind": kind, **{key: values[key] for key in entry.required_keys}}


@pytest.mark.parametrize(("kind", "change", "key"), _kind_cases())
def test_each_kind_refuses_a_missing_required_or_ignored_key_as_the_workflow_does(
    repo_root, tmp_path, kind, change, key
):
    spec = _valid_spec(kind, tmp_path)
    if change == "drop":
        del spec[key]
        expect = f"config key datasets.extra.{key} is required for kind {kind!r}"
    else:
        spec[key] = _values(tmp_path)[key]
        expect = f"config key datasets.extra.{key} does not apply to kind {kind!r}"
    checked, planned = _refusals(tmp_path, {"datasets": {"extra": spec}})
    assert checked == planned and checked.startswith(expect), (checked, planned)


def test_every_kind_with_its_required_keys_is_accepted(repo_root, tmp_path):
    """The control: the generated configs differ from accepted ones only in the changed key."""
    from imagenot.acquire.kinds import DATASET_KINDS

    specs = {f"d{i}": _valid_spec(kind, tmp_path) for i, kind in enumerate(DATASET_KINDS)}
    run = _validate(tmp_path, yaml.safe_dump({"datasets": specs}))
    assert run.returncode == 0, run.stderr
    # every kind takes the keys every dataset has: a description and a display name
    named = {
        name: {**spec, "description": "a dataset", "display_name": f"Set {name}"}
        for name, spec in specs.items()
    }
    run = _validate(tmp_path, yaml.safe_dump({"datasets": named}))
    assert run.returncode == 0, run.stderr


def test_a_dataset_path_that_is_not_a_directory_is_refused_until_materialised(tmp_path):
    """The materialisation job reads the path; once the dataset is materialised (its manifest
    under results/) the data may be gone, and the config is still valid there."""
    from imagenot.acquire import plan as acquire_plan
    from imagenot.core.config import validate_config

    config = validate_config(
        {"datasets": {"extra": {"kind": "imagefolder", "path": str(tmp_path / "nowhere")}}}
    )
    work = tmp_path / "work"
    work.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        with pytest.raises(ValueError, match=r"datasets.extra.path: .*nowhere does not exist"):
            acquire_plan.check(config)
        (tmp_path / "nowhere").write_text("")
        with pytest.raises(ValueError, match=r"datasets.extra.path: .*nowhere is not a directory"):
            acquire_plan.check(config)
        manifest = work / acquire_plan.dataset_dir("extra") / "manifest.parquet"
        manifest.parent.mkdir(parents=True)
        manifest.write_bytes(b"")
        acquire_plan.check(config)  # materialised: the data is no longer read


def _imagenet_first() -> str:
    from imagenot.core.wordnet import imagenet_wnids

    return imagenet_wnids()[0]


@pytest.mark.parametrize(
    ("second", "expect"),
    [
        (
            "n02084072",
            ":2: unknown id n02084072 (no such WordNet 3.0 noun synset)",
        ),  # one byte off dog
        ("v01168468", ":2: malformed WordNet noun id 'v01168468'"),  # a verb synset
        ("n12345", ":2: malformed WordNet noun id 'n12345'"),
        (None, "1 ImageNet class(es) in the class list of dataset 'listed'"),
    ],
    ids=["unknown", "verb", "malformed", "imagenet"],
)
def test_class_lists_the_curation_job_would_refuse_are_refused_before_any_job(
    repo_root, tmp_path, wn, second, expect
):
    """Unknown, non-noun and ImageNet wnids: validate-config and `snakemake -n` give the same
    line naming the file, the line and the wnid; the curate-candidates job, given the list
    anyway, refuses it with that line too (not an AttributeError)."""
    from imagenot.curate.candidates import build_candidates
    from imagenot.curate.settings import CandidatesSettings

    listed = tmp_path / "classes.txt"
    listed.write_text(f"n02084071\n{second or _imagenet_first()}\n")
    spec = {"kind": "laion", "classes": {"from_file": str(listed)}}
    checked, planned = _refusals(tmp_path, {"datasets": {"listed": spec}})
    assert checked == planned and expect in checked, (checked, planned)
    if second is not None:
        assert checked.startswith(f"{listed}:2: ")
        with pytest.raises(ValueError) as job:
            build_candidates({}, wn, CandidatesSettings(str(listed), 1, "{name}", {}), [])
        assert str(job.value) == checked


@pytest.mark.parametrize(
    ("name", "content", "expect"),
    [
        ("latin1.txt", "n02084071 # chien \xe9\n".encode("latin-1"), "cannot read the class list"),
        ("ids.parquet", {"id": ["n02084071"]}, "lacks column(s) wnid"),
    ],
    ids=["not-utf8", "parquet-without-wnid"],
)
def test_a_class_list_that_cannot_be_read_is_refused_naming_its_key(
    repo_root, tmp_path, name, content, expect
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    listed = tmp_path / name
    if isinstance(content, bytes):
        listed.write_bytes(content)
    else:
        pq.write_table(pa.table(content), listed)
    spec = {"kind": "laion", "classes": {"from_file": str(listed)}}
    checked, planned = _refusals(tmp_path, {"datasets": {"listed": spec}})
    assert checked == planned, (checked, planned)
    assert checked.startswith(f"config key datasets.listed.classes.from_file: {listed}: {expect}")


def test_a_parquet_class_list_with_a_wnid_column_is_read_as_a_text_one(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from imagenot.core.wordnet import config_wordnet_dir
    from imagenot.curate.candidates import read_class_list

    wn = config_wordnet_dir({"wordnet": {"dict_dir": None}})

    (tmp_path / "a.txt").write_text("n02084071 dog\nn02121808  # cat\n")
    pq.write_table(pa.table({"wnid": ["n02084071", "n02121808"]}), tmp_path / "a.parquet")
    assert read_class_list(tmp_path / "a.txt", wn) == ["n02084071", "n02121808"]
    assert read_class_list(tmp_path / "a.parquet", wn) == read_class_list(tmp_path / "a.txt", wn)


def test_a_wordnet_source_the_prepare_job_would_refuse_is_refused_first(repo_root, tmp_path):
    from imagenot.core.wordnet import prepare_nltk_wordnet

    empty = tmp_path / "dict"
    empty.mkdir()
    checked, planned = _refusals(tmp_path, {"wordnet": {"dict_dir": str(empty)}})
    assert checked == planned, (checked, planned)
    with pytest.raises(FileNotFoundError) as job:
        prepare_nltk_wordnet(tmp_path / "nltk", empty)
    assert checked == f"config key wordnet.dict_dir: {job.value}"


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ("n02084072", ":2: unknown id n02084072 (no such WordNet 3.0 noun synset)"),
        ("v01168468", ":2: malformed WordNet noun id 'v01168468'"),
    ],
    ids=["unknown", "verb"],
)
def test_diagnostics_class_lists_the_wordnet_job_would_refuse_are_refused_first(
    repo_root, tmp_path, wn, line, expect
):
    """diagnostics.class_lists: validate-config, `snakemake -n` and the wordnet-stats job's own
    check give the same line."""
    from imagenot.core import class_list as cl
    from imagenot.diagnostics import wordnet_stats as ws

    listed = tmp_path / "published.txt"
    listed.write_text(f"n02084071\n{line}\n")
    checked, planned = _refusals(tmp_path, {"diagnostics": {"class_lists": {"mine": str(listed)}}})
    assert checked == planned and checked.startswith(f"{listed}{expect}"), (checked, planned)
    with pytest.raises(cl.ClassListError) as job:
        ws.resolve_classes(wn, cl.read_class_entries(listed), str(listed))
    assert str(job.value) == checked
    missing = {"diagnostics": {"class_lists": {"mine": str(tmp_path / "gone.txt")}}}
    checked, planned = _refusals(tmp_path, missing)
    assert (
        checked
        == planned
        == f"config key diagnostics.class_lists.mine: no file {tmp_path}/gone.txt"
    )


def test_every_missing_data_path_is_listed_at_once_and_an_empty_folder_refused(tmp_path):
    """The paper config as shipped names four data locations (LAION parts, ImageNet, CIFAR-10,
    the published weights): one check names them all, one line each; an empty folder where data
    must be is refused too (rather than failing the jobs later)."""
    from imagenot.core.config import read_config_file
    from imagenot.core.stages import check_workflow_config

    paper = read_config_file(REPO / "config" / "paper.yaml")
    paper["diagnostics"]["class_lists"] = {}  # (their files: a check of their own)
    work = _workdir(tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        with pytest.raises(ValueError) as refused:
            check_workflow_config(yaml.safe_load(yaml.safe_dump(paper)))
        lines = str(refused.value).splitlines()
        assert lines[0] == "invalid workflow config (4 problem(s)):"
        for key in ("laion.dir", "datasets.imagenet.path", "datasets.cifar10.path"):
            assert any(f"config key {key}: " in line for line in lines), (key, lines)
        assert any("train.weights_dir: /data/torchvision_weights" in line for line in lines)
        empty = tmp_path / "empty"
        empty.mkdir()
        paper["datasets"]["cifar10"]["path"] = str(empty)
        with pytest.raises(ValueError, match=r"datasets.cifar10.path: .*empty is empty"):
            check_workflow_config(yaml.safe_load(yaml.safe_dump(paper)))


# ------------------------------------------------------------------------------------------
# Overlays that add to a list, and what validate-config could not check where it ran


def test_an_addition_is_accepted_and_refused_alike_by_validate_config_and_the_workflow(tmp_path):
    """README's overlay adding a model and an experiment passes validate-config; an addition
    the workflow refuses (an item already listed) stops the workflow's planning with
    validate-config's line, naming the overlay."""
    added = {
        "train": {
            "models+": ["convnext_mini"],
            "experiments+": [{"dataset": "fashion_mnist", "protocol": "st", "space": "st"}],
        }
    }
    run = _validate(tmp_path, yaml.safe_dump(added))
    assert run.returncode == 0 and ": valid" in run.stdout, run.stderr
    checked, planned = _refusals(tmp_path, {"train": {"models+": ["resnet_mini"]}})
    assert (
        checked
        == planned
        == (
            "config key train.models+: 'resnet_mini' is already in train.models (an item is listed "
            "once)"
        )
    )
    both = {"train": {"models": ["resnet_mini"], "models+": ["convnext_mini"]}}
    checked, planned = _refusals(tmp_path, both)
    assert checked == planned and checked.startswith(
        "config key train.models+: train.models is given beside it"
    )
    # a later file's whole list replaces an earlier addition: accepted by both, the same list
    added = tmp_path / "added.yaml"
    added.write_text(yaml.safe_dump({"train": {"models+": ["convnext_mini"]}}))
    replaced = tmp_path / "replaced.yaml"
    replaced.write_text(yaml.safe_dump({"train": {"models": ["resnet_mini"]}}))
    files = [REPO / "config" / "config.yaml", added, replaced]
    run = _validate_files(_workdir(tmp_path), *files)
    assert run.returncode == 0 and ": valid" in run.stdout, run.stderr
    with snakemake_workflow(_workdir(tmp_path), files) as w:
        assert w._workflow.globals["config"]["train"]["models"] == ["resnet_mini"]


def _run_folder(tmp_path) -> Path:
    """A folder the workflow has run in (results/ there), with a subfolder and a data folder."""
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    (run / "sub").mkdir()
    (run / "data" / "fm" / "train").mkdir(parents=True)
    return run


def test_validate_config_says_what_it_could_not_check_below_the_run_folder(tmp_path):
    """From a subfolder of the folder the workflow runs in, "valid" comes with the checks that
    were not done (results/ and relative paths read from the wrong folder); from the folder
    itself, with none."""
    run = _run_folder(tmp_path)
    demo = REPO / "config" / "config.yaml"
    below = _validate_files(run / "sub", demo)
    assert below.returncode == 0, below.stderr
    verdict, *notes = below.stdout.strip().splitlines()
    assert verdict == f"{demo}: valid"
    assert notes[0].startswith(f"not checked: {run / 'sub'} is below {run} (which has results)")
    assert f"--directory {run}" in notes[0]
    assert notes[1].startswith(f"not checked: the config against earlier results: {run / 'sub'}")
    there = _validate_files(run, demo)
    assert there.returncode == 0 and there.stdout.strip() == f"{demo}: valid", there.stdout


def test_a_relative_path_refused_below_the_run_folder_is_named_with_where_it_resolves(tmp_path):
    """The planted case: a data path relative to the run folder, checked from its subfolder,
    is refused ("does not exist") with a line saying it exists from the run folder; from the run
    folder it is accepted."""
    run = _run_folder(tmp_path)
    overlay = tmp_path / "mine.yaml"
    overlay.write_text(
        yaml.safe_dump({"datasets": {"mine": {"kind": "fashion_mnist", "path": "data/fm"}}})
    )
    demo = REPO / "config" / "config.yaml"
    below = _validate_files(run / "sub", demo, overlay)
    assert below.returncode == 2, below.stdout
    error, note = below.stderr.strip().splitlines()
    assert error.endswith(f"{overlay}: config key datasets.mine.path: data/fm does not exist")
    assert note.startswith(f"not checked: {run / 'sub'} is below {run}")
    assert "found from there, not from here: datasets.mine.path (data/fm)" in note
    there = _validate_files(run, demo, overlay)
    assert there.returncode == 0, there.stderr


def test_a_mistyped_configfile_stops_snakemake_before_the_workflow_as_the_readme_says():
    """Snakemake reads each --configfile while it parses its command line (its ConfigSettings),
    before any code of the workflow runs, and a missing one escapes as a bare FileNotFoundError,
    which Snakemake prints with its traceback: the workflow cannot replace that message, so
    README section 3 prints its last line, and validate-config says it in one line with the
    closest file beside it. A Snakemake that catches it fails here, and the README changes."""
    from snakemake.settings.types import ConfigSettings

    with pytest.raises(FileNotFoundError) as caught:
        ConfigSettings(configfiles=[Path("my-chnages.yaml")])
    last_line = f"{type(caught.value).__name__}: {caught.value}"
    assert last_line == "FileNotFoundError: [Errno 2] No such file or directory: 'my-chnages.yaml'"
    assert f"`{last_line}`" in " ".join((REPO / "README.md").read_text().split())
    run = _validate_files(REPO, REPO / "config" / "config.yaml", REPO / "config" / "confg.yaml")
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "confg.yaml: No such file or directory (did you mean" in run.stderr
    assert "config/config.yaml?)" in run.stderr
