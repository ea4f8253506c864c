"""Learning-rate schedules and optimizers, registered by name in
``imagenot.train.optim_registry`` (the one list).

The learning rate is a pure function of the global optimizer step (``learning_rate``) rather
than the state of a scheduler object: a job resumed at any step, with any world size, sets
exactly the rate an uninterrupted run set there, and a checkpoint needs no scheduler state.
A schedule: (steps after warm-up, steps per epoch, steps after warm-up in the whole budget,
hp) -> factor of lr.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch

from imagenot.core.registries import resolve
from imagenot.train.optim_registry import OPTIMIZERS, SCHEDULERS


def _cosine(t: float, hp: Mapping) -> float:
    return hp["min_lr_factor"] + (1 - hp["min_lr_factor"]) * 0.5 * (1 + math.cos(math.pi * t))


def constant_schedule(t: int, spe: int, total: int, hp: Mapping) -> float:
    return 1.0


def cosine_schedule(t: int, spe: int, total: int, hp: Mapping) -> float:
    return _cosine(min(t / max(total, 1), 1.0), hp)


def cosine_restarts_schedule(t: int, spe: int, total: int, hp: Mapping) -> float:
    return _cosine((t % (hp["restart_epochs"] * spe)) / (hp["restart_epochs"] * spe), hp)


def step_schedule(t: int, spe: int, total: int, hp: Mapping) -> float:
    return hp["step_gamma"] ** (t // (hp["step_epochs"] * spe))


def schedule(name: str) -> Callable[[int, int, int, Mapping], float]:
    """The registered learning-rate schedule ``name``."""
    return resolve(SCHEDULERS.entry(name))


def learning_rate(step: int, steps_per_epoch: int, schedule_epochs: int, hp: Mapping) -> float:
    """Learning rate at optimizer step ``step``: linear warm-up from ``lr * warmup_decay``,
    then the named schedule over the rest of the ``schedule_epochs`` horizon (cosine stays at
    its floor after it)."""
    warmup = hp["warmup_steps"] + hp["warmup_epochs"] * steps_per_epoch
    if step < warmup:
        return hp["lr"] * (hp["warmup_decay"] + (1 - hp["warmup_decay"]) * step / warmup)
    total = schedule_epochs * steps_per_epoch - warmup
    return hp["lr"] * schedule(hp["scheduler"])(step - warmup, steps_per_epoch, total, hp)


def sgd_optimizer(params: list, hp: Mapping) -> torch.optim.Optimizer:
    return torch.optim.SGD(
        params, lr=hp["lr"], momentum=hp["momentum"], weight_decay=hp["weight_decay"]
    )


def adam_optimizer(params: list, hp: Mapping) -> torch.optim.Optimizer:
    return torch.optim.Adam(
        params, lr=hp["lr"], betas=(hp["momentum"], 0.999), weight_decay=hp["weight_decay"]
    )


def build_optimizer(params: list, hp: Mapping) -> torch.optim.Optimizer:
    """The registered optimizer ``hp["optimizer"]`` over ``params``."""
    return resolve(OPTIMIZERS.entry(hp["optimizer"]))(params, hp)
