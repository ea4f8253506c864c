"""The handler of the evaluate stage's step (declared in :mod:`imagenot.core.steps`)."""

from __future__ import annotations

from imagenot.evaluate.files import RobustnessFiles
from imagenot.evaluate.settings import RobustnessSettings


def evaluate_robustness(
    files: RobustnessFiles, settings: RobustnessSettings, threads: int, gpu_job: bool
) -> None:
    """Evaluate a final checkpoint under every registered test-time transformation (the paper's
    17) on ``threads`` CPU threads; ``gpu_job``: stop without a GPU."""
    import torch

    from imagenot.core.io import keep_freed_memory
    from imagenot.evaluate.metrics import robust_accuracy
    from imagenot.evaluate.robustness import evaluate_checkpoint

    torch.set_num_threads(max(1, threads))
    keep_freed_memory()  # a one-shot process: reuse freed tensor memory instead of page-faulting
    table = evaluate_checkpoint(files, settings, workers=max(0, threads - 1), gpu_job=gpu_job)
    for row in table.to_pylist():
        print(f"{row['transform']:>16}: top-1 {row['top1']:6.2f}%  top-5 {row['top5']:6.2f}%")
    print(f"{'Robust':>16}: top-1 {robust_accuracy(table['top1'].to_pylist()):6.2f}%")
