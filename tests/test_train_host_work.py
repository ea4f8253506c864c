"""The training loop's per-step host work (at 30,000 images/s a step is
8 ms, so what the host adds per step shows): what was cut keeps every result the same.
benchmarks/bench_train.py measures it (``step_overhead_ms``); benchmarks/gpu_check.py on a GPU."""

from __future__ import annotations

from imagenot.train.distributed import accumulates, no_sync_unless
from imagenot.train.search import stable_int, step_seeds


def test_step_seeds_are_stable_int_of_seed_step_and_rank():
    for seed, rank in ((0, 0), (7, 3), (123456789, 1)):
        of = step_seeds(seed, rank)
        for step in (0, 1, 9, 10, 99999, 10**9):
            assert of(step) == stable_int(seed, "step", step, rank)


def test_a_plain_module_takes_no_sync_context_per_micro_batch():
    import torch

    model = torch.nn.Linear(2, 2)
    assert not accumulates(model)
    assert no_sync_unless(model, False) is no_sync_unless(model, False)  # one shared empty context
