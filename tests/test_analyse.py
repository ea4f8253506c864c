"""The rankings toolbox: statistics against scipy/statsmodels, bad input, small tables, CLI."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats as sps
from statsmodels.stats.proportion import proportion_confint

from imagenot.analyse import stats
from imagenot.analyse.checks import validate_table
from imagenot.analyse.rankings import rankings_report
from imagenot.analyse.settings import RankingsSettings
from imagenot.analyse.table import TableError, select_variant
from imagenot.cli import main


def report_json(df, settings, **options) -> dict:
    """The rankings report as its JSON file holds it (what these tests check)."""
    return rankings_report(df, settings, **options).to_json()


def random_table(rng, models=7, datasets=("ref", "a", "b"), seeds=(0,), n=10_000):
    """Accuracy = dataset-specific linear map of a latent quality plus noise, in percent."""
    quality = rng.uniform(40, 90, models)
    rows = []
    for j, d in enumerate(datasets):
        slope, shift = 1.0 - 0.2 * j, -10.0 * j
        for i in range(models):
            for s in seeds:
                acc = np.clip(shift + slope * quality[i] + rng.normal(0, 2), 1, 99)
                acc = round(acc / 100 * n) / n * 100  # a count of correct images out of n
                rows.append({"model": f"m{i}", "dataset": d, "accuracy": acc, "n": n, "seed": s})
    return pd.DataFrame(rows)


hand = RankingsSettings.hand_typed
"""The settings of ``imagenot rankings`` typed by hand, with the fields a test sets."""


def wide(df, dataset):
    return df[df.dataset == dataset].groupby("model", sort=False)["accuracy"].mean()


@pytest.mark.parametrize("trial", range(5))
def test_statistics_match_scipy_and_statsmodels(trial):
    rng = np.random.default_rng(trial)
    df = random_table(rng, models=stats.PERMUTATION_MAX_MODELS + 2)  # scipy's asymptotic p
    rep = report_json(validate_table(df), hand(reference="ref", baseline_model="m0", reps=0))
    ref, a = wide(df, "ref"), wide(df, "a")
    a = a.reindex(ref.index)
    got = rep["datasets"]["a"]
    tau = sps.kendalltau(a, ref)
    assert got["kendall_tau"] == pytest.approx(tau.statistic)
    assert got["kendall_p"] == pytest.approx(tau.pvalue)
    rho = sps.spearmanr(a, ref)
    assert got["spearman_rho"] == pytest.approx(rho.statistic)
    assert got["spearman_p"] == pytest.approx(rho.pvalue)
    assert got["pearson_r"] == pytest.approx(sps.pearsonr(a, ref).statistic)
    fit = sm.OLS(a.to_numpy(), sm.add_constant(ref.to_numpy())).fit()
    ci = fit.conf_int(0.05)
    assert got["ols"]["slope"] == pytest.approx(fit.params[1])
    assert got["ols"]["intercept"] == pytest.approx(fit.params[0])
    assert got["ols"]["adj_r2"] == pytest.approx(fit.rsquared_adj)
    assert got["ols"]["slope_ci"] == pytest.approx(list(ci[1]))
    assert got["ols"]["intercept_ci"] == pytest.approx(list(ci[0]))
    # ranks: 1 = best, ties averaged; delta rank = rank on the reference minus rank here
    expect_rank = sps.rankdata(-a.to_numpy(), method="average")
    assert [got["ranks"][m] for m in a.index] == pytest.approx(list(expect_rank))
    ref_rank = sps.rankdata(-ref.to_numpy())
    assert [got["delta_rank"][m] for m in a.index] == pytest.approx(list(ref_rank - expect_rank))
    assert got["relative_progress"]["m3"] == pytest.approx(a["m3"] / a["m0"])
    # Clopper-Pearson error bars from accuracy and n
    lo, hi = proportion_confint(round(a["m1"] / 100 * 10_000), 10_000, 0.05, method="beta")
    assert got["interval"]["m1"] == pytest.approx([100 * lo, 100 * hi])
    assert got["interval_kind"]["m1"] == "clopper_pearson"


def test_across_datasets_means_and_error_spearman():
    rng = np.random.default_rng(7)
    df = random_table(rng, datasets=("ref", "a", "b"))
    df["n"] = df["dataset"].map({"ref": 50_000, "a": 10_000, "b": 2_000})
    df["accuracy"] = np.round(df["accuracy"] / 100 * df["n"]) / df["n"] * 100  # counts of n
    rep = report_json(validate_table(df), hand(reference="ref", reps=0))
    mat = pd.DataFrame({d: wide(df, d) for d in ("ref", "a", "b")})
    w = np.array([50_000, 10_000, 2_000])
    wm = mat.to_numpy() @ w / w.sum()
    gm = sps.gmean(mat.to_numpy(), axis=1)
    across = rep["across_datasets"]
    assert [across["weighted_mean"][m] for m in mat.index] == pytest.approx(list(wm))
    assert [across["geometric_mean"][m] for m in mat.index] == pytest.approx(list(gm))
    assert [across["geometric_mean_rank"][m] for m in mat.index] == pytest.approx(
        list(sps.rankdata(-gm))
    )
    pairs = {(e["a"], e["b"]): e for e in rep["error_spearman"]}
    assert set(pairs) == {("ref", "a"), ("ref", "b"), ("a", "b")}
    res = sps.spearmanr(100 - mat["a"], 100 - mat["b"])
    assert pairs["a", "b"]["rho"] == pytest.approx(res.statistic)
    # seven models: the p-value of all 5,040 pairings (scipy's t approximation is not exact)
    exact = sps.permutation_test(
        (100 - mat["a"].to_numpy(),),
        lambda u: sps.spearmanr(u, 100 - mat["b"].to_numpy()).statistic,
        permutation_type="pairings",
        n_resamples=np.inf,
    )
    assert pairs["a", "b"]["p"] == pytest.approx(exact.pvalue, abs=1e-12)
    assert pairs["a", "b"]["p_method"] == "exact: all 5040 pairings"


def test_probit_and_logit_axes_fit_transformed_accuracies():
    rng = np.random.default_rng(3)
    df = random_table(rng)
    ref, a = wide(df, "ref"), wide(df, "a")
    for axis, f in (
        ("probit", lambda p: sps.norm.ppf(p / 100)),
        ("logit", lambda p: np.log(p / (100 - p))),
    ):
        rep = report_json(validate_table(df), hand(reference="ref", axis=axis, reps=0))
        fit = sm.OLS(f(a.to_numpy()), sm.add_constant(f(ref.to_numpy()))).fit()
        assert rep["datasets"]["a"]["ols"]["slope"] == pytest.approx(fit.params[1])
        assert rep["datasets"]["a"]["ols"]["axis"] == axis
    band = stats.ols_fit(ref.to_numpy(), a.to_numpy(), "logit", 0.95).band(np.array([50.0, 70.0]))
    assert all(np.all((b > 0) & (b < 100)) for b in band)
    assert np.all(band[1] <= band[0]) and np.all(band[0] <= band[2])


def test_seed_bootstrap_and_seed_error_bars():
    rng = np.random.default_rng(11)
    df = random_table(rng, seeds=(0, 1, 2))
    rep = report_json(validate_table(df), hand(reference="ref", reps=300, seed=5))
    a = rep["datasets"]["a"]
    boot = a["bootstrap"]
    assert boot["method"] == "seeds" and boot["reps"] == 300
    lo, hi = boot["kendall_tau_ci"]
    assert -1 <= lo <= hi <= 1
    assert boot["slope_ci"][0] <= a["ols"]["slope"] <= boot["slope_ci"][1]
    g = df[(df.dataset == "a") & (df.model == "m2")]["accuracy"]
    se = g.std(ddof=1) / np.sqrt(3)
    assert a["standard_error"]["m2"] == pytest.approx(se)
    assert a["interval"]["m2"] == pytest.approx([g.mean() - se, g.mean() + se])
    assert a["interval_kind"]["m2"] == "seed_se"
    again = report_json(validate_table(df), hand(reference="ref", reps=300, seed=5))
    assert again["datasets"]["a"]["bootstrap"] == boot


def test_image_bootstrap_from_per_image_results():
    rng = np.random.default_rng(2)
    rows, per = [], []
    for d, shift in (("ref", 0.0), ("a", -0.2)):
        keys = [f"{d}{i}" for i in range(400)]
        for i in range(5):
            correct = rng.uniform(size=400) < 0.3 + 0.12 * i + shift
            rows.append({"model": f"m{i}", "dataset": d, "accuracy": 100 * correct.mean()})
            per.append(
                pd.DataFrame({"model": f"m{i}", "dataset": d, "key": keys, "correct": correct})
            )
    rep = report_json(
        validate_table(pd.DataFrame(rows)),
        hand(reference="ref", reps=200),
        per_image=pd.concat(per),
    )
    boot = rep["datasets"]["a"]["bootstrap"]
    assert boot["method"] == "images"
    assert boot["slope_ci"][0] < rep["datasets"]["a"]["ols"]["slope"] < boot["slope_ci"][1]
    no_images = report_json(validate_table(pd.DataFrame(rows)), hand(reference="ref", reps=200))
    assert "bootstrap" not in no_images["datasets"]["a"]
    assert "nothing to resample" in no_images["not_computed"]["a: bootstrap"]


def test_tau_up_to_error_bars_counts_overlaps_as_ties():
    # models 0 and 1 overlap on a, all disjoint on the reference, order otherwise agrees
    lo_a, hi_a = np.array([80, 79, 60, 40.0]), np.array([85, 84, 65, 45.0])
    lo_r, hi_r = np.array([90, 70, 50, 30.0]), np.array([95, 75, 55, 35.0])
    got = stats.tau_up_to_error_bars(lo_a, hi_a, lo_r, hi_r)
    assert got == {
        "pairs": 6,
        "concordant": 5,
        "discordant": 0,
        "tied_in_dataset": 1,
        "tied_in_reference": 0,
        "tied_in_both": 0,
        "tau_b": pytest.approx(5 / np.sqrt(5 * 6)),
    }
    # with point intervals it is Kendall tau-b
    x = np.array([3.0, 1, 2, 5, 4])
    y = np.array([2.0, 1, 3, 5, 5])
    got = stats.tau_up_to_error_bars(x, x, y, y)["tau_b"]
    assert got == pytest.approx(sps.kendalltau(x, y).statistic)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda df: df.drop(columns="accuracy"), "lacks column(s) accuracy"),
        (lambda df: pd.concat([df, df.iloc[[2]]]), "model='m2', dataset='ref' (rows 2, 9)"),
        (lambda df: df.assign(accuracy=df.accuracy.where(df.index != 4, 101.0)), "row 4"),
        (lambda df: df.assign(accuracy=df.accuracy.where(df.index != 5, -1.0)), "0-100"),
        (
            lambda df: df.assign(accuracy=df.accuracy.astype(object).where(df.index != 1, "x")),
            "row 1",
        ),
    ],
)
def test_bad_tables_are_refused_naming_the_row(edit, message):
    rng = np.random.default_rng(0)
    df = random_table(rng, models=3).drop(columns="seed")
    with pytest.raises(TableError) as err:
        validate_table(edit(df))
    assert message in str(err.value)


def test_duplicate_names_both_rows():
    df = pd.DataFrame(
        {
            "model": ["a", "b", "a"],
            "dataset": ["x", "x", "x"],
            "seed": [0, 0, 0],
            "accuracy": [1, 2, 3],
        }
    )
    with pytest.raises(TableError, match=r"model='a', dataset='x', seed=0 \(rows 0, 2\)"):
        validate_table(df)
    validate_table(df.assign(seed=[0, 0, 1]))  # another seed is fine


def test_fewer_than_three_models_gives_what_exists():
    df = pd.DataFrame(
        {
            "model": ["a", "b", "a", "b"],
            "dataset": ["r", "r", "x", "x"],
            "accuracy": [70, 60, 40, 45],
        }
    )
    rep = report_json(validate_table(df), hand(reference="r", baseline_model="a", reps=100))
    x = rep["datasets"]["x"]
    assert x["ranks"] == {"a": 2.0, "b": 1.0}
    assert x["delta_rank"] == {"a": -1.0, "b": 1.0}  # b climbs from 2nd to 1st
    assert x["relative_progress"]["b"] == pytest.approx(45 / 40)
    assert "kendall_tau" not in x and "ols" not in x
    for stat in ("kendall_tau", "spearman_rho", "pearson_r", "ols", "bootstrap"):
        assert "at least 3 models" in rep["not_computed"][f"x: {stat}"]
    assert rep["across_datasets"]["geometric_mean"]["a"] == pytest.approx(np.sqrt(70 * 40))
    assert "weighted_mean" in rep["not_computed"]


def test_variants_of_the_accuracy_table():
    df = pd.DataFrame(
        {
            "model": ["a"] * 4,
            "dataset": ["x", "x", "y", "y"],
            "protocol": ["st", "st", "ft-x", "ft-x"],
            "seed": 0,
            "transform": ["Identity", "Invert", "Identity", "Invert"],
            "accuracy": [80.0, 40.0, 90.0, 70.0],
            "n": 100,
        }
    )
    std = select_variant(validate_table(df), "standard", "identity")
    assert dict(zip(std.dataset, std.accuracy, strict=True)) == {"x": 80.0, "y/ft-x": 90.0}
    rob = select_variant(validate_table(df), "robust", "identity")
    assert dict(zip(rob.dataset, rob.accuracy, strict=True)) == {"x": 60.0, "y/ft-x": 80.0}


def test_cli_json_and_refusal(tmp_path, capsys):
    rng = np.random.default_rng(4)
    path = tmp_path / "t.csv"
    random_table(rng, seeds=(0, 1)).to_csv(path, index=False)
    out = tmp_path / "r.json"
    argv = ["rankings", str(path), "--json", "--reference", "a", "--baseline", "m1"]
    assert main([*argv, "--bootstrap-reps", "50", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["reference"] == "a"
    assert set(printed["datasets"]) == {"ref", "a", "b"}
    assert printed["datasets"]["ref"]["bootstrap"]["method"] == "seeds"
    bad = tmp_path / "bad.csv"
    random_table(rng).assign(accuracy=lambda d: d.accuracy * 2).to_csv(bad, index=False)
    assert main(["rankings", str(bad), "--json"]) == 2
    assert "is not a percentage in 0-100" in capsys.readouterr().err
    assert main(["rankings", str(path), "--reference", "nope"]) == 2
    assert "reference dataset 'nope' is not in the table" in capsys.readouterr().err


def test_rule_settings_replace_the_flags_of_rankings(tmp_path, capsys, monkeypatch):
    """The workflow's rule passes its settings object as one JSON object: the same report as
    the flags by hand; a wrong key is one line naming it."""
    from imagenot.core.config import validate_config
    from imagenot.core.settings import to_json

    rng = np.random.default_rng(5)
    path = tmp_path / "t.csv"
    random_table(rng, seeds=(0, 1)).to_csv(path, index=False)
    config = validate_config(
        {
            "analyse": {
                "reference_dataset": "a",
                "baseline_model": "m1",
                "axis": "probit",
                "confidence": 0.9,
                "bootstrap": {"reps": 30, "seed": 3, "over": "models"},
            },
        }
    )
    # a standard-training run on "a": the reference is "a", not the published accuracies
    st_run = {"dataset": "a", "protocol": "st", "model": "m1", "seed": 0}
    monkeypatch.setattr("imagenot.train.plan.final_runs", lambda _config: [st_run])
    settings = json.loads(to_json(RankingsSettings.from_config(config, variant="standard")))
    assert settings["reference"] == "a"
    by_json = tmp_path / "json.json"
    assert (
        main(["rankings", str(path), "--settings", json.dumps(settings), "--out", str(by_json)])
        == 0
    )
    flags = ["--variant", "standard", "--reference", "a", "--baseline", "m1", "--axis", "probit"]
    flags += ["--confidence", "0.9", "--bootstrap-reps", "30", "--seed", "3"]
    flags += ["--bootstrap-over", "models", "--interval", hand().interval]
    by_flags = tmp_path / "flags.json"
    assert main(["rankings", str(path), *flags, "--out", str(by_flags)]) == 0
    assert json.loads(by_json.read_text()) == json.loads(by_flags.read_text())
    capsys.readouterr()
    assert (
        main(["rankings", str(path), "--settings", json.dumps({**settings, "bootstrap_reps": 3})])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert "bootstrap_reps" in err and len(err.splitlines()) == 1


def test_rankings_flags_default_to_the_settings_the_rule_builds_from_the_default_config(
    monkeypatch,
):
    """``imagenot rankings`` typed without flags analyses with the schema's defaults: the same
    RankingsSettings the rule builds from a config that sets nothing, but for the reference and
    baseline the rule always names (the hand-typed command takes the table's first dataset and
    no baseline); each flag replaces its field."""
    from imagenot.cli import build_parser
    from imagenot.core.config import validate_config
    from imagenot.figures.rankings_cli import _settings

    parser = build_parser()
    by_hand = _settings(parser.parse_args(["rankings", "t.csv"]))
    assert by_hand == hand()
    monkeypatch.setattr("imagenot.train.plan.final_runs", lambda _config: [])
    rule = RankingsSettings.from_config(validate_config({}), variant="standard")
    assert dataclasses.replace(rule, reference=None, baseline_model=None) == by_hand
    flags = ["--bootstrap-reps", "7", "--bootstrap-over", "models", "--baseline", "m1"]
    typed = _settings(parser.parse_args(["rankings", "t.csv", *flags]))
    assert typed == hand(reps=7, over="models", baseline_model="m1")
