"""GPU-hours of a config's training (upper bound: no early stopping) from the throughput table
``train.throughput``, per experiment and model, with 1 and N GPUs per job, and the longest
chain's wall-clock. Training images per epoch are given per dataset (the paper's by default).

    python benchmarks/gpu_hours.py [--config config/paper.yaml] [--gpus 4] [--markdown]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from imagenot.config import load_config
from imagenot.train import budget, plan

REPO = Path(__file__).resolve().parents[1]
# ImageNot: 1000 classes x 1000 images less 100 test and 50 validation per class (our split);
# CIFAR-10: 50,000 training images less 5,000 for validation.
PAPER_IMAGES = {"imagenot": 850_000, "imagenet": 1_231_167, "cifar10": 45_000}
# Every image of every split (TL computes features of train, val and test once; rules/train.smk
# train_features): ImageNot 1,000 x 1,000; CIFAR-10 50,000 + 10,000 test.
PAPER_FEATURE_IMAGES = {"imagenot": 1_000_000, "imagenet": 1_331_167, "cifar10": 60_000}


def table(
    config: dict, images: dict[str, int], gpus: int, feature_images: dict[str, int] | None = None
) -> list[dict]:
    """One row per trained experiment and model. A TL experiment's GPU work is the one
    features pass over every split (``feature_images``; its head fits run on CPUs), counted at
    the training throughput: an upper bound, a forward pass costing about a third of a
    training step."""
    rows = []
    throughput = config["train"]["throughput"]
    feature_images = feature_images or PAPER_FEATURE_IMAGES
    for exp in plan.experiments(config):
        if plan.is_published(exp):
            continue
        d, p = exp["dataset"], exp["protocol"]
        for model in config["train"]["models"]:
            epochs = budget.trial_epochs(config, d, p) + budget.final_epochs(config, d, p)
            rate, n = throughput[model], images[d]
            chain = budget.chain_epochs(config, d, p)
            if plan.is_tl(p):  # one pass over every split's images, before any head fit
                epochs, chain, n = 1, 1, feature_images[d]
            rows.append(
                {
                    "experiment": f"{d}/{p}",
                    "model": model,
                    "epochs": epochs,
                    "gpu_hours": round(budget.hours(epochs, n, rate, 1), 2),
                    f"gpu_hours_{gpus}gpu": round(gpus * budget.hours(epochs, n, rate, gpus), 2),
                    "chain_h": round(budget.hours(chain, n, rate, 1), 1),
                    f"chain_h_{gpus}gpu": round(budget.hours(chain, n, rate, gpus), 1),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", type=Path, default=REPO / "config" / "paper.yaml")
    parser.add_argument("--gpus", type=int, default=4, help="GPUs per job for the DDP columns")
    parser.add_argument("--images", type=json.loads, default=PAPER_IMAGES)
    parser.add_argument(
        "--feature-images",
        type=json.loads,
        default=PAPER_FEATURE_IMAGES,
        help="images of all splits per dataset (TL's features pass)",
    )
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    rows = table(load_config(args.config), args.images, args.gpus, args.feature_images)
    if not args.markdown:
        print(json.dumps(rows, indent=1))
        return
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in cols) + " |")
    by_exp: dict[str, list[float]] = {}
    for row in rows:
        by_exp.setdefault(row["experiment"], [0.0, 0.0])
        by_exp[row["experiment"]][0] += row["gpu_hours"]
        by_exp[row["experiment"]][1] += row[f"gpu_hours_{args.gpus}gpu"]
    print()
    for exp, (one, many) in by_exp.items():
        digits = 2 if one < 10 else 0  # a TL experiment's features pass is under an hour
        print(
            f"- {exp}: {one:,.{digits}f} GPU-hours ({many:,.{digits}f} with {args.gpus} GPUs "
            "per job)"
        )
    longest = max(rows, key=lambda r: r["chain_h"])
    print(
        f"- longest chain: {longest['experiment']} {longest['model']}, "
        f"{longest['chain_h']:,.0f} h on 1 GPU, {longest[f'chain_h_{args.gpus}gpu']:,.0f} h "
        f"on {args.gpus}"
    )


if __name__ == "__main__":
    main()
