"""One registry per name list: a toy model, transformation, figure, table and dataset
kind registered at run time through the registries alone (tests/plugins/toy_entries.py: no edit
of schema, rules or CLI) validate and plan; no schema file keeps its own copy of a list; the
registries import without torch."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from imagenot.core import registries
from imagenot.core.config import ConfigError, load_schema, read_config_file, validate_config

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "tests" / "plugins"
SCHEMAS = REPO / "workflow" / "schemas"


@pytest.fixture
def toys(monkeypatch, tmp_path):
    """The toy entries registered for one test, removed afterwards (nothing leaks). The test runs
    in an empty folder: the config check reads the preregistration record under the working
    directory's results/, and a finished demo run's record refuses the toys' changed space."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(PLUGINS))
    from toy_entries import ENTRIES

    with contextlib.ExitStack() as stack:
        for registry, name, entry in ENTRIES:
            stack.enter_context(registry.temporarily(name, entry))
        yield {name for _, name, _ in ENTRIES}
    assert not any(name in registry for registry, name, _ in ENTRIES)


def _toy_config() -> dict:
    """The demo config asking for every toy: a toy-kind dataset trained with the toy model,
    evaluated under the toy transformation, drawn in the toy figure and the toy table."""
    config = read_config_file(REPO / "config" / "config.yaml")
    # planned, never read: any existing folder passes the config check's path test
    config["datasets"]["toy"] = {"kind": "toy_kind", "path": str(PLUGINS)}
    config["train"]["models"] = ["resnet_mini", "toy_mlp"]
    config["train"]["experiments"].append({"dataset": "toy", "protocol": "st", "space": "st"})
    config.setdefault("evaluate", {}).setdefault("transforms", {})["ToyNoise"] = {"amount": 0.2}
    config.setdefault("analyse", {})["tables"] = ["accuracy", "toy_table"]
    return config


def test_toys_validate_and_plan_through_the_registries_alone(toys):
    from imagenot.acquire import plan as acquire_plan
    from imagenot.core.stages import check_workflow_config, stage_plans
    from imagenot.evaluate import plan as evaluate_plan
    from imagenot.evaluate.settings import RobustnessSettings
    from imagenot.figures import plan as figures_plan
    from imagenot.train import plan as train_plan

    config = _toy_config()
    config["analyse"]["figures"] = ["rankings_st", "toy_figure"]
    check_workflow_config(config)
    # the toy transformation's parameters come from its registry entry's schema (p filled)
    assert config["evaluate"]["transforms"]["ToyNoise"] == {"amount": 0.2, "p": 1.0}
    assert "ToyNoise" in RobustnessSettings.from_config(config).transforms

    targets = {t for plan in stage_plans() for t in plan.targets(config)}
    assert {"results/datasets/toy/manifest.parquet", "results/datasets/toy/fingerprint.txt"} <= (
        targets
    )
    assert "toy" in acquire_plan.adapter_datasets(config)
    runs = train_plan.final_runs(config)
    assert {(r["dataset"], r["model"]) for r in runs} >= {("toy", "toy_mlp")}
    assert any("/toy/st/toy_mlp/" in f for f in evaluate_plan.robustness_files(config))
    outputs = figures_plan.outputs(config, runs)
    assert "results/figures/toy_figure.pdf" in outputs
    assert figures_plan.code("toy_figure") == str(PLUGINS / "toy_figure_module.py")
    assert "results/tables/toy_table.csv" in outputs
    assert "toy_table" in figures_plan.table_regex().split("|")


