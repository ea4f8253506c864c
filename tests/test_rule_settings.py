"""One settings object per rule (every stage): each rule's object parses into its command's
dataclass for every shipped config, the commands run on what the rules pass,
and the flags of hand-typed commands take their defaults from the schema."""

from __future__ import annotations

import dataclasses
import io
import json
import shlex

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from imagenot.acquire import plan as acquire_plan
from imagenot.acquire import settings as acquire_settings
from imagenot.analyse import plan as analyse_plan
from imagenot.analyse.settings import AccuracySettings, RankingsSettings
from imagenot.cli import main
from imagenot.core.config import ConfigError, load_config, schema_default, validate_config
from imagenot.core.settings import SettingsError, parse, to_arg, to_json
from imagenot.curate import cli as curate_cli
from imagenot.curate import plan as curate_plan
from imagenot.curate import settings as curate_settings
from imagenot.curate.settings import WordnetSettings
from imagenot.demo import scale_plan
from imagenot.demo.settings import DemoSettings, ScaleSettings
from imagenot.diagnostics import plan as diagnostics_plan
from imagenot.diagnostics import settings as diagnostics_settings
from imagenot.evaluate.settings import RobustnessSettings
from imagenot.figures import plan as figures_plan
from imagenot.figures.settings import FigureSettings, TableSettings
from imagenot.train import plan as train_plan
from imagenot.train import settings as train_settings


def _analyse_figures_diagnostics_rule_settings(config: dict) -> list[tuple[str, object]]:
    """(rule, settings object) of every analyse, figures and diagnostics rule for ``config``,
    built as the rules build them."""
    out: list[tuple[str, object]] = [
        ("accuracy_table", AccuracySettings.from_config(config)),
        *[
            (f"rankings_json {v}", RankingsSettings.from_config(config, variant=v))
            for v in analyse_plan.VARIANTS
        ],
    ]
    runs = train_plan.final_runs(config)
    out += [
        (f"figure {name}", FigureSettings.from_config(config, figure=name))
        for name in figures_plan.figure_names(config, runs)
    ]
    out += [
        (f"results_table {name}", TableSettings.from_config(config, table=name))
        for name in config["analyse"]["tables"]
    ]
    ds = diagnostics_settings
    out.append(("diagnostics_embed_images", ds.EmbedSettings.from_config(config, split="test")))
    out.append(("diagnostics_image_similarity", ds.ImageSimilaritySettings.from_config(config)))
    out += [
        (f"diagnostics_figure {name}", ds.FigureSettings.from_config(config, name=name))
        for name in diagnostics_plan.figures(config)
    ]
    out += [
        (f"diagnostics_table {s}", ds.TableSettings.from_config(config, subject=s))
        for s in diagnostics_plan.table_subjects(config)
    ]
    return out


def _settings_objects(config: dict) -> list[tuple[str, object]]:
    """(rule, settings object) of every curate rule (and prepare_wordnet), acquire rule and
    demo/scale world rule for ``config``, built as the rules build them."""
    cs, acq = curate_settings, acquire_settings
    out = [
        ("demo_world", DemoSettings.from_config(config)),
        ("scale_world", ScaleSettings.from_config(config)),
        ("acquire_download", acq.DownloadSettings.from_config(config)),
        ("acquire_write", acq.WriteSettings.from_config(config)),
        ("acquire_build", acq.GatherSettings.from_config(config)),
    ]
    for name in curate_plan.laion_datasets(config):
        out += [
            ("acquire_topup_select", acq.TopupSettings.from_config(config, dataset=name)),
            ("acquire_split", acq.FillSettings.from_config(config, dataset=name)),
        ]
    for name in acquire_plan.adapter_datasets(config):
        out.append(
            ("acquire_materialise_range", acq.MaterialiseSettings.from_config(config, dataset=name))
        )
    out += [
        ("prepare_wordnet", cs.WordnetSettings.from_config(config)),
        ("curate_match", cs.MatchSettings.from_config(config)),
        ("curate_queries", cs.QueriesSettings.from_config(config)),
        ("curate_embed", cs.EmbedSettings.from_config(config)),
    ]
    for shard in curate_plan.shard_ids(config)[:1]:
        out.append(("curate_captions", cs.CaptionSettings.from_config(config, shard=shard)))
    for name in curate_plan.laion_datasets(config):
        out += [
            ("curate_candidates", cs.CandidatesSettings.from_config(config, dataset=name)),
            ("curate_select", cs.SelectSettings.from_config(config, dataset=name)),
            ("curate_calibration", cs.CalibrationSettings.from_config(config, dataset=name)),
        ]
    return out


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml", "scale.yaml"])
def test_every_settings_object_survives_the_rules_shell_word(repo_root, name):
    """What the command parses is what the rule built: one shell word, every field back."""
    config = load_config(repo_root / "config" / name)
    for what, settings in [
        *_settings_objects(config),
        *_analyse_figures_diagnostics_rule_settings(config),
    ]:
        words = shlex.split(to_arg(settings))
        assert len(words) == 1, what
        assert parse(type(settings), words[0], what=what) == settings, what


