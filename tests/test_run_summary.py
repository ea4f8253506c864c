"""The run's summary (imagenot.run.run_summary): read from a small results tree in tmp_path, printed
by the Snakefile's onsuccess handler (exit 1 on unusable results), written for the report, and
the report's landing page; and `imagenot rankings` on the workflow's own accuracy table."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from trial_records import selected

from imagenot.acquire import plan as acquire_plan
from imagenot.analyse import PUBLISHED_DATASET, transfer
from imagenot.core.config import load_config
from imagenot.core.dataset import MANIFEST_FILE
from imagenot.run import run_summary, summary_plan
from imagenot.train import plan as train_plan
from imagenot.train.records import SEAL_KEY, write_record

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "config" / "config.yaml"
CHANCE_MODEL = "vgg_mini"


def _manifest(root: Path, name: str, train: int, val: int, test: int) -> None:
    splits = ["train"] * train + ["val"] * val + ["test"] * test
    out = root / acquire_plan.dataset_dir(name) / MANIFEST_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"key": [f"k{i}" for i in range(len(splits))], "split": splits}), out)


def _download_stats(root: Path, name: str, parts: dict[str, tuple[int, int]]) -> None:
    rows = []
    for part, (ok, failed) in parts.items():
        rows += [
            {"round": 0, "part": part, "reason": "success", "count": ok},
            {"round": 0, "part": part, "reason": "http_error", "count": failed},
        ]
    out = root / acquire_plan.acquire_dir(name) / "download_stats.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), out)


def _evaluation(root: Path, run: dict, top1: float, record: str) -> None:
    """A final run's evaluation with its Identity row alone: ``top1`` of 200 test images, of
    the record of digest ``record``."""
    from imagenot.evaluate.paths import ROBUSTNESS
    from imagenot.evaluate.robustness import ROBUSTNESS_SCHEMA

    row = {**run, "transform": "Identity", "top1": top1, "top5": 100.0, "n": 200,
           "ci_low": 0.0, "ci_high": 100.0, "record_sha256": record}  # fmt: skip
    out = root / ROBUSTNESS.format(**run)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([row], ROBUSTNESS_SCHEMA), out)


def _results(root: Path, config: dict, chance_model: str | None) -> None:
    for i, run in enumerate(train_plan.final_runs(config)):
        at_chance = run["model"] == chance_model
        result = {
            **run,
            "val_accuracy": 10.0 if at_chance else 60.0 + i % 7,
            "num_classes": 10,
            "image_size": 32,
            "dataset_fingerprint": "0" * 64,
            "weights_sha256": "1" * 64,
            # the trial its run selected, as train-final records it
            **selected(Path(root / train_plan.final_dir(run)).parents[1], run["model"]),
        }
        written = write_record(result, root / train_plan.final_dir(run) / "result.json")
        _evaluation(root, run, 10.0 if at_chance else 55.0 + i % 5, written[SEAL_KEY])


def results_tree(root: Path, *, broken: bool) -> dict:
    """The demo config's results: with ``broken``, imagenot has no training image, one of its
    download parts fetched 10% against the dataset's 50%, and one model is at chance."""
    config = load_config(DEMO)
    _manifest(root, "imagenot", 0 if broken else 80, 20, 20)
    _manifest(root, "imagenet", 80, 20, 20)
    _manifest(root, "fashion_mnist", 400, 100, 200)
    _download_stats(
        root, "imagenot", {"00000": (90, 10), "00001": (10, 90) if broken else (80, 20)}
    )
    _results(root, config, CHANCE_MODEL if broken else None)
    return config


def test_a_clean_run_has_no_problem(tmp_path):
    config = results_tree(tmp_path, broken=False)
    summary = run_summary.collect(summary_plan.layout(config), tmp_path)
    assert summary["problems"] == [] and summary["errors"] == summary["warnings"] == 0
    assert summary["datasets"]["fashion_mnist"]["images"] == {"train": 400, "val": 100, "test": 200}
    assert summary["datasets"]["imagenot"]["download"]["success_rate"] == pytest.approx(0.85)
    assert summary["built"]["final_runs"] == len(train_plan.final_runs(config))
    text = run_summary.format_text(summary)
    assert "## Problems\n\nnone" in text and "UNUSABLE" not in text
    assert "| fashion_mnist | 400 | 100 | 200 | n/a (read from disk) |" in text


