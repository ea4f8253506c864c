"""Pre-registered search: trials drawn from a seeded space, successive-halving rungs, selection.

Pure functions of plain data; the trials table is written by the CLI. A space maps each
whitelisted hyperparameter to one of ``{value: x}``, ``{choice: [...]}`` (drawn with
replacement), ``{grid: [...]}`` (every value exactly once; several grids give their product, in
the fixed order of ``HYPERPARAMETERS``, and the budget must equal the product's size),
``{uniform: [lo, hi]}`` or ``{log_uniform: [lo, hi]}``; hyperparameters it omits keep the fixed
defaults below. The same trials are drawn for every model of a (dataset, protocol): one space,
one draw, shared by all models.

``grid`` exists because the paper's ImageNot space ("lr one of 5e-1, 1e-1, 1e-2, 1e-4", budget
4) is a grid: drawing four times with replacement from four values repeats some and misses
others.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from imagenot.core.config import schema_node
from imagenot.core.registries import Registry
from imagenot.train.optim_registry import OPTIMIZERS, SCHEDULERS

# The whitelist (docs/method.md section 5): lr, scheduler settings, weight decay, and the optimizer,
# momentum and warm-up the paper's CIFAR-10 space adds. Nothing else may vary. Each one's default
# (the value a space that does not name it runs with) is the schema's, read from it: the order
# of the schema's keys is the draw order (test_train_search checks it is the one pre-registered).
DEFAULTS: dict[str, object] = {
    name: node["default"]["value"]
    for name, node in schema_node("train.spaces.{space}.hyperparameters")["properties"].items()
}
HYPERPARAMETERS = tuple(DEFAULTS)
INTEGER_HYPERPARAMETERS = {"warmup_steps", "warmup_epochs", "restart_epochs", "step_epochs"}
# Named hyperparameters and the registry of their allowed values (imagenot.train.optim_registry,
# importable without torch, so that planning checks them cheaply).
NAMED_HYPERPARAMETERS: dict[str, Registry] = {"optimizer": OPTIMIZERS, "scheduler": SCHEDULERS}


class SearchError(ValueError):
    """A space outside the whitelist or otherwise unusable."""


def stable_int(*parts: object) -> int:
    """A 32-bit integer derived from ``parts`` (stable across processes and machines)."""
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()
    return int(digest[:8], 16)


def step_seeds(seed: int, rank: int) -> Callable[[int], int]:
    """``step -> stable_int(seed, "step", step, rank)``, the seed of a training step's random
    draws (dropout, stochastic depth), without building the JSON list per step: the prefix is
    formatted once (``stable_int`` hashes ``json.dumps`` of the parts' ``str``; an int's needs
    no escaping), so a step costs one sha256 of ~30 bytes (tests/test_train_host_work.py checks the two
    agree)."""
    head, tail = f'["{int(seed)}", "step", "'.encode(), f'", "{int(rank)}"]'.encode()

    def of(step: int) -> int:
        return int.from_bytes(hashlib.sha256(head + str(step).encode() + tail).digest()[:4])

    return of


def canonical_hash(obj: object) -> str:
    """sha256 of ``obj`` as sorted-key JSON (the preregistration's identity of a space)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def check_space(hyperparameters: Mapping[str, Mapping], where: str) -> None:
    """Raise naming ``where`` if a range's bounds are out of order or a named hyperparameter's
    value is not registered: what the schema cannot say (it refuses a name off the whitelist,
    a spec that is not exactly one of value, choice, grid, uniform, log_uniform, and a value
    outside the hyperparameter's domain, ``x-values``)."""
    for name, spec in hyperparameters.items():
        kind, arg = next(iter(spec.items()))
        if kind in ("uniform", "log_uniform") and not arg[0] <= arg[1]:
            raise SearchError(f"{where}.{name}: {kind} needs [low, high] with low <= high")
        registry = NAMED_HYPERPARAMETERS.get(name)
        values = [arg] if kind == "value" else arg if kind in ("choice", "grid") else None
        if registry is not None and (values is None or any(v not in registry for v in values)):
            raise SearchError(
                f"{where}.{name}: {kind} {arg!r} is not allowed; give value or choice of "
                f"{', '.join(sorted(registry))}"
            )


def grid_points(hyperparameters: Mapping[str, Mapping]) -> list[dict]:
    """Every point of the space's grids (their product, in ``HYPERPARAMETERS`` order); [{}]
    when the space has no grid."""
    names = [n for n in HYPERPARAMETERS if "grid" in hyperparameters.get(n, {})]
    values = [hyperparameters[n]["grid"] for n in names]
    return [dict(zip(names, point, strict=True)) for point in itertools.product(*values)]


def check_budget(space: Mapping, where: str) -> None:
    """Raise naming ``{where}.budget`` when a space with grids has a budget other than the
    number of grid points (each point is run exactly once)."""
    hps = space["hyperparameters"]
    points = grid_points(hps)
    n = len(points)
    if points[0] and space["budget"] != n:  # the first point names every grid, in order
        sizes = " x ".join(f"{name} ({len(hps[name]['grid'])})" for name in points[0])
        raise SearchError(
            f"{where}.budget: {space['budget']} trials, but the grid {sizes} has {n} points; "
            f"set budget: {n} (each grid point is run once)"
        )


def _draw(rng: np.random.Generator, name: str, spec: Mapping) -> object:
    kind, arg = next(iter(spec.items()))
    if kind == "value":
        return arg
    if kind == "choice":
        return arg[int(rng.integers(len(arg)))]
    low, high = float(arg[0]), float(arg[1])
    value = (
        float(np.exp(rng.uniform(np.log(low), np.log(high))))
        if kind == "log_uniform"
        else float(rng.uniform(low, high))
    )
    return round(value) if name in INTEGER_HYPERPARAMETERS else value


def draw_trials(space: Mapping, seed: int, dataset: str, protocol: str) -> list[dict]:
    """The ``space['budget']`` trials of a (dataset, protocol): hyperparameters and a seed each.

    Deterministic in (seed, dataset, protocol, space); independent of the model.
    """
    where = f"space of {dataset}/{protocol}"
    check_space(space["hyperparameters"], where)
    check_budget(space, where)
    rng = np.random.default_rng([seed, stable_int(dataset), stable_int(protocol)])
    points = grid_points(space["hyperparameters"])
    trials = []
    for trial in range(space["budget"]):
        row: dict = {"trial": trial}
        for name in HYPERPARAMETERS:  # fixed order: the draw does not depend on YAML order
            spec = space["hyperparameters"][name]  # validated: the schema fills every one
            # grid values need no random number: the other draws stay as without the grid
            row[name] = points[trial][name] if "grid" in spec else _draw(rng, name, spec)
        row["seed"] = stable_int(seed, dataset, protocol, "trial", trial)
        trials.append(row)
    return trials


def _milestones(space: Mapping, below: int) -> list[int]:
    halving = space["halving"]
    if not halving["enabled"]:
        return []
    out, epochs = [], halving["min_epochs"]
    while epochs < below:
        out.append(epochs)
        epochs *= halving["eta"]
    return out


def schedule_epochs(space: Mapping) -> int:
    """The learning-rate schedule's horizon in epochs (where cosine reaches its floor).

    ``space['schedule_epochs']`` when set; otherwise the expected training length: with halving,
    the rung after which a single trial is left (the search is decided there), else
    ``max_epochs``. Never ``max_epochs`` by default under halving: the paper's 1000-epoch budget
    is a cap for early stopping, and a cosine over it keeps the rate almost constant for any run
    that stops early.
    """
    if space["schedule_epochs"] is not None:
        return int(space["schedule_epochs"])
    alive = space["budget"]
    for epochs in _milestones(space, space["max_epochs"]):
        alive = max(1, math.ceil(alive / space["halving"]["eta"]))
        if alive == 1:
            return epochs
    return space["max_epochs"]


def ends_at_horizon(hyperparameters: Mapping) -> bool:
    """Whether every trial of the space stops at the schedule's horizon: a cosine schedule whose
    floor is 0 has nothing left to learn there (the rate stays 0 until early stopping)."""
    scheduler = hyperparameters["scheduler"]
    floor = hyperparameters["min_lr_factor"]
    return scheduler == {"value": "cosine"} and floor == {"value": 0.0}


def training_epochs(space: Mapping) -> int:
    """The most epochs a trial of the space trains: ``max_epochs``, or the schedule's horizon
    when that ends every run earlier (:func:`ends_at_horizon`)."""
    if ends_at_horizon(space["hyperparameters"]):
        return min(space["max_epochs"], schedule_epochs(space))
    return space["max_epochs"]


def rungs(space: Mapping) -> list[int]:
    """Epoch milestones of successive halving before the last rung (the end of training, see
    :func:`training_epochs`); [] when off."""
    return _milestones(space, training_epochs(space))


def promoted_count(n: int, eta: int) -> int:
    """Slots after a rung that ``n`` trials reached: ceil(n / eta), at least 1."""
    return max(1, math.ceil(n / eta))


def promote(results: Mapping[int, float], eta: int, slots: int | None = None) -> list[int]:
    """Trials kept after a rung: the best ``slots`` (default ceil(n / eta)) of ``results`` by
    validation accuracy (ties: lower id), in rank order (slot s trains the s-th)."""
    keep = promoted_count(len(results), eta) if slots is None else slots
    ranked = sorted(results, key=lambda t: (-results[t], t))
    return ranked[:keep]


# Why a trial stopped training for good (early stopping, the cap, the schedule's end); a trial
# stopped by none of these at a rung may be promoted and trained further.
ENDED = ("early_stopping", "max_epochs", "schedule_end")
# Why a trial stopped that can learn nothing more either: its loss became NaN or infinite
# (``loop.Diverged``). It ranks below every other result at its rung and in the selection
# (:func:`standing`), whatever its validation accuracy before, and is never promoted.
DIVERGED = "diverged"


def standing(result: Mapping) -> float:
    """A trial result's standing in halving and selection: its validation accuracy, or minus
    infinity for a trial that diverged (the worst result at its rung)."""
    return -math.inf if result.get("stopped_by") == DIVERGED else float(result["val_accuracy"])


def latest_results(results: Sequence[Mapping]) -> dict[int, dict]:
    """Each trial's latest slot result (highest stage), from any stages' slot results; empty
    slots (no trial promoted into them) are skipped."""
    latest: dict[int, dict] = {}
    for row in results:
        trial = row.get("trial")
        if trial is not None and (trial not in latest or row["stage"] > latest[trial]["stage"]):
            latest[trial] = dict(row)
    return dict(sorted(latest.items()))


def best_trial(results: Mapping[int, float]) -> int:
    """The trial with the highest validation accuracy (ties: lower id)."""
    if not results:
        raise SearchError("no trial results to select from")
    return min(results, key=lambda t: (-results[t], t))


def at_chance(accuracy: float, num_classes: int, n: int) -> bool:
    """Whether ``accuracy`` (percent) is within 3 binomial standard errors of chance."""
    p = 1.0 / num_classes
    return accuracy / 100.0 <= p + 3.0 * math.sqrt(p * (1 - p) / max(n, 1))


# Each hyperparameter's domain, the schema's (``x-values``: a momentum in [0, 1), a learning
# rate above 0, a count of epochs an integer); the named ones' domain is their registry.
VALUE_DOMAINS: dict[str, Mapping] = {
    name: node["x-values"]
    for name, node in schema_node("train.spaces.{space}.hyperparameters")["properties"].items()
    if "x-values" in node
}


def value_problem(name: str, value: object) -> str | None:
    """What is wrong with ``value`` as hyperparameter ``name`` of any space (None: nothing):
    a name its registry does not hold, a number outside the schema's domain (or not finite), a
    fraction where a count is due."""
    registry = NAMED_HYPERPARAMETERS.get(name)
    if registry is not None:
        known = isinstance(value, str) and value in registry
        return None if known else f"not one of {', '.join(sorted(registry))}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "not a number"
    if not math.isfinite(value):
        return "not finite"
    if name in INTEGER_HYPERPARAMETERS and not isinstance(value, int):
        return "not an integer"
    import jsonschema

    domain = VALUE_DOMAINS.get(name, {})
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(domain).iter_errors(value)
    )
    return None if error is None else f"outside its domain ({error.message})"


