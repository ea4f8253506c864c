"""Config lookups of the curate rules."""

from __future__ import annotations

import copy

import pytest

from imagenot.core.config import ConfigError, load_config, validate_config
from imagenot.core.settings import parse, to_arg
from imagenot.curate import plan
from imagenot.curate.paths import MATCHES
from imagenot.curate.settings import CandidatesSettings, EmbedSettings, SelectSettings


@pytest.fixture(scope="module")
def demo(repo_root):
    return load_config(repo_root / "config" / "config.yaml")


def test_demo_shards_and_targets(demo):
    assert plan.shard_ids(demo) == [f"{i:05d}" for i in range(demo["laion"]["n_shards"])]
    assert len(plan.shard_ids(demo)) > 1  # the demo runs the per-part fan-out
    assert plan.shard_path(demo, "00001") == "results/demo_world/laion/part-00001.parquet"
    targets = plan.targets(demo)
    assert "results/curate/imagenot/funnel.csv" in targets
    assert "results/curate/imagenet/selection.parquet" in targets
    assert all(not t.startswith("results/curate/fashion_mnist") for t in targets)


@pytest.mark.parametrize(
    "files",
    [
        # laion2B-en, LAION-400M, laion2B-multi style, renamed by a user (spaces, dots, unicode)
        ["part-00000-5114fd87-297e-42b0-9d11-50f1df323dfa-c000.snappy.parquet"],
        ["part-00000-5b54c5d5-bbcf-484d-a2ce-0d6f73df1a36-c000.snappy.parquet", "x.y.parquet"],
        ["my LAION copy (2024).v2.parquet", "laion2B-multi-00001.parquet", "naïve.parquet"],
    ],
)
def test_any_laion_file_name_gives_short_keys(demo, files):
    import re

    config = copy.deepcopy(demo)
    config["laion"]["shards"] = files
    validate_config(config)
    plan.check(config)
    ids = plan.shard_ids(config)
    assert ids == [f"{i:05d}" for i in range(len(files))]
    assert all(re.fullmatch(plan.SHARD_ID_PATTERN, i) for i in ids)
    for shard, name in zip(ids, files, strict=True):
        assert plan.shard_path(config, shard).endswith("/" + name)
    assert plan.per_shard(config, MATCHES)[0] == "results/curate/matches/00000.parquet"


def test_a_pattern_without_i_is_refused(demo):
    config = copy.deepcopy(demo)
    config["demo_world"]["enabled"] = False
    config["laion"].update(shard_pattern="part.parquet", n_shards=3)
    with pytest.raises(ValueError, match=r"laion\.shard_pattern"):
        plan.check(config)


def test_paper_shards_and_settings(repo_root):
    import shlex

    paper = load_config(repo_root / "config" / "paper.yaml")
    files = plan.shard_files(paper)
    assert len(files) == 128
    assert files[0] == "part-00000-5114fd87-297e-42b0-9d11-50f1df323dfa-c000.snappy.parquet"
    assert plan.shard_ids(paper)[-1] == "00127"
    # what the rule's shell line passes: one shell word, parsed by the command's dataclass
    embed = EmbedSettings.from_config(paper)
    assert parse(EmbedSettings, shlex.split(to_arg(embed))[0]) == embed
    assert "roberta-large" in embed.model
    select = SelectSettings.from_config(paper, dataset="imagenot")
    assert parse(SelectSettings, shlex.split(to_arg(select))[0]) == select
    assert select.applied_threshold == 0.82 and select.applied_n_classes == 1000
    assert select.per_class == 2000 and select.allow_fewer_classes is False


def test_list_mode_and_dataset_overrides(demo):
    import json
    import shlex

    config = copy.deepcopy(demo)
    config["datasets"]["listed"] = {
        "kind": "laion",
        "classes": {"from_file": "data/my classes.txt"},
        "images_per_class": 7,
    }
    validate_config(config)
    assert plan.class_list_input(config, "listed") == ["data/my classes.txt"]
    arg = shlex.split(to_arg(CandidatesSettings.from_config(config, dataset="listed")))
    listed = parse(CandidatesSettings, arg[0])
    assert len(arg) == 1 and listed.class_mode == "data/my classes.txt"

    def select(name):
        text = shlex.split(to_arg(SelectSettings.from_config(config, dataset=name)))[0]
        return parse(SelectSettings, json.loads(text))

    assert select("listed").per_class == 9  # ceil(7 * 1.25)
    assert select("listed").applied_threshold is None
    assert select("listed").applied_n_classes is None
    config["curate"]["apply_threshold_to_lists"] = True
    assert select("listed").applied_threshold == config["curate"]["threshold"]
    assert plan.class_list_input(config, "imagenot") == []