def test_an_unreadable_file_is_a_warning_not_a_crash(tmp_path):
    config = results_tree(tmp_path, broken=False)
    manifest = tmp_path / acquire_plan.dataset_dir("imagenet") / MANIFEST_FILE
    manifest.write_bytes(b"")  # a stand-in, as tests and interrupted writers leave
    summary = run_summary.collect(summary_plan.layout(config), tmp_path)
    assert summary["datasets"]["imagenet"] == {"built": False} and summary["errors"] == 0
    assert [p["level"] for p in summary["problems"]] == ["warning"]
    assert "manifest.parquet unreadable" in summary["problems"][0]["message"]
    # an evaluation likewise: its run's test accuracy is not shown, and the summary says why
    from imagenot.evaluate.paths import ROBUSTNESS

    run = train_plan.final_runs(config)[0]
    (tmp_path / ROBUSTNESS.format(**run)).write_bytes(b"")
    summary = run_summary.collect(summary_plan.layout(config), tmp_path)
    warnings = [p["message"] for p in summary["problems"] if p["level"] == "warning"]
    assert len(warnings) == 2 and f"{ROBUSTNESS.format(**run)} unreadable" in warnings[1]
    key = (f"{run['dataset']}/{run['protocol']}", run["model"])
    (row,) = [m for m in summary["models"] if (m["experiment"], m["model"]) == key]
    assert row["best_test_accuracy"] is None and summary["errors"] == 0


def test_unusable_results_are_errors_and_suspect_ones_warnings(tmp_path):
    config = results_tree(tmp_path, broken=True)
    summary = run_summary.collect(summary_plan.layout(config), tmp_path)
    errors = [p["message"] for p in summary["problems"] if p["level"] == "error"]
    warnings = [p["message"] for p in summary["problems"] if p["level"] == "warning"]
    assert errors == ["dataset imagenot: the train split has 0 images"]
    assert any(f"model {CHANCE_MODEL} is at chance on every experiment" in w for w in warnings)
    assert any("download part 00001 (round 0) fetched 10% of 100" in w for w in warnings)
    assert not any("00000" in w for w in warnings)
    text = run_summary.format_text(summary)
    assert text.index("UNUSABLE RESULTS: 1 error(s)") < text.index("## Datasets")
    assert "## Problems\n\n- ERROR: dataset imagenot: the train split has 0 images" in text
    assert f"| imagenot/st | {CHANCE_MODEL} | 1 | 10.00 | 10.00 (at chance) | 10.00 |" in text


def test_a_model_at_chance_on_one_experiment_is_one_warning_in_summary_and_report(tmp_path):
    """One verdict: every "(at chance)" of the models table is a warning, so the report's
    landing page (the warnings count) says what the table marks (the demo's EfficientNet probe
    was marked at chance while the report said "Warnings 0")."""
    config = results_tree(tmp_path, broken=False)
    run = {"dataset": "fashion_mnist", "protocol": "tl-imagenot", "model": "efficientnet_mini"}
    result = tmp_path / train_plan.final_dir({**run, "seed": 0}) / "result.json"
    _evaluation(tmp_path, {**run, "seed": 0}, 13.5, json.loads(result.read_text())[SEAL_KEY])
    summary = run_summary.collect(summary_plan.layout(config), tmp_path)
    text = run_summary.format_text(summary)
    assert text.count("(at chance)") == summary["warnings"] == 1
    (warning,) = [p["message"] for p in summary["problems"]]
    assert warning.startswith("model efficientnet_mini is at chance on fashion_mnist/tl-imagenot")
    assert "test 13.50% against chance 10.00%" in warning
    run_summary.write(summary, *(tmp_path / n for n in ("s.md", "s.json", "s.html")))
    (tmp_path / run_summary.SUMMARY_JSON).write_text((tmp_path / "s.json").read_text())
    assert run_summary.landing(tmp_path)["warnings"] == 1


