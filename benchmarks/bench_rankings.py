"""Rankings toolbox timings: a table of 1,500 models on 6 datasets (the size of the public
ImageNet-variant result collections), through the whole `imagenot rankings` command: reading,
statistics (1,000 bootstrap replicates over models), the text summary, the JSON, and every
``--report`` figure and table.

    taskset -c 0 python benchmarks/bench_rankings.py --json

Timings are wall-clock seconds on one core; the table is synthetic and seeded.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import tempfile
import time
from pathlib import Path

import pandas as pd


def table(models: int, datasets: int) -> pd.DataFrame:
    """timm-style names, accuracies that are counts of correct images of each test set
    (imagenot.analyse.synthetic.results_table), six test sets at most."""
    from imagenot.analyse import synthetic

    names = ("imagenet-val", "imagenet-real", "imagenet-v2", "imagenet-r", "imagenet-sketch",
             "imagenet-a")  # fmt: skip
    sizes = (50_000, 50_000, 10_000, 30_000, 50_000, 7_500)
    return synthetic.results_table(models, names[:datasets], sizes=sizes[:datasets], seed=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=1500)
    parser.add_argument("--datasets", type=int, default=6)
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import dataclasses

    from imagenot.analyse.checks import validate_table
    from imagenot.analyse.rankings import rankings_report
    from imagenot.analyse.settings import RankingsSettings
    from imagenot.analyse.table import read_table
    from imagenot.cli import main as imagenot
    from imagenot.figures.report import write_report
    from imagenot.figures.settings import Style

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "table.csv"
        table(args.models, args.datasets).to_csv(path, index=False)
        argv = ["rankings", str(path), "--bootstrap-over", "models"]
        argv += ["--bootstrap-reps", str(args.reps), "--out", f"{tmp}/r.json"]
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()) as out:
            assert imagenot([*argv, "--report", f"{tmp}/report", "--dpi", "150"]) == 0
        command = time.perf_counter() - t0
        summary_lines = len(out.getvalue().splitlines())
        json_mb = Path(f"{tmp}/r.json").stat().st_size / 1e6

        df = validate_table(read_table(path))
        t0 = time.perf_counter()
        rep = rankings_report(df, RankingsSettings.hand_typed(over="models", reps=args.reps))
        statistics = time.perf_counter() - t0
        t0 = time.perf_counter()
        rankings_report(df, RankingsSettings.hand_typed(reps=0))
        no_bootstrap = time.perf_counter() - t0
        t0 = time.perf_counter()
        write_report(rep, f"{tmp}/again", dataclasses.replace(Style.schema_defaults(), dpi=150))
        figures = time.perf_counter() - t0

    result = {
        "models": args.models,
        "datasets": args.datasets,
        "bootstrap_reps": args.reps,
        "command_with_report_s": round(command, 2),
        "statistics_s": round(statistics, 2),
        "statistics_without_bootstrap_s": round(no_bootstrap, 2),
        "figures_and_tables_s": round(figures, 2),
        "summary_lines": summary_lines,
        "json_mb": round(json_mb, 2),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