def _train_evaluate_rule_settings(config: dict) -> list[tuple[str, object]]:
    """(rule, settings object) of every train and evaluate rule for ``config``, built as the
    rules build them (every experiment, each model's first run of each kind)."""
    ts = train_settings
    out = [("evaluate_robustness", RobustnessSettings.from_config(config))]
    for exp in train_plan.experiments(config):
        dataset, protocol = exp["dataset"], exp["protocol"]
        if train_plan.is_published(exp):
            for model in config["train"]["models"]:
                out.append(("train_published", ts.PublishedSettings.from_config(config, model)))
            continue
        out.append(("train_halve", ts.HalveSettings.from_config(config, dataset, protocol)))
        for model in config["train"]["models"]:
            wc = (config, dataset, protocol, model)
            out.append(("train_draw_trials", ts.DrawSettings.from_config(*wc)))
            for stage in train_plan.stage_ids(config, dataset, protocol):
                out.append(("train_trial", ts.TrialSettings.from_config(*wc, str(stage))))
            for seed in train_plan.seeds(config, exp):
                out.append(("train_final", ts.FinalSettings.from_config(*wc, str(seed))))
            if train_plan.is_tl(protocol):
                out.append(("train_features", ts.FeaturesSettings.from_config(*wc)))
    return out


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml", "scale.yaml"])
def test_every_train_and_evaluate_settings_object_survives_the_rules_shell_word(repo_root, name):
    """What the train and evaluate commands parse is what their rules built: one shell word,
    every field back (the nested job settings too)."""
    config = load_config(repo_root / "config" / name)
    seen = set()
    for what, settings in _train_evaluate_rule_settings(config):
        seen.add(what)
        words = shlex.split(to_arg(settings))
        assert len(words) == 1, what
        assert parse(type(settings), words[0], what=what) == settings, what
    if any(not train_plan.is_published(e) for e in train_plan.experiments(config)):
        assert {"train_draw_trials", "train_trial", "train_final"} <= seen, name


def test_a_training_jobs_settings_are_read_once_from_the_config():
    """The example: the batch sizes reach the job from the schema in one step, with no
    default on the way (the job carries the space's batch size, or the model's override, and
    train.eval_batch_size as configured)."""
    config = validate_config(
        {
            "datasets": {"d": {"kind": "laion"}},
            "train": {
                "eval_batch_size": 64,
                "experiments": [{"dataset": "d", "protocol": "st", "space": "s"}],
                "spaces": {"s": {"batch_size": 16, "batch_size_overrides": {"vgg_mini": 8}}},
            },
        }
    )
    job = train_settings.JobSettings.from_config(config, "d", "st", "resnet_mini")
    assert (job.batch_size, job.eval_batch_size) == (16, 64)
    vgg = train_settings.JobSettings.from_config(config, "d", "st", "vgg_mini")
    assert vgg.batch_size == 8


def test_select_settings_apply_the_threshold_to_a_class_list_only_when_asked(tmp_path):
    listed = {"kind": "laion", "classes": {"from_file": str(tmp_path / "l.txt")}, "n_classes": 7}
    config = validate_config({"datasets": {"found": {"kind": "laion"}, "listed": listed}})
    found = curate_settings.SelectSettings.from_config(config, dataset="found")
    assert (found.applied_threshold, found.applied_n_classes) == (0.82, 1000)
    fixed = curate_settings.SelectSettings.from_config(config, dataset="listed")
    assert (fixed.applied_threshold, fixed.applied_n_classes) == (None, None)
    config["curate"]["apply_threshold_to_lists"] = True
    again = curate_settings.SelectSettings.from_config(config, dataset="listed")
    assert (again.applied_threshold, again.applied_n_classes) == (0.82, 7)  # the dataset's own
    assert (again.per_class, again.reserve_per_class) == (1500, 500)