def test_the_end_of_a_run_says_when_the_report_is_stale_and_how_to_refresh_it(
    tmp_path, monkeypatch, capsys
):
    """A figure redrawn after the report: the closing line says the report is stale, which file
    is newer and the command that refreshes it (with the run's config files); a run of a few
    named files prints a short summary, not the whole one."""
    import os
    import types

    config = results_tree(tmp_path, broken=False)
    monkeypatch.chdir(tmp_path)
    report = tmp_path / run_summary.REPORT
    report.write_text("<html></html>")
    figure = tmp_path / "results" / "figures" / "relative_progress.png"
    figure.parent.mkdir(parents=True)
    figure.write_bytes(b"png")
    os.utime(report, (1_000_000, 1_000_000))  # written before the figure
    workflow = types.SimpleNamespace(
        dag=types.SimpleNamespace(targetfiles={"results/figures/relative_progress.pdf"}),
        configfiles=[str(tmp_path / "config" / "config.yaml"), str(tmp_path / "my.yaml")],
        main_snakefile=str(tmp_path / "Snakefile"),
    )
    summary_plan.on_success(config, workflow)
    err = capsys.readouterr().err
    assert "# Run summary" not in err  # the short one
    assert "Done: results/figures/relative_progress.pdf." in err
    assert "The study: 0 error(s), 0 warning(s)" in err
    assert f"Report: {run_summary.REPORT} is STALE" in err
    assert "results/figures/relative_progress.png" in err
    assert "--configfile config/config.yaml my.yaml --report results/report.html`" in err
    os.utime(report)  # refreshed: current again
    summary_plan.on_success(config, types.SimpleNamespace(**{**vars(workflow), "dag": None}))
    err = capsys.readouterr().err
    assert "# Run summary" in err and err.rstrip().endswith(f"Report: {run_summary.REPORT}")
    # from a working directory of its own: a command that works from anywhere
    elsewhere = types.SimpleNamespace(**{**vars(workflow), "main_snakefile": "/clone/Snakefile"})
    command = summary_plan.run_report_command(elsewhere)
    assert "--snakefile /clone/Snakefile --workflow-profile /clone/profiles/default" in command
    assert f"--directory {tmp_path}" in command


def test_best_accuracy_is_over_seeds(tmp_path):
    config = results_tree(tmp_path, broken=False)
    models = run_summary.collect(summary_plan.layout(config), tmp_path)["models"]
    experiments = {(r["dataset"], r["protocol"], r["model"]) for r in train_plan.final_runs(config)}
    assert len(models) == len(experiments)
    run = train_plan.final_runs(config)[0]
    extra = dict(run, seed=run["seed"] + 7)
    rows = run_summary._best_per_model(
        [
            {
                **run,
                "val_accuracy": 50.0,
                "test_accuracy": 40.0,
                "record": {"path": "a/robustness.parquet", "record_sha256": "a" * 64},
                "chance_accuracy": 10.0,
                "at_chance": False,
            },
            {
                **extra,
                "val_accuracy": 45.0,
                "test_accuracy": 48.0,
                "record": {"path": "b/robustness.parquet", "record_sha256": "b" * 64},
                "chance_accuracy": 10.0,
                "at_chance": False,
            },
        ]
    )
    assert rows == [
        {
            "experiment": f"{run['dataset']}/{run['protocol']}",
            "model": run["model"],
            "seeds": 2,
            "best_val_accuracy": 50.0,
            "best_test_accuracy": 48.0,
            # the record the best test accuracy (the second seed's) was read from
            "best_test_record": {"path": "b/robustness.parquet", "record_sha256": "b" * 64},
            "chance_accuracy": 10.0,
            "at_chance": False,
        }
    ]


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "imagenot.cli", "run-summary", *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def test_cli_writes_the_three_files(tmp_path):
    config = results_tree(tmp_path, broken=True)
    settings = tmp_path / "layout.json"
    settings.write_text(json.dumps(summary_plan.layout(config)))
    outputs = ("--md", "results/summary.md", "--json", "results/summary.json")
    done = _cli(tmp_path, "--settings", f"@{settings}", *outputs, "--html", "results/summary.html")
    assert done.returncode == 0, done.stderr  # the rule writes the report's page either way
    strict = _cli(tmp_path, "--settings", f"@{settings}", "--strict")
    assert strict.returncode == 1, strict.stderr
    assert "UNUSABLE RESULTS" in done.stdout
    assert json.loads((tmp_path / run_summary.SUMMARY_JSON).read_text())["errors"] == 1
    page = (tmp_path / run_summary.SUMMARY_HTML).read_text()
    assert "<table>" in page and "UNUSABLE RESULTS" in page
    assert run_summary.landing(tmp_path)["errors (unusable results)"] == 1
    assert run_summary.landing(tmp_path / "elsewhere") == {"run summary built": 0}


