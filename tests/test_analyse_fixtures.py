"""Published tables of neighbouring papers through `imagenot rankings` (resources/published/)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from imagenot.analyse import stats
from imagenot.cli import main

SSL = "ssl_resnet50_imagenet_variants.csv"
NEW = "new_test_sets_excerpt.csv"


def run_json(argv, capsys) -> dict:
    assert main(["rankings", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_ssl_benchmark_lottery_ranks_and_means(published_tables, capsys):
    """Ozbulak et al.: 12 self-supervised ResNet-50s on six ImageNet test sets."""
    df = pd.read_csv(published_tables / SSL)
    rep = run_json(
        [str(published_tables / SSL), "--reference", "imagenet-val", "--bootstrap-reps", "0"],
        capsys,
    )
    assert set(rep["datasets"]) == set(df["dataset"])
    for dataset, g in df.groupby("dataset"):
        ranks = rep["datasets"][dataset]["ranks"]
        assert len(ranks) == 12
        acc = dict(zip(g["model"], g["accuracy"], strict=True))
        # consistent with the printed table: a higher accuracy is a better rank, equal
        # printed accuracies share the average of their places
        for a in acc:
            for b in acc:
                if acc[a] > acc[b]:
                    assert ranks[a] < ranks[b], (dataset, a, b)
                elif acc[a] == acc[b]:
                    assert ranks[a] == ranks[b]
        assert sorted(ranks.values()) == pytest.approx(sorted(sps.rankdata(-g["accuracy"])))
    val = rep["datasets"]["imagenet-val"]["ranks"]
    assert val["DINO"] == 1 and val["SeLa"] == 12
    assert rep["datasets"]["imagenet-a"]["ranks"]["OBoW"] == 1  # OBoW leads on ImageNet-A
    assert rep["datasets"]["imagenet-r"]["ranks"]["MoCo"] == 1  # MoCo leads on ImageNet-R
    # size-weighted and geometric means across the six test sets
    wide = df.pivot(index="model", columns="dataset", values="accuracy")
    n = df.drop_duplicates("dataset").set_index("dataset")["n"].reindex(wide.columns)
    wm = wide.to_numpy() @ n.to_numpy() / n.sum()
    gm = np.exp(np.log(wide.to_numpy()).mean(axis=1))
    across = rep["across_datasets"]
    for i, m in enumerate(wide.index):
        assert across["weighted_mean"][m] == pytest.approx(wm[i])
        assert across["geometric_mean"][m] == pytest.approx(gm[i])
    assert across["weighted_mean_rank"]["MoCo"] == 1
    # the lottery: ranks on ImageNet-val carry over to ImageNet-ReaL, much less to ImageNet-A
    assert rep["datasets"]["imagenet-real"]["kendall_tau"] > 0.8
    assert (
        rep["datasets"]["imagenet-a"]["kendall_tau"] < rep["datasets"]["imagenet-v2"]["kendall_tau"]
    )
    pearson = sps.pearsonr(wide["imagenet-v2"], wide["imagenet-val"]).statistic
    assert rep["datasets"]["imagenet-v2"]["pearson_r"] == pytest.approx(pearson)


RECHT_N = [
    "--n",
    "imagenet-original=50000",
    "imagenet-new=10000",
    "cifar10-original=10000",
    "cifar10-new=2000",
]
"""Test-set sizes of Recht et al.'s Table 1 (resources/README.md)."""


@pytest.mark.parametrize("benchmark", ["imagenet", "cifar10"])
def test_new_test_sets_clopper_pearson_intervals(published_tables, benchmark):
    """Recht et al.: the printed 95% intervals follow from the (rounded) accuracy and n."""
    ex = pd.read_csv(published_tables / NEW)
    ex = ex[ex["benchmark"] == benchmark]
    n_orig, n_new = {"imagenet": (50_000, 10_000), "cifar10": (10_000, 2_000)}[benchmark]
    for which, n in (("original", n_orig), ("new", n_new)):
        acc = ex[f"{which}_accuracy"].to_numpy()
        # the true accuracy lies within +-0.05 of the printed one; the interval bounds move with it
        lo_min, _ = stats.clopper_pearson(acc - 0.05, np.full(len(acc), n), 0.95)
        lo_max, _ = stats.clopper_pearson(acc + 0.05, np.full(len(acc), n), 0.95)
        _, hi_min = stats.clopper_pearson(acc - 0.05, np.full(len(acc), n), 0.95)
        _, hi_max = stats.clopper_pearson(acc + 0.05, np.full(len(acc), n), 0.95)
        printed_lo = ex[f"{which}_ci_low"].to_numpy()
        printed_hi = ex[f"{which}_ci_high"].to_numpy()
        assert np.all(printed_lo >= lo_min - 0.051) and np.all(printed_lo <= lo_max + 0.051)
        assert np.all(printed_hi >= hi_min - 0.051) and np.all(printed_hi <= hi_max + 0.051)


