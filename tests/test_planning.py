"""Paper-scale planning and pictures of the pipeline.

`snakemake -n` plans the whole study from config/paper.yaml pointed at placeholder inputs (every
shard, trial, seed, evaluation and figure; the same procedure as benchmarks/bench_dag.py, which
times it), and `--dag` / `--rulegraph` render through graphviz.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import load_benchmark

from imagenot.core.config import load_config
from imagenot.curate import plan as curate_plan
from imagenot.train import plan as train_plan

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "config" / "paper.yaml"


def _bench_dag():
    return load_benchmark("bench_dag")


@pytest.mark.slow
def test_paper_config_plans_every_shard_trial_seed_evaluation_and_figure():
    planned = _bench_dag().bench(PAPER, repeat=1, cores=1)["rules"]
    config = load_config(PAPER)
    finals = train_plan.final_runs(config)
    assert planned["curate_match"] == len(curate_plan.shard_ids(config))
    trained = [e for e in train_plan.experiments(config) if not train_plan.is_published(e)]
    slots = sum(
        sum(train_plan.slot_counts(config, e["dataset"], e["protocol"]))
        * len(config["train"]["models"])
        for e in trained
    )
    # one job per trained slot, none carries forward; TL slots fit heads over stored features
    assert planned["train_trial"] + planned["train_head_trial"] == slots
    tl = [e for e in trained if train_plan.is_tl(e["protocol"])]
    models = len(config["train"]["models"])
    assert planned["train_head_trial"] == models * sum(
        sum(train_plan.slot_counts(config, e["dataset"], e["protocol"])) for e in tl
    )
    # one features job (three split files) per (starting weights, dataset) of a TL experiment
    assert planned["train_features"] == len(tl) * models
    published = [r for r in finals if r["dataset"] == "imagenet" and r["protocol"] == "st"]
    assert planned["train_published"] == len(published) == len(config["train"]["models"])
    tl_finals = [r for r in finals if train_plan.is_tl(r["protocol"])]
    assert planned["train_head_final"] == len(tl_finals) > 0
    assert planned["train_final"] == len(finals) - len(published) - len(tl_finals)
    assert planned["evaluate_robustness"] == len(finals)
    assert len(finals) >= 7 * 3  # seven paper models, at least ST on three datasets
    for rule in ("results_table", "diagnostics_table", "diagnostics_figure"):
        assert planned.get(rule, 0) >= 1, rule
    # one job of the one figure rule per figure file the plan names
    from imagenot.figures import plan as figures_plan

    assert planned["figure"] == len(figures_plan.figure_names(config, finals)) >= 5


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{REPO / '.venv' / 'bin'}:{env.get('PATH', '')}"
    return env


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz 'dot' not installed")
@pytest.mark.parametrize("graph", ["--rulegraph", "--dag"])
def test_dag_and_rulegraph_render_through_graphviz(graph, tmp_path):
    dot = subprocess.run(
        [
            "snakemake",
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(REPO / "config" / "config.yaml"),
            graph,
        ],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dot.returncode == 0, dot.stderr[-3000:]
    assert dot.stdout.lstrip().startswith("digraph")
    svg = subprocess.run(
        ["dot", "-Tsvg"], input=dot.stdout, capture_output=True, text=True, timeout=300
    )
    assert svg.returncode == 0, svg.stderr
    assert "<svg" in svg.stdout and "curate_select" in svg.stdout
