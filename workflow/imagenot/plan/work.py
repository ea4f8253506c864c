"""Job resources from the work: memory and runtime of the heavy rules sized from their input.

Why: at paper scale a fixed class per rule either wastes a cluster's memory or fails; the input of
a job (one LAION part, one part's captions, one dataset's scores or download status tables) says
how much work it holds. Each heavy rule has a cost (config ``resources.work.<rule>``, defaults
measured on the scale model, see docs/scale.md):

    mem_mb  = (floor_mb  + mb_per_gb  x input GB) x growth ** (attempt - 1)
    runtime = (floor_min + min_per_gb x input GB) x growth ** (attempt - 1), in minutes

``growth`` (``resources.attempt_growth``) makes a retry after an out-of-memory kill or a time
limit ask for more. No job asks for more than the site's maximum runtime
(``resources.max_runtime_min``, 24 h by default): a job whose first-attempt estimate exceeds it is
refused with a message saying how to split the work (more, smaller LAION parts), never submitted
to a limit it cannot meet. Streaming rules (matching, caption selection) have ``mb_per_gb: 0``:
their memory is bounded by a batch, not by the part.
"""

from __future__ import annotations

import math


class WorkTooLarge(ValueError):
    """A job whose estimated runtime exceeds the site's maximum runtime."""


def growth(config: dict, attempt: int) -> float:
    """How many times its first request a job asks for on ``attempt``."""
    return config["resources"]["attempt_growth"] ** max(attempt - 1, 0)


def mem_mb(config: dict, rule: str, input_mb: float, attempt: int = 1) -> int:
    """Memory (MB) to request for one job of ``rule`` whose inputs hold ``input_mb`` MB."""
    cost = config["resources"]["work"][rule]  # the schema's work_cost: all four numbers
    return math.ceil(
        (cost["floor_mb"] + cost["mb_per_gb"] * input_mb / 1024) * growth(config, attempt)
    )


def estimated_min(config: dict, rule: str, input_mb: float) -> float:
    """First-attempt runtime estimate (minutes) of one job of ``rule``."""
    cost = config["resources"]["work"][rule]
    return cost["floor_min"] + cost["min_per_gb"] * input_mb / 1024


def runtime_min(config: dict, rule: str, input_mb: float, attempt: int = 1) -> int:
    """Runtime (minutes) to request, grown per attempt and capped at the site maximum."""
    site_max = config["resources"]["max_runtime_min"]
    first = estimated_min(config, rule, input_mb)
    if first > site_max:
        raise WorkTooLarge(
            f"rule {rule}: a job of {input_mb / 1024:.1f} GB input is estimated at {first:.0f} "
            f"min, over the site maximum resources.max_runtime_min = {site_max}: split the input "
            "into more, smaller parts (LAION parts can be split by row groups), or raise the "
            "maximum if the site allows it"
        )
    return min(math.ceil(first * growth(config, attempt)), site_max)