def test_new_test_sets_ranks_barely_change(published_tables, tmp_path, capsys):
    """Recht et al.: accuracy drops on the new ImageNet test set, the order barely changes."""
    ex = pd.read_csv(published_tables / NEW)
    table = [str(published_tables / NEW), "--format", "wide", *RECHT_N]  # as published
    rep = run_json([*table, "--reference", "imagenet-original", "--bootstrap-reps", "0"], capsys)
    new = rep["datasets"]["imagenet-new"]
    assert len(new["delta_rank"]) == 8
    assert max(abs(v) for v in new["delta_rank"].values()) <= 1
    assert new["kendall_tau"] > 0.9
    assert new["ols"]["slope"] > 0 and new["ols"]["adj_r2"] > 0.99
    # the intervals drawn as error bars are the printed ones (Clopper-Pearson from accuracy
    # and n where a table prints none: test_new_test_sets_as_a_wide_table)
    assert set(new["interval_kind"].values()) == {"given"}
    printed = ex[ex.benchmark == "imagenet"].set_index("model")
    for m, (lo, hi) in new["interval"].items():
        assert (lo, hi) == (printed.loc[m, "new_ci_low"], printed.loc[m, "new_ci_high"])
    # up to error bars the two PNASNet/NASNet models tie on the new test set
    up = new["rank_agreement_up_to_error_bars"]
    assert up["tied_in_dataset"] >= 1 and up["discordant"] == 0


@pytest.mark.parametrize("benchmark", ["imagenet", "cifar10"])
def test_new_test_sets_as_a_wide_table(published_tables, tmp_path, capsys, benchmark):
    """Recht et al.'s table as printed (one column per test set) with --format wide --n."""
    ex = pd.read_csv(published_tables / NEW)
    ex = ex[ex["benchmark"] == benchmark]
    wide = ex[["model", "original_accuracy", "new_accuracy"]].rename(
        columns={"original_accuracy": "original", "new_accuracy": "new"}
    )
    path = tmp_path / "wide.csv"
    wide.to_csv(path, index=False)
    n_orig, n_new = {"imagenet": (50_000, 10_000), "cifar10": (10_000, 2_000)}[benchmark]
    sizes = ["--n", f"original={n_orig}", f"new={n_new}", "--format", "wide"]
    rep = run_json([str(path), *sizes, "--bootstrap-reps", "0"], capsys)
    assert list(rep["datasets"]) == ["original", "new"] and rep["reference"] == "original"
    new = rep["datasets"]["new"]
    printed = ex.set_index("model")
    for m, (lo, hi) in new["interval"].items():
        assert lo == pytest.approx(printed.loc[m, "new_ci_low"], abs=0.16)
        assert hi == pytest.approx(printed.loc[m, "new_ci_high"], abs=0.16)
    # few models: exact permutation p-values (7 or 8 models: all orderings enumerated)
    assert new["p_method"].startswith("exact")
    assert new["spearman_p"] >= 2 / math.factorial(len(ex))
    # the new test sets keep the order: no model moves by more than one place
    assert max(abs(v) for v in new["delta_rank"].values()) <= 1


def test_workflow_figures_point_plain_tables_to_the_toolbox(
    published_tables, repo_root, tmp_path, capsys
):
    from imagenot.core.config import load_config
    from imagenot.core.settings import to_json
    from imagenot.figures.settings import FigureSettings

    config = load_config(repo_root / "config" / "config.yaml")
    settings = to_json(FigureSettings.from_config(config, figure="rankings_st"))
    out = ["--pdf", str(tmp_path / "f.pdf"), "--png", str(tmp_path / "f.png")]
    assert main(["figure", "--settings", settings, str(published_tables / SSL), *out]) == 2
    err = capsys.readouterr().err
    assert "imagenot rankings TABLE --report DIR" in err and len(err.strip().splitlines()) == 1
