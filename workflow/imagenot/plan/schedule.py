"""Training's schedule on a fixed number of GPUs, and the GPU count that meets a deadline at the
least cost: pure functions over the chains of training jobs that :mod:`imagenot.plan.costs` builds.

A *chain* is one trained experiment x model as the workflow runs it: its halving stages in order
(stage k's slots start when every slot of stage k-1 has finished, since the rung's decision
reads them all), then its final seeds (they start when the selection is written, after the last
stage). Each job of a chain asks for the chain's ``gpus`` (its model's GPUs per job:
``train.gpus_per_job`` or its ``train.gpus_per_job_overrides`` entry) for its ``hours``.
:func:`simulate` places the jobs as a scheduler with ``gpus`` GPUs would if it started
ready jobs longest-remaining-chain first (the critical chain first), skipping to a smaller ready
job when the first does not fit (backfill); it returns when training ends and the share of the
reserved GPU-hours the jobs use. It ignores queueing delays and the time a job takes to start:
a lower bound of a real cluster's wall time under the same estimate.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from itertools import product


@dataclass(frozen=True)
class Stage:
    """``jobs`` jobs of ``hours`` each (wall-clock hours on the chain's GPUs)."""

    jobs: int
    hours: float


@dataclass(frozen=True)
class Chain:
    """One experiment x model: its stages in dependency order (the halving stages, then the
    final seeds), each job on ``gpus`` GPUs."""

    name: str
    model: str
    gpus: int
    stages: tuple[Stage, ...] = field(default_factory=tuple)

    def hours(self) -> float:
        """The chain's critical path: one job of every stage, one after the other."""
        return sum(s.hours for s in self.stages if s.jobs)

    def gpu_hours(self) -> float:
        return self.gpus * sum(s.jobs * s.hours for s in self.stages)


def place(chains: dict, capacity: int) -> dict:
    """Start and end hour of each stage of ``chains`` (name -> stages, each ``(jobs, width,
    hours)``, ``hours`` one job's or a list of each job's; a stage's jobs start when the
    previous stage's last job has ended) on ``capacity`` GPUs or cores: ready jobs started
    longest-remaining-chain first (a stage's longest job first), a smaller one when the first
    does not fit (backfill). A stage of no jobs is passed over; a job of width 0 is a wait that
    holds none; one wider than ``capacity`` takes it all. Returns ``{name: [(start, end) per
    stage]}``."""
    names = list(chains)
    each = {
        n: [sorted(h, reverse=True) if isinstance(h, list) else [h] * j for j, _, h in chains[n]]
        for n in names
    }
    longest = {n: [max(jobs, default=0.0) for jobs in each[n]] for n in names}
    tails = {n: [sum(longest[n][k:]) for k in range(len(chains[n]))] for n in names}
    spans: dict = {n: [] for n in names}
    stage = dict.fromkeys(names, 0)
    left = dict.fromkeys(names, 0)
    ready: list[list] = []  # [-remaining critical path, chain, width, each job's hours]
    running: list[tuple[float, int, int]] = []  # (end, chain, width) heap, one entry per job
    now, free = 0.0, capacity

    def release(i: int) -> None:
        """Make the next stage of chain ``i`` that has jobs ready (or finish the chain)."""
        name = names[i]
        while stage[name] < len(chains[name]) and not each[name][stage[name]]:
            spans[name].append([now, now])
            stage[name] += 1
        if stage[name] < len(chains[name]):
            jobs = list(each[name][stage[name]])
            left[name] = len(jobs)
            spans[name].append([None, now])
            width = min(chains[name][stage[name]][1], capacity)
            ready.append([-tails[name][stage[name]], i, width, jobs])

    for i in range(len(names)):
        release(i)
    while ready or running:
        ready.sort()
        for entry in ready:
            _, i, width, jobs = entry
            n = len(jobs) if width == 0 else min(len(jobs), free // width)
            for _ in range(n):
                heapq.heappush(running, (now + jobs.pop(0), i, width))
            if n and spans[names[i]][-1][0] is None:
                spans[names[i]][-1][0] = now
            free -= n * width
        ready = [e for e in ready if e[3]]
        if not running:
            break
        now, i, width = heapq.heappop(running)
        ended = [(i, width)]
        while running and running[0][0] <= now + 1e-12:
            ended.append(heapq.heappop(running)[1:])
        for j, w in ended:
            free += w
            left[names[j]] -= 1
            if left[names[j]] == 0:
                spans[names[j]][-1][1] = now
                stage[names[j]] += 1
                release(j)
    return {n: [(round(s, 3), round(e, 3)) for s, e in spans[n]] for n in names}


def simulate(chains: list[Chain], gpus: int) -> dict:
    """Place every job of ``chains`` on ``gpus`` GPUs, critical chain first (:func:`place`, see
    the module's doc). Returns ``hours`` (when the last job ends), ``gpu_hours`` (what the jobs
    use), ``reserved_gpu_hours`` (``gpus`` x ``hours``) and ``used`` (their ratio). A chain
    that asks for more GPUs than there are raises ValueError."""
    live = [c for c in chains if c.hours() > 0]
    for c in live:
        if c.gpus > gpus:
            raise ValueError(f"{c.name} {c.model} asks for {c.gpus} GPUs per job, more than {gpus}")
    spans = place(
        {i: [(s.jobs, c.gpus, s.hours) for s in c.stages] for i, c in enumerate(live)}, gpus
    )
    now = max((e for stages in spans.values() for _, e in stages), default=0.0)
    busy = sum(c.gpu_hours() for c in live)
    reserved = gpus * now
    return {
        "gpus": gpus,
        "hours": round(now, 2),
        "gpu_hours": round(busy, 1),
        "reserved_gpu_hours": round(reserved, 1),
        "used": round(busy / reserved, 3) if reserved else 1.0,
    }


def critical_chain(chains: list[Chain]) -> Chain | None:
    """The chain whose critical path is longest: no number of GPUs ends training sooner."""
    return max(chains, key=Chain.hours, default=None)


def with_gpus(chains: list[Chain], per_model: dict[str, int], efficiency: float) -> list[Chain]:
    """``chains`` with each model's jobs on ``per_model[model]`` GPUs (data-parallel at
    :func:`speed`; a model not named keeps its GPUs)."""
    out = []
    for c in chains:
        g = per_model.get(c.model, c.gpus)
        scale = speed(c.gpus, efficiency) / speed(g, efficiency)
        stages = tuple(Stage(s.jobs, s.hours * scale) for s in c.stages)
        out.append(Chain(c.name, c.model, g, stages))
    return out


def speed(gpus: int, efficiency: float) -> float:
    """How many times one GPU's speed a data-parallel job on ``gpus`` GPUs trains at, losing
    ``1 - efficiency`` per doubling of the GPUs (an assumption: the gradient all-reduce and
    the smaller per-GPU batch cost more the more GPUs share a batch)."""
    return gpus * efficiency ** math.log2(gpus) if gpus > 1 else 1.0


def fewest_gpus(chains: list[Chain], deadline: float, most: int = 4096) -> dict | None:
    """The smallest GPU count whose schedule of ``chains`` ends within ``deadline`` hours (its
    :func:`simulate` result), None when the critical chain alone is longer or none up to
    ``most`` does. Starts at the GPU-hours over the deadline and counts up."""
    crit = critical_chain(chains)
    if crit is None or crit.hours() > deadline:
        return None
    total = sum(c.gpu_hours() for c in chains)
    widest = max(c.gpus for c in chains)
    n = max(widest, math.ceil(total / deadline))
    while n <= most:
        got = simulate(chains, n)
        if got["hours"] <= deadline:
            return got
        # the schedule's tail beyond the deadline, spread over the GPUs: a step that cannot
        # overshoot by much, and at least one GPU
        n += max(1, int(n * (got["hours"] - deadline) / deadline / 2))
    return None


def gpus_options(chains: list[Chain], deadline: float, efficiency: float) -> dict[str, list[int]]:
    """Per model, the GPUs per job worth trying: the fewest (a power of two, at most 8) whose
    data-parallel jobs bring the model's longest chain within ``deadline``, and the next
    power of two (a shorter critical chain can let fewer GPUs meet the deadline)."""
    options = {}
    for model, c in _longest(chains).items():
        one = c.hours() * speed(c.gpus, efficiency)  # its chain on one GPU
        g = 1
        while g < 8 and one / speed(g, efficiency) > deadline:
            g *= 2
        options[model] = [g, 2 * g] if g < 8 and g > 1 else [g]
    return options


def recommend(
    chains: list[Chain], deadline: float, efficiency: float, gpus: int | None = None
) -> dict:
    """The GPU count and GPUs per job that end training within ``deadline`` hours at the least
    reserved GPU-hours (GPUs x hours), two ways: one ``gpus_per_job`` for every model and one
    per model (``train.gpus_per_job_overrides``). Each: ``per_model`` GPUs per job and the
    :func:`simulate` result, or None when nothing tried meets the deadline. With ``gpus``,
    also ``on_gpus``: :func:`best_on` those GPUs."""
    options = gpus_options(chains, deadline, efficiency)
    tries = [dict.fromkeys(options, g) for g in (1, 2, 4, 8)]
    uniform = _cheapest(chains, tries, efficiency, lambda c: fewest_gpus(c, deadline), deadline)
    models = sorted(options, reverse=True)  # the first model's options vary fastest
    tries = [dict(zip(models, g, strict=True)) for g in product(*map(options.get, models))]
    best = _cheapest(chains, tries, efficiency, lambda c: fewest_gpus(c, deadline), deadline)
    on = best_on(chains, gpus, deadline, efficiency) if gpus else None
    return {
        "deadline_hours": deadline,
        "uniform": uniform,
        "per_model": best,
        "on_gpus": on,
        "gpus": gpus,
    }


def best_on(chains: list[Chain], gpus: int, deadline: float, efficiency: float) -> dict | None:
    """On a fixed ``gpus``, the GPUs per job that end training within ``deadline`` hours at the
    least reserved GPU-hours (``gpus`` x hours: the earliest end; of equal ends, the largest
    share used): one width for every model (1, 2, 4, 8), or 1, 2, 4 or 8 for each of the two
    models with the longest chains and one for the rest. Its :func:`simulate` result with
    ``per_model``, None when nothing tried ends in time."""
    longest = _longest(chains)
    models = sorted(longest, key=lambda m: longest[m].hours(), reverse=True)
    tries = [dict.fromkeys(models, g) for g in (1, 2, 4, 8) if g <= gpus]
    for a in (1, 2, 4, 8):
        for b in (1, 2, 4, 8):
            if max(a, b) <= gpus and len(models) >= 2:
                tries.append({**dict.fromkeys(models, 1), models[0]: a, models[1]: b})
    return _cheapest(chains, tries, efficiency, lambda c: simulate(c, gpus), deadline)


def _longest(chains: list[Chain]) -> dict[str, Chain]:
    """Per model, its chain with the longest critical path (the first of equal ones)."""
    longest: dict[str, Chain] = {}
    for c in chains:
        if c.model not in longest or c.hours() > longest[c.model].hours():
            longest[c.model] = c
    return longest


def _cheapest(chains: list[Chain], tries: list, efficiency: float, schedule, deadline: float):
    """Of ``tries`` (GPUs per job per model), the one whose ``schedule`` (of ``chains`` at
    those GPUs per job: a :func:`simulate` result, or None) ends within ``deadline`` hours at
    the least reserved GPU-hours (of equal ones, the largest share used), with its
    ``per_model``; None when none does."""
    best = None
    for per_model in tries:
        got = schedule(with_gpus(chains, per_model, efficiency))
        key = got and (got["reserved_gpu_hours"], -got["used"])
        if got and got["hours"] <= deadline and (best is None or key < best[0]):
            best = key, {**got, "per_model": per_model}
    return best and best[1]