def test_the_written_summary_names_the_runs_own_report_command(tmp_path, monkeypatch):
    """The summary the rule writes names the command that writes the report as a user pastes
    it from the clone's root: the venv's Snakemake and the run's config files (a paper run:
    config/paper.yaml). Planted: the demo default names no --configfile, and a summary handed
    no command names the demo's."""
    import os
    import types

    from conftest import snakemake_workflow

    monkeypatch.chdir(REPO)
    venv = Path(sys.executable).parent / "snakemake"
    snakemake = os.path.relpath(venv) if venv.is_file() else "snakemake"

    def run(*files: Path) -> str:
        workflow = types.SimpleNamespace(
            configfiles=[str(f) for f in files], main_snakefile=str(REPO / "Snakefile")
        )
        return summary_plan.run_report_command(workflow)

    paper = run(REPO / "config" / "paper.yaml")
    report = f"--report {run_summary.REPORT}"
    assert paper == f"{snakemake} --configfile config/paper.yaml {report}"
    assert run(DEMO) == f"{snakemake} {report}"  # the demo default: no --configfile
    config = results_tree(tmp_path, broken=False)
    settings = tmp_path / "layout.json"
    settings.write_text(json.dumps(summary_plan.layout(config)))
    outputs = ("--md", run_summary.SUMMARY_MD, "--html", run_summary.SUMMARY_HTML)
    files = json.dumps(["config/paper.yaml"])
    done = _cli(tmp_path, "--settings", f"@{settings}", *outputs, "--configfiles", files)
    assert done.returncode == 0, done.stderr
    # the job builds the command where it runs: here a working directory of its own
    monkeypatch.chdir(tmp_path)
    written = summary_plan.report_command(["config/paper.yaml"])
    assert f"--configfile {REPO / 'config' / 'paper.yaml'} {report}" in written
    assert f"--directory {tmp_path}" in written
    for made in (run_summary.SUMMARY_MD, run_summary.SUMMARY_HTML):
        assert f"`{written}`" in (tmp_path / made).read_text(), made
    done = _cli(tmp_path, "--settings", f"@{settings}", *outputs)
    md = (tmp_path / run_summary.SUMMARY_MD).read_text()
    assert f"`{run_summary.REPORT_COMMAND}`" in md and "paper.yaml" not in md
    # the rule hands its own run's command: an overlay's run names the overlay
    overlay = tmp_path / "my.yaml"
    overlay.write_text("description: mine\n")
    work = tmp_path / "work"
    work.mkdir()
    with snakemake_workflow(work, [DEMO, overlay]) as api:
        (rule,) = [r for r in api._workflow.rules if r.name == "run_summary"]
        handed = rule.params.configfiles(None)
    # recorded: the config files, the clone's own by their path from its root, not the command
    # with the clone's or the working directory's place (tests/test_moved_run.py)
    assert json.loads(handed) == ["config/config.yaml", str(overlay)]


