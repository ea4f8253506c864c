"""The rankings toolbox on anyone's table: input refusals, the neighbouring papers' analyses
(against scipy/statsmodels), the compact summary, `imagenot ci`, and the report's figures and
tables for a table without workflow columns."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from PIL import Image
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from imagenot.analyse import stats
from imagenot.analyse.rankings import BOOTSTRAP_OVER, DELTA_RANK_SIGN, rankings_report
from imagenot.analyse.report import RankingsReport
from imagenot.analyse.settings import RankingsSettings
from imagenot.analyse.table import TableError, read_table, validate_table
from imagenot.cli import build_parser, main
from imagenot.figures import registry, report, tables
from imagenot.figures.rankings_cli import summary_text

SSL = "ssl_resnet50_imagenet_variants.csv"
NEW = "new_test_sets_excerpt.csv"


def random_table(rng, models=8, datasets=("ref", "a", "b", "c"), n=10_000, missing=0.0):
    """Accuracy = dataset-specific linear map of a latent quality plus noise, in percent."""
    quality = rng.uniform(40, 90, models)
    rows = []
    for j, d in enumerate(datasets):
        slope, shift = 1.0 - 0.08 * j, -5.0 * j
        for i in range(models):
            if j and rng.uniform() < missing:
                continue
            acc = float(np.clip(shift + slope * quality[i] + rng.normal(0, 3), 1, 99))
            rows.append({"model": f"m{i}", "dataset": d, "accuracy": acc, "n": n})
    return pd.DataFrame(rows)


COMMAND_ONLY = ("per_image", "min_reference_accuracy", "aggregate", "floors")
"""The options of ``rankings_report`` that are the command's, not settings fields."""


def typed_report_of(df, reference="ref", **kw) -> RankingsReport:
    """The report of ``df`` under the settings typed by hand, ``kw`` replacing fields."""
    options = {k: kw.pop(k) for k in COMMAND_ONLY if k in kw}
    settings = RankingsSettings.hand_typed(reference=reference, **kw)
    return rankings_report(validate_table(df), settings, **options)


def report_of(df, reference="ref", **kw) -> dict:
    """:func:`typed_report_of` as its JSON file holds it (what most tests here check)."""
    return typed_report_of(df, reference, **kw).to_json()


