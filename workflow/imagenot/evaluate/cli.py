"""`imagenot` subcommands of the evaluate stage."""

from __future__ import annotations

import argparse

from imagenot.cli import subcommand
from imagenot.evaluate.files import RobustnessFiles
from imagenot.evaluate.settings import RobustnessSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands."""
    p = subcommand(
        subparsers,
        "evaluate-robustness",
        _evaluate_robustness,
        files=RobustnessFiles,
        settings=RobustnessSettings,
        description=(
            "Decode each test image once, apply every registered transformation (randomness seeded per "
            "image) on batched tensors and write robustness.parquet and per_image.parquet."
        ),
    )
    p.add_argument(
        "--gpu-job",
        action="store_true",
        help="the config plans this job for a GPU (resources.gpus > 0): stop without one",
    )
    p.add_argument(
        "--threads", type=int, required=True, help="CPU threads (the rule's, evaluate.threads)"
    )


def _evaluate_robustness(args: argparse.Namespace) -> None:
    """Evaluate a final checkpoint under every registered test-time transformation (the paper's
    17)."""
    import torch

    from imagenot.evaluate.metrics import robust_accuracy
    from imagenot.evaluate.robustness import evaluate_checkpoint
    from imagenot.io import keep_freed_memory
    from imagenot.settings import parse_or_exit

    torch.set_num_threads(max(1, args.threads))
    keep_freed_memory()  # a one-shot process: reuse freed tensor memory instead of page-faulting
    settings = parse_or_exit(RobustnessSettings, args.settings, "evaluate-robustness")
    table = evaluate_checkpoint(
        RobustnessFiles.from_args(args),
        settings,
        workers=max(0, args.threads - 1),
        gpu_job=args.gpu_job,
    )
    for row in table.to_pylist():
        print(f"{row['transform']:>16}: top-1 {row['top1']:6.2f}%  top-5 {row['top5']:6.2f}%")
    print(f"{'Robust':>16}: top-1 {robust_accuracy(table['top1'].to_pylist()):6.2f}%")