def _snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """This interpreter's Snakemake, run in ``workdir`` (its jobs find this venv's tools:
    conftest puts its bin folder on PATH)."""
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--directory", str(workdir), *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def tiny_workflow(tmp_path):
    """A workflow of one rule with the real Snakefile's onsuccess handler and report page, over
    the results tree of :func:`results_tree`."""
    handler = re.search(r"^onsuccess:\n((?:    .+\n)+)", (REPO / "Snakefile").read_text(), re.M)
    assert handler and len(handler.group(1).splitlines()) == 1  # the handler stays one call
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(load_config(DEMO)))
    (tmp_path / "Snakefile").write_text(
        'configfile: "config.yaml"\n\n\n'
        f'include: "{REPO}/rules/common.smk"\n\n\n'
        f'report: "{REPO}/report/workflow.rst"\n\n\n'
        "rule page:\n"
        "    output:\n"
        '        report("results/summary.html", category="Summary"),\n'
        '        report("results/figures/rankings_st.pdf", category="Figures"),\n'
        "    shell:\n"
        '        "echo summary > {output[0]}; echo figure > {output[1]}"\n\n\n'
        f"onsuccess:\n{handler.group(1)}"
    )
    return tmp_path


def test_onsuccess_prints_the_summary_and_fails_on_unusable_results(tiny_workflow):
    results_tree(tiny_workflow, broken=True)
    done = _snakemake(tiny_workflow)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "# Run summary" in done.stderr and "the train split has 0 images" in done.stderr
    assert "the run finished with UNUSABLE RESULTS (1 error(s)" in done.stderr
    assert "--report results/report.html` writes it" in done.stderr


def test_onsuccess_passes_a_clean_run_and_the_report_opens_on_the_results(
    tiny_workflow, rankings_file
):
    """The report's landing page: whether rankings transfer first (the summary's lines), then
    the counts; its text links the rankings figure."""
    config = results_tree(tiny_workflow, broken=False)
    _plant_rankings(tiny_workflow, rankings_file)
    done = _snakemake(tiny_workflow)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "## Problems\n\nnone" in done.stderr
    assert "## Do rankings transfer?\n\n- ST, fashion_mnist vs imagenet: " in done.stderr
    summary = run_summary.collect(summary_plan.layout(config), tiny_workflow)
    summary |= {"warnings": 3, "built": {"datasets": 3, "final_runs": 30}}
    (tiny_workflow / run_summary.SUMMARY_JSON).write_text(json.dumps(summary))
    answers = {
        f"Do rankings transfer? {line} (value: Kendall tau-b)": round(row["kendall_tau"], 3)
        for line, row in zip(
            transfer.transfer_lines(summary), summary["transfer"]["rows"], strict=True
        )
    }
    profile = yaml.safe_load((REPO / "profiles" / "default" / "config.yaml").read_text())
    landing = REPO / "profiles" / "default" / profile["report-metadata"]
    done = _snakemake(
        tiny_workflow, "--report", "results/report.html", "--report-metadata", str(landing)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tiny_workflow / "results" / "report.html").read_text()
    # with metadata, Snakemake's report opens on its landing page instead of the rule graph
    meta = json.loads(re.search(r"metadata = (\{.*?\});?\n", page).group(1))
    assert list(meta)[: len(answers)] == list(answers)  # the answer first
    assert meta == answers | {
        "errors (unusable results)": 0,
        "warnings": 3,
        "datasets built": 3,
        "final runs": 30,
    }
    assert "Do rankings" in page and "summary.html" in page
    # the landing text links the rankings figure
    assert "app.showResultInfo('results/figures/rankings_st.pdf')\\\">rankings_st.pdf</a>" in page


def test_rankings_of_the_workflows_table_miss_no_published_model(tmp_path, capsys):
    from imagenot.cli import main

    rows = []
    for model, acc in (("m1", 70.0), ("m2", 60.0), ("m3", 50.0)):
        for d in ("imagenet", "imagenot"):
            rows.append({"model": model, "dataset": d, "accuracy": acc - (d == "imagenot")})
    published = ("m1", "m2", "m3", "p4", "p5")  # torchvision publishes more models than ran
    rows += [
        {"model": m, "dataset": PUBLISHED_DATASET, "accuracy": 80.0 - i}
        for i, m in enumerate(published)
    ]
    table = tmp_path / "accuracy.csv"
    pd.DataFrame(rows).to_csv(table, index=False)
    assert main(["rankings", str(table)]) == 0
    assert "missing" not in capsys.readouterr().err
    pd.DataFrame(
        [r for r in rows if not (r["model"] == "m3" and r["dataset"] == "imagenot")]
    ).to_csv(table, index=False)
    assert main(["rankings", str(table)]) == 0
    err = capsys.readouterr().err
    assert "imagenot: 1 model(s) of the table missing: m3" in err
    assert "p4" not in err