def cli(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


# ------------------------------------------------------------------------------ refusals


def test_fractions_are_refused_with_a_hint_unless_declared(tmp_path, capsys):
    rng = np.random.default_rng(0)
    df = random_table(rng)
    frac = df.assign(accuracy=df.accuracy / 100)
    with pytest.raises(TableError, match="pass --fractions"):
        validate_table(frac)
    path = tmp_path / "frac.csv"
    frac.to_csv(path, index=False)
    code, _, err = cli(["rankings", str(path)], capsys)
    assert code == 2 and "75.1, not 0.751" in err and len(err.strip().splitlines()) == 1
    as_pct = report_of(df, reps=0)
    as_frac = rankings_report(
        validate_table(frac, fractions=True), RankingsSettings.hand_typed(reference="ref", reps=0)
    ).to_json()
    assert as_frac["datasets"]["a"]["accuracy"] == pytest.approx(
        as_pct["datasets"]["a"]["accuracy"]
    )
    assert as_frac["datasets"]["a"]["interval"]["m1"] == pytest.approx(
        as_pct["datasets"]["a"]["interval"]["m1"]
    )
    with pytest.raises(TableError, match="not a fraction in 0-1"):
        validate_table(df, fractions=True)


def test_confidence_must_lie_between_0_and_1(tmp_path, capsys):
    rng = np.random.default_rng(1)
    with pytest.raises(TableError, match=r"did you mean 0\.95"):
        report_of(random_table(rng), confidence=95)
    path = tmp_path / "t.csv"
    random_table(rng).to_csv(path, index=False)
    with pytest.raises(SystemExit) as exit_:
        main(["rankings", str(path), "--confidence", "95"])
    assert exit_.value.code == 2
    assert "strictly between 0 and 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["ci", "--accuracy", "75", "--n", "100", "--confidence", "0"])


def test_unreadable_files_give_one_line_without_traceback(tmp_path, capsys):
    header = tmp_path / "header.csv"
    header.write_text("model,dataset,accuracy\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    wrong = tmp_path / "wrong.csv"
    wrong.write_text("name,score\na,1\n")
    for path, message in (
        (tmp_path / "missing.csv", "no such file"),
        (header, "header only, no data rows"),
        (empty, "the file is empty"),
        (wrong, "lacks column(s) model, dataset, accuracy"),
    ):
        code, _, err = cli(["rankings", str(path)], capsys)
        assert code == 2, path
        assert message in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
        assert str(path) in err


def test_sizes_differing_within_a_dataset_use_each_models_n(capsys):
    rng = np.random.default_rng(2)
    df = random_table(rng, datasets=("ref", "a", "b"))
    df.loc[(df.dataset == "a") & (df.model == "m3"), "n"] = 500
    rep = report_of(df, reps=0)
    assert any("a: test-set size n differs" in w for w in rep["warnings"])
    acc = rep["datasets"]["a"]["accuracy"]["m3"]
    lo, hi = proportion_confint(round(acc / 100 * 500), 500, 0.05, method="beta")
    assert rep["datasets"]["a"]["interval"]["m3"] == pytest.approx([100 * lo, 100 * hi])
    assert rep["datasets"]["a"]["n"]["m3"] == 500
    # the size-weighted mean weighs m3's accuracy on a by its own n
    wide = df.pivot(index="model", columns="dataset", values="accuracy")[["ref", "a", "b"]]
    w = df.pivot(index="model", columns="dataset", values="n")[["ref", "a", "b"]]
    wm = (wide * w).sum(axis=1) / w.sum(axis=1)
    assert rep["across_datasets"]["weighted_mean"]["m3"] == pytest.approx(wm["m3"])
    assert rep["across_datasets"]["weights"]["a"] == "per model"


def test_missing_models_and_near_duplicate_names_are_reported():
    rng = np.random.default_rng(3)
    df = random_table(rng, models=6)
    df = df[~((df.dataset == "b") & df.model.isin(["m1", "m4"]))]
    df.loc[(df.dataset == "c") & (df.model == "m2"), "model"] = "M 2"
    rep = report_of(df, reps=0)
    assert rep["datasets"]["b"]["missing_models"] == ["m1", "m4", "M 2"]
    assert rep["datasets"]["ref"]["missing_models"] == ["M 2"]
    assert any("m2, M 2" in w for w in rep["warnings"])
    assert any(w.startswith("b: 3 model(s) of the table missing") for w in rep["warnings"])
    assert rep["datasets"]["b"]["common_models"] == 4


def test_wide_tables_with_sizes_equal_their_long_form(tmp_path, shared_data):
    long = pd.read_csv(shared_data / SSL)
    wide = long.pivot(index="model", columns="dataset", values="accuracy")
    order = list(dict.fromkeys(long["dataset"]))
    wide = wide[order[::-1]].reset_index()  # a different column order: kept as given
    path = tmp_path / "wide.csv"
    wide.to_csv(path, index=False)
    sizes = long.drop_duplicates("dataset").set_index("dataset")["n"]
    argv = [f"{d}={int(n)}" for d, n in sizes.items()]
    from imagenot.analyse.table import parse_sizes

    got = read_table(path, "wide", parse_sizes(argv))
    assert list(dict.fromkeys(got["dataset"])) == order[::-1]
    a = report_of(got, "imagenet-val", reps=0)
    b = report_of(long, "imagenet-val", reps=0)
    assert list(a["datasets"]) == order[::-1]
    for d in order:
        for m, bounds in b["datasets"][d]["interval"].items():
            assert a["datasets"][d]["interval"][m] == pytest.approx(bounds)
        assert a["datasets"][d].get("kendall_tau") == b["datasets"][d].get("kendall_tau")
    with pytest.raises(TableError, match="--n names dataset"):
        read_table(path, "wide", {"imagenet-x": 10.0})
    with pytest.raises(TableError, match="expected DATASET=N"):
        parse_sizes(["imagenet-a"])


# ----------------------------------------------------------------------- small samples


def test_spearman_p_for_four_models_is_exact():
    df = pd.DataFrame(
        {
            "model": list("abcd") * 2,
            "dataset": ["r"] * 4 + ["x"] * 4,
            "accuracy": [80, 70, 60, 50, 40, 35, 30, 20.0],
        }
    )
    x = report_of(df, "r")["datasets"]["x"]
    assert x["spearman_rho"] == pytest.approx(1.0)
    assert x["spearman_p"] == pytest.approx(2 / 24)  # scipy's t approximation says 0.0
    assert x["kendall_p"] == x["pearson_p"] == pytest.approx(2 / 24)
    assert x["p_method"] == "exact: all 24 pairings"


@pytest.mark.parametrize("models", [5, 6])
def test_correlation_tests_equal_scipys_permutation_test(models):
    rng = np.random.default_rng(models)
    a = rng.normal(size=models)
    b = np.round(a + rng.normal(size=models), 1)
    b[1] = b[2]  # a tie in each vector
    a[3] = a[4]
    got = stats.correlation_tests(a, b, seed=3)
    for key, f in (
        ("spearman_p", lambda u: sps.spearmanr(u, b).statistic),
        ("kendall_p", lambda u: sps.kendalltau(u, b).statistic),
        ("pearson_p", lambda u: sps.pearsonr(u, b).statistic),
    ):
        ref = sps.permutation_test((a,), f, permutation_type="pairings", n_resamples=np.inf)
        assert got[key] == pytest.approx(ref.pvalue, abs=1e-12), key
    assert got["p_method"] == f"exact: all {math.factorial(models)} pairings"
    assert got["spearman_rho"] == pytest.approx(sps.spearmanr(a, b).statistic)
    assert got["kendall_tau"] == pytest.approx(sps.kendalltau(a, b).statistic)
    assert got["pearson_r"] == pytest.approx(sps.pearsonr(a, b).statistic)


@pytest.mark.parametrize("models", [12, stats.PERMUTATION_MAX_MODELS])
def test_correlation_tests_between_the_thresholds_draw_random_pairings(models):
    """Without ties, scipy's exact Kendall p-value is the permutation distribution's: the
    seeded random pairings land within their Monte Carlo error of it (sd <= 0.0036)."""
    rng = np.random.default_rng(models)
    a = rng.normal(size=models)
    b = a + rng.normal(0, 2.5, size=models)
    got = stats.correlation_tests(a, b, seed=1)
    assert got["p_method"] == f"permutation: {stats.PERMUTATIONS} random pairings, seed 1"
    exact = sps.kendalltau(a, b, method="exact").pvalue
    assert 0.01 < exact < 0.99  # a p-value with Monte Carlo error to speak of
    assert got["kendall_p"] == pytest.approx(exact, abs=0.015)
    assert got == stats.correlation_tests(a, b, seed=1)  # seeded


def test_correlation_tests_above_the_threshold_and_undefined():
    n = stats.PERMUTATION_MAX_MODELS + 1
    a = np.arange(n, dtype=float)
    b = a + np.random.default_rng(0).normal(0, 5, n)
    got = stats.correlation_tests(a, b, seed=0)
    assert got["p_method"] == "asymptotic (scipy)"
    assert got["spearman_p"] == pytest.approx(sps.spearmanr(a, b).pvalue)
    undefined = stats.correlation_tests(np.ones(5), np.arange(5.0), seed=0)
    assert undefined["p_method"].startswith("undefined")
    assert np.isnan(undefined["spearman_p"]) and np.isnan(undefined["kendall_tau"])


def brute_force_p(a, b, statistic):
    """Two-sided p over all pairings, as scipy defines it: 2 x the smaller tail, at most 1."""
    obs = statistic(a, b)
    null = np.array([statistic(np.array(p), b) for p in itertools.permutations(a)])
    tol = 1e-12 * max(1.0, abs(obs))
    return min(1.0, 2 * min(np.mean(null >= obs - tol), np.mean(null <= obs + tol)))


def test_every_p_value_of_every_section_is_exact_for_four_models(tmp_path, capsys):
    """Per dataset, subsets, aggregates, correlation averages and error correlations.

    Walks the whole ``imagenot rankings --json`` report: every dict holding a p-value names its
    method, and on four models every p-value is the enumerated one (perfectly agreeing ranks:
    2/24 = 0.083, where scipy's approximations say 0.0).
    """
    acc = {
        "ref": [80, 70, 60, 50],
        "same": [40, 35, 30, 20],  # the reference's order
        "swap": [62, 66, 50, 41],  # the first two swapped
        "reversed": [20, 30, 35, 50],
        "noisy": [71, 69, 70, 52],
    }
    df = pd.DataFrame(
        [
            {"model": m, "dataset": d, "accuracy": float(v), "n": 1000}
            for d, values in acc.items()
            for m, v in zip("abcd", values, strict=True)
        ]
    )
    path = tmp_path / "four.csv"
    df.to_csv(path, index=False)
    assert (
        main(
            [
                "rankings",
                str(path),
                "--json",
                "--bootstrap-reps",
                "0",
                "--min-reference-accuracy",
                "55",
                "--aggregate",
                "same",
                "swap",
                "reversed",
                "noisy",
            ]
        )
        == 0
    )
    rep = json.loads(capsys.readouterr().out)
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            ps = [k for k in node if k == "p" or k.endswith("_p")]
            if ps:
                found.append((where, node, ps))
            for k, v in node.items():
                walk(v, f"{where}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]")

    walk(rep, "report")
    sections = {where.split(".")[1].split("[")[0] for where, _, _ in found}
    assert sections == {"datasets", "across_datasets", "error_spearman"}, sections
    wide = pd.DataFrame(acc, index=list("abcd"))
    funcs = {
        "kendall_p": lambda u, v: sps.kendalltau(u, v).statistic,
        "spearman_p": lambda u, v: sps.spearmanr(u, v).statistic,
        "pearson_p": lambda u, v: sps.pearsonr(u, v).statistic,
        "p": lambda u, v: sps.spearmanr(u, v).statistic,
    }
    checked = 0
    for where, node, ps in found:
        assert node["p_method"] == "exact: all 24 pairings", where
        if where.startswith("report.datasets."):
            d = where.split(".")[2]
            u, v = wide[d], wide["ref"]
        elif ".with_mean_of_others." in where:
            d = where.split(".")[-1]
            others = [c for c in ("same", "swap", "reversed", "noisy") if c != d]
            u, v = wide[d], wide[others].mean(axis=1)
        else:
            u, v = 100 - wide[node["a"]], 100 - wide[node["b"]]
        for key in ps:
            expect = brute_force_p(u.to_numpy(), v.to_numpy(), funcs[key])
            assert node[key] == pytest.approx(expect, abs=1e-12), (where, key)
            assert node[key] >= 2 / 24, (where, key)  # never 0 with four models
            checked += 1
    # 4 compared datasets x 3, 4 aggregated datasets x 3, 10 dataset pairs
    assert checked == 4 * 3 + 4 * 3 + 10
    same = rep["datasets"]["same"]
    assert same["spearman_p"] == same["kendall_p"] == same["pearson_p"] == pytest.approx(2 / 24)
    assert "slope" in same["ols_subset"]  # the subset fit is computed (intervals, no p-value)


# ------------------------------------------------------------------------------ bootstrap


def test_bootstrap_interval_methods():
    rng = np.random.default_rng(4)
    v = rng.normal(0.0, 1.0, 20_000)
    pct = stats.bootstrap_interval(v, 0.0, 0.9, "percentile")["ci"]
    assert pct == pytest.approx(list(np.quantile(v, [0.05, 0.95])))
    basic = stats.bootstrap_interval(v, 0.3, 0.9, "basic")["ci"]
    assert basic == pytest.approx([0.6 - pct[1], 0.6 - pct[0]])
    # replicates centred on the estimate: BC equals the percentile interval
    bc = stats.bootstrap_interval(v, float(np.median(v)), 0.9, "bc")["ci"]
    assert bc == pytest.approx(pct, abs=0.02)
    # skewed replicates (tau near 1): the percentile interval excludes the estimate, says so
    skew = 1 - rng.exponential(0.05, 5000) - 0.04
    est = 0.99
    p = stats.bootstrap_interval(skew, est, 0.95, "percentile")
    assert not p["ci"][0] <= est <= p["ci"][1] and "outside" in p["note"]
    b = stats.bootstrap_interval(skew, est, 0.95, "bc")
    assert b["ci"][1] > p["ci"][1]  # shifted towards the estimate


def test_bootstrap_over_models_is_seeded_and_close_to_the_ols_interval():
    rng = np.random.default_rng(5)
    df = random_table(rng, models=60, datasets=("ref", "a"))
    rep = report_of(df, reps=400, seed=3, over="models")
    boot = rep["datasets"]["a"]["bootstrap"]
    assert boot["method"] == "models" and boot["interval"] == "bc"
    again = report_of(df, reps=400, seed=3, over="models")
    assert again["datasets"]["a"]["bootstrap"] == boot
    lo, hi = rep["datasets"]["a"]["ols"]["slope_ci"]
    blo, bhi = boot["slope_ci"]
    assert blo < rep["datasets"]["a"]["ols"]["slope"] < bhi
    assert 0.5 < (bhi - blo) / (hi - lo) < 2  # homoscedastic noise: similar widths
    assert (
        boot["kendall_tau_ci"][0] < rep["datasets"]["a"]["kendall_tau"] < boot["kendall_tau_ci"][1]
    )
    basic = report_of(df, reps=400, seed=3, over="models", interval="basic")
    assert basic["datasets"]["a"]["bootstrap"]["interval_name"] == "basic (reverse percentile)"
    with pytest.raises(ValueError, match="bootstrap over"):
        report_of(df, over="rows")


# ------------------------------------------------------------------------ other analyses


def test_fit_on_the_models_above_a_cut_matches_statsmodels():
    rng = np.random.default_rng(6)
    df = random_table(rng, models=30, datasets=("ref", "a"))
    rep = report_of(df, reps=0, min_reference_accuracy=70)
    wide = df.pivot(index="model", columns="dataset", values="accuracy")
    keep = wide[wide["ref"] >= 70]
    fit = sm.OLS(keep["a"].to_numpy(), sm.add_constant(keep["ref"].to_numpy())).fit()
    sub = rep["datasets"]["a"]["ols_subset"]
    assert sub["n"] == len(keep) and sub["min_reference_accuracy"] == 70
    assert sub["slope"] == pytest.approx(fit.params[1], rel=1e-12)
    assert sub["adj_r2"] == pytest.approx(fit.rsquared_adj, rel=1e-12)
    none = report_of(df, reps=0, min_reference_accuracy=99.5)
    assert "needs 3" in none["not_computed"]["a: ols_subset"]


def test_aggregate_means_ranks_and_rank_changes():
    rng = np.random.default_rng(7)
    df = random_table(rng, models=9)
    df["n"] = df["dataset"].map({"ref": 50_000, "a": 10_000, "b": 2_000, "c": 30_000})
    rep = report_of(df, reps=0, aggregate=["a", "c"])
    across = rep["across_datasets"]
    assert across["datasets"] == ["a", "c"]
    wide = df.pivot(index="model", columns="dataset", values="accuracy")
    wm = (wide["a"] * 10_000 + wide["c"] * 30_000) / 40_000
    gm = sps.gmean(wide[["a", "c"]].to_numpy(), axis=1)
    models = list(wide.index)
    assert [across["weighted_mean"][m] for m in models] == pytest.approx(list(wm))
    assert [across["geometric_mean"][m] for m in models] == pytest.approx(list(gm))
    ref_rank = dict(zip(models, sps.rankdata(-wide["ref"].to_numpy()), strict=True))
    agg_rank = dict(zip(models, sps.rankdata(-wm.to_numpy()), strict=True))
    for m in models:
        assert across["weighted_mean_rank"][m] == agg_rank[m]
        assert across["weighted_mean_delta_rank"][m] == ref_rank[m] - agg_rank[m]
    with pytest.raises(TableError, match="--aggregate names dataset"):
        report_of(df, aggregate=["a", "zzz"])


def test_geometric_mean_with_a_zero_floor_or_exclusion():
    rng = np.random.default_rng(8)
    df = random_table(rng, models=6)
    df.loc[(df.dataset == "b") & (df.model == "m2"), "accuracy"] = 0.0
    wide = df.pivot(index="model", columns="dataset", values="accuracy")[["ref", "a", "b", "c"]]
    rep = report_of(df, reps=0)
    gm = rep["across_datasets"]["geometric_mean"]
    assert "m2" not in gm and rep["across_datasets"]["geometric_mean_excluded"] == ["m2"]
    assert gm["m0"] == pytest.approx(sps.gmean(wide.loc["m0"]))
    floored = report_of(df, reps=0, floors={"b": 1.0})["across_datasets"]["geometric_mean"]
    assert floored["m2"] == pytest.approx(sps.gmean(wide.loc["m2"].clip(lower=1.0)))
    everywhere = report_of(df, reps=0, floors={"*": 50.0})["across_datasets"]["geometric_mean"]
    assert everywhere["m1"] == pytest.approx(sps.gmean(wide.loc["m1"].clip(lower=50.0)))
    with pytest.raises(TableError, match="--floor names"):
        report_of(df, floors={"q": 1.0})


def test_correlations_averaged_and_with_the_mean_of_the_others():
    rng = np.random.default_rng(9)
    df = random_table(rng, models=15)
    rep = report_of(df, reps=0)
    mc = rep["mean_correlation_with_reference"]
    assert mc["datasets"] == ["a", "b", "c"]
    for key in ("kendall_tau", "spearman_rho", "pearson_r"):
        assert mc[key] == pytest.approx(np.mean([rep["datasets"][d][key] for d in "abc"]))
    rho = np.array([rep["datasets"][d]["spearman_rho"] for d in "abc"])
    assert mc["spearman_rho_fisher"] == pytest.approx(np.tanh(np.arctanh(rho).mean()))
    wide = df.pivot(index="model", columns="dataset", values="accuracy")[["ref", "a", "b", "c"]]
    for d in wide.columns:
        rest = wide.drop(columns=d).mean(axis=1)
        got = rep["across_datasets"]["with_mean_of_others"][d]
        assert got["spearman_rho"] == pytest.approx(sps.spearmanr(wide[d], rest).statistic)
        assert got["kendall_tau"] == pytest.approx(sps.kendalltau(wide[d], rest).statistic)


def test_up_to_error_bars_equals_the_pairwise_definition():
    rng = np.random.default_rng(10)
    m = 300
    lo_a = rng.uniform(0, 90, m)
    hi_a = lo_a + rng.uniform(0, 5, m)
    lo_b = lo_a + rng.normal(0, 5, m)
    hi_b = lo_b + rng.uniform(0, 5, m)

    def order(li, hi_, lj, hj):
        return 1 if li > hj else -1 if lj > hi_ else 0

    conc = disc = ta = tb = tab = 0
    for i, j in itertools.combinations(range(m), 2):
        sa = order(lo_a[i], hi_a[i], lo_a[j], hi_a[j])
        sb = order(lo_b[i], hi_b[i], lo_b[j], hi_b[j])
        ta += sa == 0
        tb += sb == 0
        tab += sa == 0 and sb == 0
        conc += sa * sb > 0
        disc += sa * sb < 0
    got = stats.tau_up_to_error_bars(lo_a, hi_a, lo_b, hi_b)
    assert (got["concordant"], got["discordant"]) == (conc, disc)
    assert (got["tied_in_dataset"], got["tied_in_reference"], got["tied_in_both"]) == (ta, tb, tab)


# --------------------------------------------------------------------------------- output


def test_json_keeps_table_order_and_states_the_delta_rank_sign(tmp_path, capsys):
    rng = np.random.default_rng(11)
    df = random_table(rng, datasets=("zeta", "alpha", "mid"))
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    code, out, _ = cli(["rankings", str(path), "--json", "--bootstrap-reps", "0"], capsys)
    rep = json.loads(out)
    assert code == 0 and list(rep["datasets"]) == ["zeta", "alpha", "mid"]
    assert rep["reference"] == "zeta" and rep["delta_rank_sign"] == DELTA_RANK_SIGN
    help_text = build_parser()._subparsers._group_actions[0].choices["rankings"].format_help()
    assert "positive = the model climbs" in " ".join(help_text.split())


def test_summary_is_compact_for_many_models_and_complete_on_request():
    rng = np.random.default_rng(12)
    df = random_table(rng, models=400, datasets=("r", "a", "b", "c", "d", "e"), missing=0.01)
    rep = typed_report_of(df, "r", reps=0)
    short = summary_text(rep, None).splitlines()
    assert len(short) <= 40
    assert any(line.startswith("a: ") and "missing" in line for line in short)
    full = summary_text(rep, "all").splitlines()
    assert len(full) > 6 * 390
    best = next(line for line in summary_text(rep, "1").splitlines() if line.startswith("  best"))
    assert best.count(";") == 0


def test_ci_command_matches_statsmodels(capsys):
    code, out, _ = cli(["ci", "--accuracy", "75.1", "--n", "2000", "--json"], capsys)
    got = json.loads(out)
    k = round(0.751 * 2000)
    for key, method in (("clopper_pearson", "beta"), ("wilson", "wilson")):
        lo, hi = proportion_confint(k, 2000, 0.05, method=method)
        assert got[key] == pytest.approx([100 * lo, 100 * hi], rel=1e-12)
    code, _, err = cli(["ci", "--accuracy", "0.751", "--n", "0"], capsys)
    assert code == 2 and "n positive" in err


# --------------------------------------------------------------------------------- report


def test_report_draws_every_figure_and_table_for_a_plain_table(tmp_path, shared_data, capsys):
    argv = ["rankings", str(shared_data / SSL), "--reference", "imagenet-val", "--dpi", "50"]
    argv += [
        "--bootstrap-over",
        "models",
        "--bootstrap-reps",
        "50",
        "--min-reference-accuracy",
        "70",
    ]
    code, out, _ = cli([*argv, "--report", str(tmp_path / "r")], capsys)
    assert code == 0 and "imagenet-a" in out
    for name in registry.REPORT_FIGURES:
        assert (tmp_path / "r" / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
        with Image.open(tmp_path / "r" / f"{name}.png") as im:
            assert im.size[0] <= 6.75 * 50 + 2  # at most the text width
    ranks = pd.read_csv(tmp_path / "r" / "ranks.csv")
    assert len(ranks) == 12 and ranks["model"].iloc[0] == "DINO"
    assert ranks.set_index("model").loc["OBoW", "imagenet-a delta_rank"] == 6  # 7th -> 1st
    statistics = pd.read_csv(tmp_path / "r" / "statistics.csv")
    assert list(statistics["dataset"]) == [
        "imagenet-real",
        "imagenet-v2",
        "imagenet-r",
        "imagenet-sketch",
        "imagenet-a",
    ]
    assert statistics["models_subset"].notna().all()
    across = pd.read_csv(tmp_path / "r" / "across_datasets.csv")
    assert across["model"].iloc[0] == "MoCo"  # Ozbulak et al.: MoCo leads the weighted mean
    md = (tmp_path / "r" / "ranks.md").read_text().splitlines()
    assert sum(line.startswith("| ") for line in md) == 13


def test_report_handles_missing_models_and_a_lone_reference(tmp_path):
    rng = np.random.default_rng(13)
    df = random_table(rng, models=70, missing=0.2)
    files = report.write_report(typed_report_of(df, reps=0), tmp_path / "a", dpi=40)
    assert len(files) == 2 * (len(registry.REPORT_FIGURES) + len(registry.REPORT_TABLES))
    lone = df[df.dataset == "ref"]
    files = report.write_report(typed_report_of(lone, reps=0), tmp_path / "b", dpi=40)
    assert all((tmp_path / "b" / f).exists() for f in map(str, files))


def test_one_registry_of_names(repo_root):
    from imagenot.config import load_schema
    from imagenot.figures import plan
    from imagenot.registries import resolve

    props = load_schema("analyse.schema.yaml")["properties"]
    assert props["figures"]["items"]["enum"] == list(registry.WORKFLOW_FIGURES)
    assert props["tables"]["items"]["enum"] == list(registry.WORKFLOW_TABLES)
    assert list(plan.TABLE_NAMES) == list(registry.WORKFLOW_TABLES)
    assert all(callable(tables.builder(name)) for name in registry.WORKFLOW_TABLES)
    assert list(tables.BUILDERS) == list(registry.WORKFLOW_TABLES)  # a view of the registry
    assert tables.BUILDERS["fits"] is tables.fits
    # report figures and tables register as every figure does: "module:function", resolved
    for code in [*registry.REPORT_FIGURES.values(), *registry.REPORT_TABLES.values()]:
        function = resolve(code)
        assert callable(function) and function.__doc__.strip(), code
    boot = props["bootstrap"]["properties"]
    assert tuple(boot["over"]["enum"]) == BOOTSTRAP_OVER
    assert tuple(boot["interval"]["enum"]) == stats.INTERVALS