def test_a_plugin_figure_drawn_per_dataset_plans_one_file_per_st_dataset(toys):
    """A kind's FigureKind alone (drawn for a dataset, when ST runs exist) makes the plan draw it
    once per ST dataset, in drawing order, with names the figure rule reads back."""
    from imagenot.core.stages import check_workflow_config
    from imagenot.figures import plan as figures_plan
    from imagenot.train import plan as train_plan
    from imagenot.train.plan import protocol_regex

    config = _toy_config()
    config["analyse"]["figures"] = ["toy_per_dataset"]
    check_workflow_config(config)
    runs = train_plan.final_runs(config)
    st = [
        d
        for d in figures_plan.dataset_order(config, runs)
        if (d, "st") in {(r["dataset"], r["protocol"]) for r in runs}
    ]
    assert "toy" in st and len(st) >= 2
    names = figures_plan.figure_names(config, runs)
    assert names == [f"toy_per_dataset_{d}" for d in st]
    for name, dataset in zip(names, st, strict=True):
        assert re.fullmatch(figures_plan.figure_regex(), name)
        request = figures_plan.figure_request(name, protocol_regex(config))
        assert request == {"kind": "toy_per_dataset", "dataset": dataset, "protocol": None}
    assert figures_plan.code("toy_per_dataset") == str(PLUGINS / "toy_figure_module.py")
    # no ST run, no file (its ``when``), however many other runs there are
    transfer = [r for r in runs if r["protocol"] != "st"]
    assert transfer and figures_plan.figure_names(config, transfer) == []


def test_a_figure_kind_names_only_known_fields_and_conditions():
    from imagenot.figures.registry import WORKFLOW_FIGURES, FigureKind

    with pytest.raises(ValueError, match="drawn_for"):
        FigureKind("m:f", ("protocol",))
    with pytest.raises(ValueError, match="when 'sometimes'"):
        FigureKind("m:f", when="sometimes")
    with pytest.raises(ValueError, match="'module:function'"):  # built-ins name theirs too
        FigureKind("rankings")
    with pytest.raises(TypeError, match="must be a FigureKind"):
        WORKFLOW_FIGURES.register("bad_figure", ("m:f", ("dataset",)))
    with WORKFLOW_FIGURES.temporarily("plain_figure", "m:f"):  # a plain string: once, always
        assert WORKFLOW_FIGURES["plain_figure"] == FigureKind("m:f", (), "always")
    assert "bad_figure" not in WORKFLOW_FIGURES


def test_toys_are_refused_once_unregistered(toys):
    from toy_entries import ENTRIES

    from imagenot.core.stages import check_workflow_config

    config = _toy_config()
    for registry, name, _ in ENTRIES:
        registry.unregister(name)
    with pytest.raises(ConfigError) as caught:
        check_workflow_config(config)
    for registry, name, entry in ENTRIES:
        registry.register(name, entry)  # the fixture removes them again
    for name in ("toy_kind", "toy_mlp", "ToyNoise", "toy_table"):
        assert name in str(caught.value), name


def test_registered_transformation_and_dataset_kind_reach_the_job_code(toys):
    """The lazy entries resolve: the evaluation builds the toy transformation, the adapter
    reads the toy kind's class list, the CLI offers the toy kind."""
    import torch

    from imagenot.acquire import adapters, ranges
    from imagenot.acquire.kinds import adapter_kinds
    from imagenot.evaluate.transforms import build_transforms, transform_uniforms

    settings = validate_config({"evaluate": {"transforms": {"ToyNoise": {"amount": 0.5}}}})
    toy = {t.name: t for t in build_transforms(settings["evaluate"]["transforms"])}["ToyNoise"]
    x = torch.full((4, 3, 8, 8), 0.5)
    out = toy(x, transform_uniforms(toy, 0, ["a", "b", "c", "d"]))
    assert out.shape == x.shape and not torch.equal(out, x)
    assert adapters.adapter_readers("toy_kind")[1]("/anywhere") == ["heads", "tails"]
    assert ranges.class_count_hint("toy_kind", "/anywhere") == 2
    assert "toy_kind" in adapter_kinds()