# -- Do rankings transfer? (the summary's first section and the report's landing page) --------


@pytest.fixture(scope="module")
def rankings_file(tmp_path_factory) -> Path:
    """A rankings report of a synthetic study written by ``imagenot rankings`` (ImageNet,
    ImageNot and Fashion-MNIST trained from scratch, fine-tuned and probed from ImageNot, and
    the published accuracies), its bootstrap over models."""
    import synthetic_runs as synthetic

    from imagenot.analyse.accuracy import accuracy_table, read_published, read_robustness
    from imagenot.analyse.settings import AccuracySettings
    from imagenot.cli import main
    from imagenot.core.config import validate_config

    root = tmp_path_factory.mktemp("rankings")
    models = synthetic.MODELS
    datasets = ["imagenet", "imagenot", "fashion_mnist"]
    runs = synthetic.runs_grid(
        datasets, models, (0,), downstream="fashion_mnist", sources=("imagenot",)
    )
    paths = synthetic.robustness_results(root, runs, transforms=("Identity",), n_images=60, seed=0)
    published = synthetic.published_accuracy(root / "published.csv", models)
    settings = AccuracySettings.from_config(validate_config({}))
    acc = accuracy_table(read_robustness(paths), read_published(published), settings)
    acc.to_csv(root / "accuracy.csv", index=False)
    out = root / "rankings_standard.json"
    argv = ["rankings", str(root / "accuracy.csv"), "--reference", "imagenet", "--out", str(out)]
    assert main([*argv, "--bootstrap-reps", "20", "--bootstrap-over", "models"]) == 0
    return out


def _plant_rankings(root: Path, source: Path, edit=None, where: str | None = None) -> dict:
    """The rankings report ``source`` at the workflow's path under ``root`` (or ``where``),
    changed by ``edit``; returns its JSON."""
    from imagenot.analyse.plan import RANKINGS

    data = json.loads(source.read_text())
    if edit is not None:
        edit(data)
    out = root / (where or RANKINGS.format(variant="standard"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data))
    return data


def _expected_line(data: dict, label: str, tag: str, figure: str | None) -> str:
    """The summary's line for ``label``, from the report's JSON and the rule, by hand."""
    e = data["datasets"][label]
    tau, p, (low, high) = e["kendall_tau"], e["kendall_p"], e["bootstrap"]["kendall_tau_ci"]
    verdict = "yes" if p < 0.05 and tau > 0 else "no" if p < 0.05 and tau < 0 else "inconclusive"
    boot = e["bootstrap"]["interval_name"] + ", resampling models"
    return (
        f"{tag}, {label} vs imagenet: Kendall tau-b {tau:.2f} [{low:.2f}, {high:.2f}] "
        f"(95% bootstrap: {boot}), p={p:.3g}, {e['common_models']} models: {verdict}"
        + (f"; figure: {figure}" if figure else "")
    )


def test_the_summary_opens_on_whether_rankings_transfer(tmp_path, rankings_file):
    """Per comparison, in protocol order (ST, FT, TL, then the published accuracies): Kendall
    tau-b with its bootstrap interval, the p-value, the models, the verdict and the figure, the
    numbers those of the rankings report, before the counts of what was built."""
    config = results_tree(tmp_path, broken=False)
    data = _plant_rankings(tmp_path, rankings_file)
    summary = run_summary.collect(summary_plan.layout(config), tmp_path)
    assert summary["errors"] == summary["warnings"] == 0
    t = summary["transfer"]
    assert t["built"] and t["left_out"] == [] and t["reference"] == "imagenet"
    assert [r["comparison"] for r in t["rows"]] == [
        "fashion_mnist",
        "imagenot",
        "fashion_mnist/ft-imagenot",
        "fashion_mnist/tl-imagenot",
        PUBLISHED_DATASET,
    ]
    lines = transfer.transfer_lines(summary)
    # the figure of each line is the slope chart linking its ranking to the reference's
    slope = "results/figures/rank_changes_st.pdf"
    assert lines[1] == _expected_line(data, "imagenot", "ST", slope)
    figure = "results/figures/rank_changes_transfer.pdf"
    assert lines[2] == _expected_line(data, "fashion_mnist/ft-imagenot", "FT", figure)
    assert lines[3] == _expected_line(data, "fashion_mnist/tl-imagenot", "TL", figure)
    # the demo config trains no fashion_mnist from scratch: no figure of it is planned
    assert lines[0] == _expected_line(data, "fashion_mnist", "ST", None)
    text = run_summary.format_text(summary)
    assert text.index("## Do rankings transfer?") < text.index("Built:")
    assert f"- {lines[1]}\n" in text and f"Rule: {transfer.RULE}." in text
    assert "Left out" not in text


