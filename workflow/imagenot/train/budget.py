"""GPU time of a configured search, from epochs, images and a per-model throughput table.

Pure functions (no torch): an upper bound (no trial stops early), which is what a scheduler
must be ready for; early stopping makes real runs shorter. Used by imagenot plan (imagenot.plan.costs) for
docs/gpu.md.
"""

from __future__ import annotations

from imagenot.plan.schedule import speed
from imagenot.train import experiments, plan, search

# data-parallel jobs (train.gpus_per_job > 1): the share of linear speed-up kept per doubling
# of the GPUs (an assumption; imagenot.plan.schedule.speed)
DDP_EFFICIENCY = 0.9


def stage_epochs(space: dict, until: float = float("inf")) -> list[int]:
    """Epochs trained in each stage (rung to rung, the last to the end of training) when every
    trial stops at epoch ``until`` (0 for the stages after it: their slots are empty)."""
    ends = [*search.rungs(space), search.training_epochs(space)]
    return [max(0, min(b, until) - a) for a, b in zip([0, *ends], ends, strict=False)]


def trial_epochs(config: dict, dataset: str, protocol: str) -> int:
    """Epochs of all the search's training jobs of one model (slots x stage epochs)."""
    sp = experiments.space(config, dataset, protocol)
    counts = plan.slot_counts(config, dataset, protocol)
    return sum(n * e for n, e in zip(counts, stage_epochs(sp), strict=True))


def final_epochs(config: dict, dataset: str, protocol: str) -> int:
    """Epochs of the final runs of one model: every seed but the first (which reuses the
    selected trial's weights when it ran the full schedule)."""
    sp = experiments.space(config, dataset, protocol)
    return (len(sp["seeds"]) - 1) * search.training_epochs(sp)


def hours(
    epochs: float, images: float, throughput: float, gpus: int, efficiency=DDP_EFFICIENCY
) -> float:
    """Wall-clock hours of ``epochs`` over ``images`` at ``throughput`` images/s per GPU on
    ``gpus`` GPUs (data-parallel at ``efficiency``: :func:`imagenot.plan.schedule.speed`)."""
    return epochs * images / (throughput * speed(gpus, efficiency)) / 3600.0