def test_toy_optimizer_schedule_and_encoder_validate_and_reach_the_job_code(toys):
    """The recipes' last rows: a space naming the toy optimizer and schedule, and a curation
    with the toy encoder, validate and plan; the training loop builds the toy optimizer and
    follows the toy schedule; the embedding job creates the toy encoder."""
    import torch

    from imagenot.core.stages import check_workflow_config
    from imagenot.curate.encoders import EncoderSpec, create_encoder
    from imagenot.train import plan as train_plan
    from imagenot.train.schedules import build_optimizer, learning_rate

    config = _toy_config()
    space = next(iter(config["train"]["spaces"].values()))
    space["hyperparameters"]["optimizer"] = {"value": "toy_sgd"}
    space["hyperparameters"]["scheduler"] = {"value": "toy_linear"}
    config["curate"]["encoder"] = {"backend": "toy_hash"}
    check_workflow_config(config)
    assert train_plan.final_runs(config)
    hp = {"optimizer": "toy_sgd", "scheduler": "toy_linear", "lr": 0.5, "warmup_steps": 0}
    hp |= {"warmup_epochs": 0, "warmup_decay": 1.0}
    opt = build_optimizer([torch.nn.Parameter(torch.zeros(2))], hp)
    assert type(opt) is torch.optim.SGD and opt.defaults["momentum"] == 0
    assert learning_rate(5, 10, 1, hp) == pytest.approx(0.25)  # halfway through 10 steps
    section = config["curate"]["encoder"]
    fields = {f: section[f] for f in EncoderSpec.__dataclass_fields__ if f in section}
    encoder = create_encoder(EncoderSpec(**fields))
    vectors = encoder.encode(["a dog", "a cat"])
    assert vectors.shape == (2, 8) and abs(float((vectors[0] ** 2).sum()) - 1) < 1e-6


def test_toy_figure_and_table_are_drawn_by_the_figure_and_table_commands(toys, tmp_path, capsys):
    """``imagenot figure`` / ``imagenot table`` offer and draw registered kinds they do not
    know by name (the figure's ``module:draw``, the table's builder)."""
    import pandas as pd
    import synthetic_runs as synthetic

    from imagenot.analyse.accuracy import accuracy_table, read_published, read_robustness
    from imagenot.analyse.settings import AccuracySettings
    from imagenot.cli import main
    from imagenot.core.config import validate_config

    runs = synthetic.runs_grid(
        ["imagenet", "imagenot"], synthetic.MODELS, (0,), downstream="imagenot", sources=()
    )
    paths = synthetic.robustness_results(
        tmp_path, runs, transforms=synthetic.TRANSFORMS, n_images=20, seed=0
    )
    published = read_published(
        synthetic.published_accuracy(tmp_path / "published.csv", synthetic.MODELS)
    )
    acc = tmp_path / "accuracy.csv"
    accuracy_table(
        read_robustness(paths), published, AccuracySettings.from_config(validate_config({}))
    ).to_csv(acc, index=False)
    options = {
        "datasets": ["imagenet", "imagenot"],
        "reference": "imagenet",
        "published_datasets": [],
        "downstream_dataset": "imagenot",
        "baseline_model": "alexnet",
        "standard_transform": "Identity",
        "confidence": 0.95,
        "axis": "linear",
        "imagenet_axis": "published",
        "dataset_names": {"imagenet": "ImageNet", "imagenot": "ImageNot"},
        "model_names": {},
    }
    style = {"width_in": 6.75, "font_size": 8, "dpi": 40, "top": 40, "highlight": []}
    figure = {"kind": "toy_figure", "dataset": None, "protocol": None}
    figure |= {"options": options, "figure_options": style}
    common = [str(acc), "--settings"]
    pdf, png = tmp_path / "toy.pdf", tmp_path / "toy.png"
    argv = ["figure", *common, json.dumps(figure), "--pdf", str(pdf), "--png", str(png)]
    assert main(argv) == 0
    assert pdf.read_bytes()[:5] == b"%PDF-" and png.stat().st_size > 0
    # a kind drawn per dataset gets its dataset as a keyword (and refuses to draw without one)
    per_dataset = {**figure, "kind": "toy_per_dataset", "dataset": "imagenot"}
    pdf, png = tmp_path / "toy_imagenot.pdf", tmp_path / "toy_imagenot.png"
    argv = ["figure", *common, json.dumps(per_dataset), "--pdf", str(pdf), "--png", str(png)]
    assert main(argv) == 0 and pdf.read_bytes()[:5] == b"%PDF-"
    argv[3] = json.dumps({**per_dataset, "dataset": None})
    with pytest.raises(SystemExit, match=r"toy_per_dataset: --settings\.dataset is required"):
        main(argv)
    # the table command reads both rankings reports (checked key by key on the way in), even
    # where a table, like this one, uses neither
    reports = [tmp_path / "standard.json", tmp_path / "robust.json"]
    for variant, report in zip(("standard", "robust"), reports, strict=True):
        rankings = ["rankings", str(acc), "--variant", variant, "--bootstrap-reps", "0"]
        assert main([*rankings, "--out", str(report)]) == 0
    (tmp_path / "damaged.json").write_text("{}")
    argv = ["table", *common, json.dumps({"table": "toy_table", "options": options})]
    argv += ["--rankings", str(reports[0]), str(tmp_path / "damaged.json")]
    assert main([*argv, "--csv", str(tmp_path / "no.csv"), "--md", str(tmp_path / "no.md")]) == 2
    assert "damaged.json: missing key(s) ['reference', " in capsys.readouterr().err
    csv, md = tmp_path / "toy.csv", tmp_path / "toy.md"
    table = json.dumps({"table": "toy_table", "options": options})
    argv = ["table", *common, table, "--rankings", *map(str, reports)]
    assert main([*argv, "--csv", str(csv), "--md", str(md)]) == 0
    assert pd.read_csv(csv)["rows"].tolist() == [len(pd.read_csv(acc))]
    assert "Number of result rows" in md.read_text()  # the builder's docstring is the caption