def test_without_the_slope_charts_each_line_names_the_rankings_figure(tmp_path):
    """A config that asks for no rank-changes figure: the ST and FT/TL lines fall back to the
    rankings figure of their protocol."""
    import copy

    config = copy.deepcopy(results_tree(tmp_path, broken=False))
    planned = summary_plan.transfer(config)["comparisons"]
    assert planned["fashion_mnist/ft-imagenot"]["figure"].endswith("/rank_changes_transfer.pdf")
    config["analyse"]["figures"] = [
        f for f in config["analyse"]["figures"] if not f.startswith("rank_changes")
    ]
    fewer = summary_plan.transfer(config)["comparisons"]
    assert fewer["imagenot"]["figure"] == "results/figures/rankings_st.pdf"
    assert fewer["fashion_mnist/tl-imagenot"]["figure"] == "results/figures/rankings_transfer.pdf"


def test_a_refused_interval_shows_its_reason_and_an_empty_row_is_left_out(tmp_path, rankings_file):
    """A bootstrap that refused the interval: the line says why, the verdict still stands on
    the p-value; a comparison without a Kendall tau-b is no empty line but a count with its
    reason."""

    def edit(data):
        boot = data["datasets"]["imagenot"]["bootstrap"]
        boot |= {"kendall_tau_ci": None, "refused": {"kendall_tau_ci": "every replicate tied"}}
        published = data["datasets"][PUBLISHED_DATASET]
        published |= {"kendall_tau": None, "kendall_p": None}
        data["not_computed"][f"{PUBLISHED_DATASET}: correlations"] = "planted: no common model"

    config = results_tree(tmp_path, broken=False)
    data = _plant_rankings(tmp_path, rankings_file, edit)
    summary = run_summary.collect(summary_plan.layout(config), tmp_path)
    t = summary["transfer"]
    assert PUBLISHED_DATASET not in [r["comparison"] for r in t["rows"]]
    assert t["left_out"] == [
        {"label": PUBLISHED_DATASET, "reason": f"{PUBLISHED_DATASET}: correlations: planted: "
         "no common model"}
    ]  # fmt: skip
    e = data["datasets"]["imagenot"]
    line = next(x for x in transfer.transfer_lines(summary) if ", imagenot vs" in x)
    assert f"{e['kendall_tau']:.2f} (no interval: every replicate tied), p=" in line
    text = run_summary.format_text(summary)
    assert "Left out, 1 comparison(s) without a Kendall tau-b: imagenet_published (" in text
    assert PUBLISHED_DATASET not in "".join(x for x in text.splitlines() if x.startswith("- "))


def test_the_transfer_verdict_follows_its_one_rule():
    assert transfer.verdict(0.8, 0.01) == "yes"
    assert transfer.verdict(-0.8, 0.01) == "no"
    assert transfer.verdict(0.8, 0.2) == "inconclusive"
    assert transfer.verdict(0.8, None) == "inconclusive"
    assert transfer.verdict(0.8, transfer.ALPHA) == "inconclusive"


