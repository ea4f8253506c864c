"""The one list of optimizers and of learning-rate schedules (hyperparameters ``optimizer`` and
``scheduler``), importable without torch.

Entries are ``"module:function"`` strings, imported by the training loop when it builds the
optimizer (planning checks a search space's names here without importing torch):

- an optimizer: ``(parameter groups, hyperparameters) -> torch.optim.Optimizer``;
- a schedule: ``(steps after warm-up, steps per epoch, steps after warm-up in the whole budget,
  hyperparameters) -> factor of lr``.
"""

from __future__ import annotations

from imagenot.core.registries import Registry

_LOOP = "imagenot.train.schedules"

OPTIMIZERS: Registry = Registry(
    "optimizer", {"sgd": f"{_LOOP}:sgd_optimizer", "adam": f"{_LOOP}:adam_optimizer"}
)
SCHEDULERS: Registry = Registry(
    "scheduler",
    {
        "constant": f"{_LOOP}:constant_schedule",
        "cosine": f"{_LOOP}:cosine_schedule",
        "cosine_restarts": f"{_LOOP}:cosine_restarts_schedule",
        "step": f"{_LOOP}:step_schedule",
    },
)