def test_a_plugin_module_registers_for_a_snakemake_dry_run(tmp_path, monkeypatch):
    """The stronger proof: a separate Snakemake process imports the plugin named by config key
    ``plugins`` and plans the toy dataset kind, model, transformation, figure and table (the
    one figure rule takes every registered kind)."""
    config = _toy_config()
    config["plugins"] = ["imagenot_toy_plugin"]
    config["analyse"]["figures"] = ["rankings_st", "toy_figure"]
    configfile = tmp_path / "toy.yaml"
    configfile.write_text(yaml.safe_dump(config))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PLUGINS), str(REPO / "workflow"), env.get("PYTHONPATH", "")]
    )
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env.pop(registries.PLUGINS_ENV, None)
    run = subprocess.run(
        [
            "snakemake",
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(configfile),
            "-n",
            "-p",
            "--cores",
            "1",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:] + run.stdout[-3000:]
    out = run.stdout
    assert "results/datasets/toy/manifest.parquet" in out
    assert '"kind":"toy_kind"' in out  # in the materialisation's settings JSON
    assert "results/evaluate/toy/st/toy_mlp/seed-0/robustness.parquet" in out
    assert "ToyNoise" in out  # in the evaluation's settings JSON
    assert "results/tables/toy_table.csv" in out
    assert "results/figures/toy_figure.pdf" in out and '"kind":"toy_figure"' in out


def test_a_missing_plugin_is_a_one_line_error(monkeypatch):
    from imagenot.core.stages import check_workflow_config

    monkeypatch.delenv(registries.PLUGINS_ENV, raising=False)
    with pytest.raises(ValueError, match="plugins: cannot import 'no_such_plugin_module'"):
        check_workflow_config({"plugins": ["no_such_plugin_module"]})


def test_plugins_are_exported_to_jobs(monkeypatch):
    monkeypatch.delenv(registries.PLUGINS_ENV, raising=False)
    registries.load_plugins(["json", "csv"])
    assert os.environ[registries.PLUGINS_ENV] == "json,csv"


# ----------------------------------------------------------------------- one list per name


def _walk(node, path=()):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _walk(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, (*path, i))


@pytest.mark.parametrize("schema", sorted(p.name for p in SCHEMAS.glob("*.yaml")))
def test_no_schema_file_keeps_a_copy_of_a_registry(schema):
    """Enums and defaults naming two or more registered names of one registry are copies: the
    schema says ``x-registry: KIND`` instead (the loader expands it)."""
    raw = yaml.safe_load((SCHEMAS / schema).read_text())
    lists = {kind: set(registries.names(kind)) for kind in registries.REGISTRIES}
    for path, node in _walk(raw):
        for key in ("enum", "default"):
            values = node.get(key)
            if not isinstance(values, list):
                continue
            for kind, names in lists.items():
                common = names & {v for v in values if isinstance(v, str)}
                if len(common) >= 2 and not (key == "default" and common < names):
                    pytest.fail(f"{schema} {'.'.join(map(str, path))}.{key}: copy of {kind}")
        props = node.get("properties")
        for kind, names in lists.items():  # keys naming registered names: say so, no stale key
            if isinstance(props, dict) and len(names & set(props)) >= 2:
                assert node.get("x-registry-keys") == kind, (schema, path, kind)
                assert set(props) <= names, (schema, path, sorted(set(props) - names))


def test_markers_expand_to_the_registries_current_names(toys):
    from imagenot.figures.registry import WORKFLOW_FIGURES

    analyse = load_schema("analyse.schema.yaml")["properties"]
    assert analyse["figures"]["items"]["enum"] == list(WORKFLOW_FIGURES)
    assert "toy_figure" in analyse["figures"]["default"]
    evaluate = load_schema("evaluate.schema.yaml")["properties"]["transforms"]
    assert list(evaluate["properties"])[-1] == "ToyNoise"
    assert evaluate["additionalProperties"] is False


def test_a_stale_schema_entry_is_an_error(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "type: object\nx-registry-keys: transforms\nproperties: {NoSuchTransform: {}}\n"
    )
    with pytest.raises(ConfigError, match="NoSuchTransform"):
        load_schema("s.yaml", tmp_path)
    # ... also when the schema file is reached through a $ref while validating
    (tmp_path / "main.yaml").write_text("properties: {evaluate: {$ref: s.yaml}}\n")
    with pytest.raises(ConfigError, match=r"s\.yaml: properties \['NoSuchTransform'\]"):
        validate_config({"evaluate": {}}, tmp_path, "main.yaml")


def test_registration_refuses_duplicates_and_unknown_names():
    from imagenot.train.registry import MODELS

    with pytest.raises(registries.RegistryError, match="already registered"):
        MODELS.register("resnet_mini", MODELS["resnet_mini"])
    with pytest.raises(registries.RegistryError, match="unknown model 'nope'; registered: alexnet"):
        MODELS.entry("nope")
    with pytest.raises(registries.RegistryError, match="unknown registry"):
        registries.names("colours")


@pytest.mark.parametrize("kind", sorted(registries.REGISTRIES))
def test_registries_import_without_torch(kind):
    module = registries.REGISTRIES[kind].split(":")[0]
    code = (
        f"import sys, {module}, imagenot.core.config, imagenot.core.stages; "
        f"from imagenot.core import registries; registries.names({kind!r}); "
        "assert 'torch' not in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


def test_validation_imports_no_torch(tmp_path):
    code = (
        "import sys; from imagenot.core.config import read_config_file; "
        "from imagenot.core.stages import check_workflow_config; "
        f"check_workflow_config(read_config_file({str(REPO / 'config' / 'config.yaml')!r})); "
        "assert 'torch' not in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    # in an empty folder: no results/ of a run in the working tree to check the config against
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
