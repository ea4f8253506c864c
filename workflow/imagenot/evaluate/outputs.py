"""Checks of what an evaluation measured, before its numbers are written: the model's outputs
are finite (:func:`check_finite_outputs`), and a published weight's measured top-1 is compared
with the one its publisher states (:func:`check_published`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from imagenot.train.facts import PUBLISHED_TOLERANCE

log = logging.getLogger(__name__)


class NonFiniteOutputs(ValueError):
    """A model whose outputs (logits) hold NaN or infinity: its accuracy is refused, never
    reported at chance (argmax of NaN logits picks a class all the same)."""


def check_finite_outputs(counts: Sequence[int], names: Sequence[str], images: int) -> None:
    """NonFiniteOutputs naming the first transformation whose logits were not finite for some
    image (``counts[i]`` images under ``names[i]``, of ``images``). Why: weights that are all
    finite can still give them (a batch norm's running variance below 0 becomes NaN in its
    square root), and the evaluation would score the model at about chance."""
    if bad := [(name, n) for name, n in zip(names, counts, strict=True) if n]:
        more = f" (and under {len(bad) - 1} more transformation(s))" if len(bad) > 1 else ""
        raise NonFiniteOutputs(
            f"the model's outputs are not finite (NaN or infinity) for {bad[0][1]} of {images} "
            f"image(s) under {bad[0][0]}{more}; refused, not reported at chance (finite weights "
            "can give them: e.g. a batch norm's running variance below 0)"
        )


def check_published(table: pa.Table, info: Mapping[str, Any]) -> float | None:
    """For a run of published weights whose ``result.json`` records their published top-1:
    the measured top-1 (untransformed images) minus the published one, logged beside it, and
    logged as a warning past :data:`PUBLISHED_TOLERANCE` points (the report's
    ``published_check`` table shows the same). None for other runs."""
    published = info.get("published_top1")
    if published is None:
        return None
    rows = [r for r in table.to_pylist() if r["transform"] == "Identity"]
    if not rows:
        return None
    measured = rows[0]["top1"]
    deviation = measured - float(published)
    level = logging.WARNING if abs(deviation) > PUBLISHED_TOLERANCE else logging.INFO
    over = f", over {PUBLISHED_TOLERANCE}: check the protocol" if level == logging.WARNING else ""
    run = f"{info['weights']} on {info['dataset']}"
    found = f"measured top-1 {measured:.3f}% (n={rows[0]['n']})"
    said = f"published {float(published):.3f}% ({info['published_source']})"
    log.log(level, "%s: %s, %s: deviation %+.3f points%s", run, found, said, deviation, over)
    return deviation