def spec_problem(name: str, value: object, spec: Mapping, grid_value: object = None) -> str | None:
    """What is wrong with ``value`` as a draw of hyperparameter ``name`` from ``spec`` (a
    space's ``{value: x}``, ``{choice: [...]}``, ``{grid: [...]}`` with the trial's own grid
    point ``grid_value``, ``{uniform: [lo, hi]}``, ``{log_uniform: [lo, hi]}``; None:
    nothing): what :func:`draw_trials` could not have drawn."""
    kind, arg = next(iter(spec.items()))
    if kind == "value" and value != arg:
        return f"but the space fixes it at {arg!r}"
    if kind == "choice" and value not in arg:
        return f"but the space chooses among {arg!r}"
    if kind == "grid" and value != grid_value:
        return f"but the space's grid gives this trial {grid_value!r}"
    if kind in ("uniform", "log_uniform"):
        low, high = float(arg[0]), float(arg[1])
        if name in INTEGER_HYPERPARAMETERS:  # a draw is rounded
            low, high = round(low), round(high)
        slack = 1e-9 * max(abs(low), abs(high))  # exp(log(x)) may round past a bound
        if not (low - slack <= value <= high + slack):
            return f"but the space draws it from [{arg[0]!r}, {arg[1]!r}]"
    return None


def hyperparameters_of(row: Mapping) -> dict:
    """The whitelisted hyperparameters of a trials-table row."""
    return {name: row[name] for name in HYPERPARAMETERS}


# The columns of the trials table, in order.
TRIAL_COLUMNS = ("trial", *HYPERPARAMETERS, "seed")


def trial_columns(trials: Sequence[Mapping]) -> dict[str, list]:
    """Column-wise form of the trials (for the parquet table)."""
    return {name: [row[name] for row in trials] for name in TRIAL_COLUMNS}