def test_adapter_settings_are_the_datasets_own_where_it_sets_them(repo_root):
    config = load_config(repo_root / "config" / "config.yaml")
    assert acquire_plan.adapter_datasets(config)
    for name in acquire_plan.adapter_datasets(config):
        s = acquire_settings.MaterialiseSettings.from_config(config, dataset=name)
        spec = config["datasets"][name]
        assert (s.kind, s.path) == (spec["kind"], spec["path"])
        assert s.image_size == spec.get("image_size", config["acquire"]["image_size"])
        assert s.test_per_class == spec.get("test_per_class")  # null: the whole test split
        assert len(acquire_plan.range_ids(config, name)) == s.jobs


def test_fill_settings_take_the_datasets_overrides():
    config = validate_config(
        {
            "datasets": {
                "own": {"kind": "laion", "images_per_class": 7, "test_per_class": 2},
                "plain": {"kind": "laion"},
            },
            "acquire": {"near_duplicate_distance": 6},
        }
    )
    own = acquire_settings.FillSettings.from_config(config, dataset="own")
    plain = acquire_settings.FillSettings.from_config(config, dataset="plain")
    assert (own.images_per_class, own.test_per_class) == (7, 2)
    assert plain.images_per_class == config["curate"]["images_per_class"]
    assert plain.test_per_class == config["acquire"]["test_per_class"]
    assert own.near_duplicate_distance == plain.near_duplicate_distance == 6
    assert own.seed == config["seed"]


def test_a_missing_or_unknown_key_is_named():
    fill = dataclasses.asdict(
        acquire_settings.FillSettings.from_config(
            validate_config({"datasets": {"d": {"kind": "laion", "classes": "discover"}}}), "d"
        )
    )
    with pytest.raises(SettingsError, match=r"^--settings: missing key\(s\) \['seed'\]$"):
        parse(acquire_settings.FillSettings, {k: v for k, v in fill.items() if k != "seed"})
    with pytest.raises(SettingsError, match=r"^--settings: unknown key\(s\) \['shard_size'\]"):
        parse(acquire_settings.FillSettings, {**fill, "shard_size": 3})
    with pytest.raises(SettingsError, match=r"^--settings: key allow_fewer must be true or false"):
        parse(acquire_settings.FillSettings, {**fill, "allow_fewer": "yes"})


def test_download_settings_take_the_schemas_defaults():
    """A default lives in the schema only: the command has no default of its own (one in the
    CLI could differ from the schema's 64); the rule reads the validated config."""
    settings = acquire_settings.DownloadSettings.from_config(validate_config({}))
    assert settings.threads_per_process == schema_default("acquire.threads_per_process") == 64
    assert settings.timeout_s == schema_default("acquire.timeout_s")
    with pytest.raises(SystemExit):  # --settings is required: no flag-by-flag fallback
        main(["acquire-download", "--selection", "s.parquet", "--part", "0", "--work-dir", "w"])


def test_schema_default_reads_through_the_stage_schemas():
    defaults = validate_config({})
    for key in ("laion.batch_rows", "laion.max_caption_bytes", "wordnet.dict_dir", "seed"):
        section, _, leaf = key.rpartition(".")
        expected = defaults[section][leaf] if section else defaults[leaf]
        assert schema_default(key) == expected, key
    with pytest.raises(ConfigError, match=r"laion\.nope"):
        schema_default("laion.nope")
    with pytest.raises(ConfigError, match=r"config key laion is a section"):
        schema_default("laion")  # a section's default ({}) is no value to copy into a flag


def _shard(path, texts):
    urls = [f"http://x.invalid/{i}.jpg" for i in range(len(texts))]
    pq.write_table(pa.table({"URL": urls, "TEXT": texts}), path)


def test_match_runs_on_the_rules_settings_and_hand_flags_default_from_the_schema(
    nltk_data, tmp_path, monkeypatch
):
    src = tmp_path / "in.parquet"
    _shard(src, ["a tabby cat on a mat", "x" * 40 + " cat", "zzqx qqxzw"])
    lemmas = tmp_path / "lemmas.parquet"
    assert main(["lemmas", "--nltk-data", str(nltk_data), "--lemmas", str(lemmas)]) == 0
    config = validate_config({"laion": {"max_caption_bytes": 30}})
    rule = ["match", str(src), "--lemmas", str(lemmas)]
    settings = to_json(curate_settings.MatchSettings.from_config(config))
    assert main([*rule, "--matches", str(tmp_path / "rule.parquet"), "--settings", settings]) == 0
    assert set(pq.read_table(tmp_path / "rule.parquet")["row"].to_pylist()) == {0}  # row 1 > 30 B

    # by hand: the schema's defaults (16384 bytes: row 1 is matched too)
    assert main([*rule, "--matches", str(tmp_path / "hand.parquet")]) == 0
    assert set(pq.read_table(tmp_path / "hand.parquet")["row"].to_pylist()) == {0, 1}
    seen = {}
    real = curate_cli.match_settings

    def spy(*args, **flags):
        seen["s"] = real(*args, **flags)
        return seen["s"]

    monkeypatch.setattr(curate_cli, "match_settings", spy)
    assert main([*rule, "--matches", str(tmp_path / "hand2.parquet")]) == 0
    assert seen["s"] == curate_settings.MatchSettings(
        schema_default("laion.batch_rows"), schema_default("laion.max_caption_bytes"), False
    )
    # the same object the rule builds, but for the URL column the rule requires
    rule_settings = curate_settings.MatchSettings.from_config(validate_config({}))
    assert seen["s"] == dataclasses.replace(rule_settings, require_url=False)
    # a flag beside --settings would be ignored silently: refused instead
    both = [
        *rule,
        "--matches",
        str(tmp_path / "x.parquet"),
        "--settings",
        settings,
        "--batch-rows",
        "8",
    ]
    assert main(both) == 2