def test_a_shipped_class_list_is_read_from_the_clone_in_any_working_directory(
    demo, wn, tmp_path, monkeypatch
):
    """README's resources/demo_class_list.txt from a working directory of its own: the rule's
    input, the config check and the curate-candidates job read the clone's file; a list the
    working directory holds is its own; a relative path the clone does not ship is refused,
    naming the key."""
    from imagenot.core.paths import CLONE
    from imagenot.curate.candidates import build_candidates, read_class_list

    shipped = "resources/demo_class_list.txt"
    monkeypatch.chdir(tmp_path)
    config = copy.deepcopy(demo)
    classes = {"from_file": shipped, "allow_imagenet_classes": True}
    config["datasets"]["listed"] = {"kind": "laion", "classes": classes}
    validate_config(config)
    assert plan.class_list_input(config, "listed") == [str(CLONE / shipped)]
    plan.check_class_list(config, "listed")
    settings = CandidatesSettings.from_config(config, dataset="listed")
    assert settings.class_mode == shipped  # the settings keep the config's path
    _, _, stats = build_candidates({}, wn, settings, [])
    assert stats["universe"] == len(read_class_list(CLONE / shipped)) > 0

    (tmp_path / "resources").mkdir()
    (tmp_path / shipped).write_text("n01828556\n")
    assert plan.class_list_input(config, "listed") == [shipped]
    _, _, stats = build_candidates({}, wn, settings, [])
    assert stats["universe"] == 1

    classes["from_file"] = "resources/absent.txt"
    assert plan.class_list_input(config, "listed") == ["resources/absent.txt"]
    with pytest.raises(
        ValueError,
        match=r"^config key datasets\.listed\.classes\.from_file: no file resources/absent\.txt$",
    ):
        plan.check_class_list(config, "listed")


def test_a_class_list_is_named_with_from_file(demo):
    config = copy.deepcopy(demo)
    config["datasets"]["listed"] = {"kind": "laion", "classes": "data/my classes.txt"}
    with pytest.raises(ConfigError, match=r"datasets\.listed\.classes"):
        validate_config(config)


_FACTS = {"parameters": 1, "features": 1}


def test_only_a_laion_dataset_some_rule_reads_is_curated(repo_root, monkeypatch):
    """config/paper.yaml without the audit (which searches every configured dataset's test
    split), with a second LAION-built dataset that no experiment or diagnostic reads: the read one (imagenot) is curated, downloaded and stored; the unread one is
    absent from the curate targets, the plan's data stages and its storage. Planted: once the
    diagnostics compare it, it is curated."""
    from imagenot.plan import costs, data_stages
    from imagenot.plan.planning import PlannedJob
    from imagenot.plan.split_readers import curated_datasets

    paper = load_config(repo_root / "config" / "paper.yaml")
    config = copy.deepcopy(paper)
    config["datasets"]["spare"] = copy.deepcopy(config["datasets"]["imagenot"])
    config["diagnostics"]["datasets"] = ["imagenot"]
    config["audit"]["enabled"] = False  # the audit compares every configured dataset's test split
    config = validate_config(config)
    assert plan.laion_datasets(config) == ["imagenot", "spare"]
    assert curated_datasets(config) == plan.curated_datasets(config) == ["imagenot"]
    targets = plan.targets(config)
    assert "results/curate/imagenot/selection.parquet" in targets
    assert not [t for t in targets if "/spare/" in t]
    jobs = [PlannedJob("acquire_download", 2, {"runtime": 120})] * 4
    stages = {d["stage"] for d in data_stages.data_stage_rows(config, jobs, gpus=8)}
    assert "download imagenot" in stages and "download spare" not in stages
    # the models' sizes are not what this test is about: none built (seconds, not a minute)
    monkeypatch.setattr(costs, "model_facts", lambda models: dict.fromkeys(models, _FACTS))
    stored = [r["item"] for r in costs.storage(config)]
    assert "imagenot train split (850,000 images, 256 px)" in stored
    assert not [i for i in stored if i.startswith("spare ")]

    planted = copy.deepcopy(config)
    planted["diagnostics"]["datasets"] = ["imagenot", "spare"]
    assert curated_datasets(planted) == ["imagenot", "spare"]
    assert "results/curate/spare/selection.parquet" in plan.targets(planted)