def test_rankings_not_built_or_not_a_report(tmp_path, rankings_file):
    """Before the analysis the section says what is missing; a file that is not a rankings
    report is an error naming the file and the key."""
    config = results_tree(tmp_path, broken=False)
    summary = run_summary.collect(summary_plan.layout(config), tmp_path)
    assert summary["errors"] == 0 and not summary["transfer"]["built"]
    text = run_summary.format_text(summary)
    assert "Not built yet: results/analyse/rankings_standard.json" in text
    _plant_rankings(tmp_path, rankings_file, lambda d: d["datasets"]["imagenot"].pop("ranks"))
    summary = run_summary.collect(summary_plan.layout(config), tmp_path)
    assert summary["errors"] == 1 and not summary["transfer"]["built"]
    message = summary["problems"][0]["message"]
    assert "rankings_standard.json" in message and "ranks" in message


def test_the_rule_hands_the_rankings_by_role_and_the_landing_page_answers_first(
    tmp_path, rankings_file
):
    """``run-summary --rankings`` reads the file it is handed; the landing page lists one
    entry per comparison (its line, tau-b as the value) before the counts, and the report line
    of the written summary holds whether or not the report exists."""
    config = results_tree(tmp_path, broken=False)
    _plant_rankings(tmp_path, rankings_file, where="handed/rankings.json")
    settings = tmp_path / "layout.json"
    settings.write_text(json.dumps(summary_plan.layout(config)))
    done = _cli(tmp_path, "--settings", f"@{settings}", "--rankings", "handed/rankings.json",
                "--md", run_summary.SUMMARY_MD)  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / run_summary.SUMMARY_JSON).read_text())
    assert summary["transfer"]["source"] == "handed/rankings.json"
    lines = transfer.transfer_lines(summary)
    landing = run_summary.landing(tmp_path)
    keys = list(landing)
    assert keys[: len(lines)] == [
        f"Do rankings transfer? {x} (value: Kendall tau-b)" for x in lines
    ]
    assert landing[keys[0]] == round(summary["transfer"]["rows"][0]["kendall_tau"], 3)
    assert keys[len(lines) :] == ["errors (unusable results)", "warnings", "datasets built",
                                  "final runs"]  # fmt: skip
    md = (tmp_path / run_summary.SUMMARY_MD).read_text()
    assert md.rstrip().endswith("the end of each run says whether it exists and is current.")
    assert "writes it." not in md


def test_the_report_line_follows_the_report_and_the_summary(tmp_path):
    """At the end of a run: the report not written (the command that writes it), older than
    the summary it shows (stale, naming the summary), current (its path)."""
    import os

    (tmp_path / "results").mkdir()
    line = summary_plan.report_line(tmp_path, "snakemake --report results/report.html")
    assert line.startswith("Report: `snakemake --report results/report.html` writes it.")
    assert (
        "trusts .snakemake/metadata" in line
    )  # what the command trusts (imagenot.run.report_trust)
    report, summary = tmp_path / run_summary.REPORT, tmp_path / run_summary.SUMMARY_JSON
    report.write_text("<html></html>")
    summary.write_text("{}")
    os.utime(report, (1_000_000, 1_000_000))  # written before the summary
    line = summary_plan.report_line(tmp_path, "snakemake --report results/report.html")
    assert line.startswith(f"Report: {run_summary.REPORT} is STALE") and "summary.json" in line
    os.utime(report)
    line = summary_plan.report_line(tmp_path, "snakemake --report results/report.html")
    assert line == f"Report: {run_summary.REPORT}"


def test_the_summary_states_each_audits_line_or_that_it_is_not_built(tmp_path):
    layout = {"datasets": {}, "runs": [], "rankings": None}
    layout["audits"] = {"imagenot": "a/imagenot.json", "other": "a/other.json"}
    line = "3 of 40 imagenot test images have a near-duplicate in imagenet's test split"
    (tmp_path / "a").mkdir()
    (tmp_path / "a/imagenot.json").write_text(json.dumps({"sentence": line}))
    summary = run_summary.collect(layout, tmp_path)
    assert summary["audits"] == {"imagenot": line, "other": None}
    text = run_summary.format_text(summary)
    assert f"- {line}" in text and "- other: not built" in text
    (tmp_path / "a/other.json").write_text("{")  # being rewritten: a warning, not a crash
    summary = run_summary.collect(layout, tmp_path)
    assert summary["audits"]["other"] is None
    assert any("audit other" in p["message"] for p in summary["problems"])