def test_prepare_wordnet_takes_the_rules_settings_or_the_hand_flag():
    from imagenot.curate.cli import wordnet_settings

    assert wordnet_settings(WordnetSettings("/wn/dict"), None) == WordnetSettings("/wn/dict")
    hand = wordnet_settings(None, None)
    assert hand == WordnetSettings(schema_default("wordnet.dict_dir"))
    assert wordnet_settings(None, "d").dict_dir == "d"
    with pytest.raises(ValueError, match="--dict-dir and --settings"):  # one or the other
        wordnet_settings(WordnetSettings("/wn/dict"), "d")


def _tree(root, classes, n):
    rng = np.random.default_rng(0)
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(n):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(buf, "JPEG")
            (root / c / f"{i}.jpg").write_bytes(buf.getvalue())


def test_materialise_range_and_gather_run_on_the_rules_settings(tmp_path):
    from imagenot.core.dataset import read_classes, read_manifest

    root = tmp_path / "folder"
    _tree(root, ["cat", "dog", "eel"], 6)
    config = validate_config(
        {
            "datasets": {"mine": {"kind": "imagefolder", "path": str(root), "test_per_class": 2}},
            "acquire": {"image_size": 16, "val_per_class": 1, "classes_per_job": 2},
        }
    )
    settings = acquire_settings.MaterialiseSettings.from_config(config, dataset="mine")
    assert settings.jobs == 2
    out, parts = tmp_path / "ds", []
    for job in acquire_plan.range_ids(config, "mine"):
        parts.append(str(tmp_path / f"range-{job}.parquet"))
        argv = ["materialise-range", "--out", str(out), "--job", job, "--part", parts[-1]]
        assert main([*argv, *shlex.split(f"--settings {to_arg(settings)}")]) == 0
    gather = to_json(acquire_settings.GatherSettings.from_config(config))
    from imagenot.core.paths import CLASSES_FILE, FINGERPRINT_FILE, MANIFEST_FILE

    names = {"manifest": MANIFEST_FILE, "classes": CLASSES_FILE, "fingerprint": FINGERPRINT_FILE}
    dataset = [f"--{role}={out / name}" for role, name in names.items()]
    assert main(["acquire-gather", "--parts", *parts, *dataset, "--settings", gather]) == 0
    manifest = read_manifest(out)
    assert read_classes(out) == ["cat", "dog", "eel"]
    assert manifest["split"].to_pylist().count("test") == 6


def test_scale_world_shard_runs_on_the_rules_settings(web_captions, nltk_data, tmp_path):
    config = validate_config(
        {
            "scale_world": {"enabled": True, "rows_per_shard": 300, "row_group_rows": 100},
            "laion": {"dir": scale_plan.LAION_DIR, "shard_pattern": "part-{i:05d}.parquet"},
        }
    )
    lemmas = tmp_path / "lemmas.parquet"
    assert main(["lemmas", "--nltk-data", str(nltk_data), "--lemmas", str(lemmas)]) == 0
    out = tmp_path / "part-00000.parquet"
    captions = str(web_captions)
    argv = ["scale-world-shard", "--index", "0", "--captions", captions]
    argv += ["--lemmas", str(lemmas), "--shard", str(out), "--settings"]
    assert main([*argv, to_json(ScaleSettings.from_config(config))]) == 0
    assert pq.read_metadata(out).num_rows == 300
    # the keys only the plan reads are not the command's: given by hand, they are dropped after
    # the schema validated them; a misspelt key is named
    assert main([*argv, json.dumps({"enabled": True, "rows_per_shard": 300})]) == 0
    assert main([*argv, json.dumps({"rows_per_shardz": 300})]) == 2
