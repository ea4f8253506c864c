"""End to end: the analyse and figures rules on a synthetic run, then `snakemake --report`.

A small workflow in tmp_path includes the real rules/common.smk, rules/analyse.smk and
rules/figures.smk; its evaluation results are synthetic (written before Snakemake starts, so
only the rankings, figure and table jobs run). The report must open in headless Chromium and show every figure and table.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from imagenot.analyse import plan as analyse_plan
from imagenot.analyse import synthetic
from imagenot.analyse.accuracy import (
    accuracy_table,
    read_per_image,
    read_published,
    read_robustness,
)
from imagenot.analyse.settings import AccuracySettings
from imagenot.config import load_config, validate_config
from imagenot.figures import plan

pytestmark = pytest.mark.slow


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    return None


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--directory", str(workdir), *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def workflow(tmp_path_factory, repo_root):
    """A workflow dir with synthetic evaluation results and the figure/table outputs built."""
    wd = tmp_path_factory.mktemp("wf")
    config = load_config(repo_root / "config" / "config.yaml")
    config["description"] = "synthetic report test"
    config["analyse"]["bootstrap"]["reps"] = 20
    config["analyse"].update(baseline_model="alexnet", imagenet_axis="published")
    config["analyse"]["figure_options"]["dpi"] = 60
    (wd / "config.yaml").write_text(yaml.safe_dump(config))
    (wd / "Snakefile").write_text(
        f'configfile: "config.yaml"\n\n\n'
        f'include: "{repo_root}/rules/common.smk"\n\n\n'
        "wildcard_constraints:\n"
        '    dataset="[a-z][a-z0-9_]*",\n\n\n'
        f'include: "{repo_root}/rules/analyse.smk"\n\n\n'
        f'include: "{repo_root}/rules/figures.smk"\n'
    )
    # The figure rules read their plotting code and the published accuracies from the package.
    published = analyse_plan.PUBLISHED_ACCURACY
    runs = synthetic.runs_grid(["imagenet", "imagenot"], synthetic.MODELS, (0,))
    runs += synthetic.runs_grid(
        [], synthetic.MODELS, (0,), downstream="fashion_mnist", sources=("imagenot",)
    )
    runs = [r for r in runs if not r["protocol"].startswith("ft")]
    paths = synthetic.robustness_results(
        wd / "sim", runs, transforms=synthetic.TRANSFORMS, n_images=100, seed=0
    )
    acc = accuracy_table(
        read_robustness(paths),
        read_published(published),
        AccuracySettings.from_config(validate_config({})),
    )
    (wd / analyse_plan.ACCURACY).parent.mkdir(parents=True)
    acc.to_csv(wd / analyse_plan.ACCURACY, index=False)
    read_per_image(paths, per_image_beside(paths)).to_parquet(wd / analyse_plan.PER_IMAGE)
    targets = [t for t in plan.outputs(config, runs) if t != analyse_plan.ACCURACY]
    done = snakemake(wd, *targets)
    assert done.returncode == 0, done.stderr[-4000:]
    return {"dir": wd, "config": config, "runs": runs, "targets": targets, "log": done.stderr}


def test_every_target_is_built_by_its_own_job(workflow):
    wd = workflow["dir"]
    for target in workflow["targets"]:
        assert (wd / target).stat().st_size > 0, target
    assert "accuracy_table" not in workflow["log"]  # the synthetic accuracy.csv was used
    for name in ("rankings_st", "rankings_transfer", "relative_progress"):
        assert (wd / "results" / "logs" / "figure" / f"{name}.log").exists()
    dry = snakemake(wd, "-n", *workflow["targets"], "--quiet", "rules")
    assert dry.returncode == 0, dry.stderr
    assert "Nothing to be done" in dry.stdout + dry.stderr


def visible_text(dom: str) -> str:
    """Text a reader sees: the body without scripts and tags."""
    body = dom[dom.find("<body") :]
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", body, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))


def test_report_renders_in_headless_chromium(workflow, tmp_path):
    wd = workflow["dir"]
    report = wd / "results" / "report.html"
    done = snakemake(wd, "--report", "results/report.html", *workflow["targets"])
    assert done.returncode == 0, done.stderr[-4000:]
    html = report.read_text(errors="replace")
    for name in (
        "rankings_st.png",
        "relative_progress.png",
        "agreement.csv",
        "rankings_robust.json",
    ):
        assert name in html
    assert "synthetic report test" in html  # captions name the config
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium on PATH (Debian package 'chromium'): render check skipped")
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=15000",
            "--dump-dom",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    # the page's script ran and drew the navigation with the report's result categories
    text = visible_text(dom.stdout)
    for category in ("Results", "Figures", "Tables", "Analysis"):
        assert category in text, text[:2000]


def per_image_beside(robustness_paths):
    """The per-image results the synthetic evaluation writes beside each robustness file."""
    from pathlib import Path

    from imagenot.evaluate.paths import PER_IMAGE

    return [Path(p).with_name(Path(PER_IMAGE).name) for p in robustness_paths]
