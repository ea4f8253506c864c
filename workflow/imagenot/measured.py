"""Your GPU's measured speed and memory, for ``imagenot plan --throughput FILE``.

Two files carry them: the JSON report of ``imagenot preflight`` run on one of the user's GPUs
(its ``feed <model>`` checks: fed images/s, what a training job sees; its ``memory <model>``
checks: the peak at the per-GPU batch against the device's memory), and the output of
``benchmarks/bench_feed_models.py --json`` (fed images/s only). :mod:`imagenot.costs` reads
them through here; without a file, the config's ``train.throughput`` (an RTX 3090's).
"""

from __future__ import annotations

import json
from pathlib import Path


def read_throughput(path: Path | None, config: dict) -> tuple[dict, str]:
    """Training images/s per model: ``train.throughput`` of the config, with the models that
    ``path`` measured replaced by their fed rate (``feed_img_per_s``: what a training job sees).
    ``path``: the JSON report of ``imagenot preflight`` on the user's GPU (its ``feed <model>``
    checks; a failed report's measurements count too), or ``benchmarks/bench_feed_models.py
    --json`` output."""
    measured = read_measurements(path, config)
    return measured["throughput"], measured["source"]


def read_measurements(path: Path | None, config: dict) -> dict:
    """:func:`read_throughput`'s table and source, and from a preflight report its memory
    checks (``memory``: per model and per-GPU batch, the peak and the device's GiB; None
    without a preflight report)."""
    table = dict(config["train"]["throughput"])
    if path is None:
        source = "config train.throughput (schema default: RTX 3090, docs/gpu.md)"
        return {"throughput": table, "source": source, "memory": None}
    try:
        data = json.loads(Path(path).read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    memory = None
    try:
        if isinstance(data, dict) and "checks" in data:  # imagenot preflight's report
            measured, memory = _preflight_measurements(data)
            env = data.get("environment", {})
            what = (
                f"imagenot preflight on {env.get('gpu') or 'the CPU (not a GPU: CPU speeds)'} at "
                f"{data['settings']['image_size']} px"
                + ("" if data.get("passed") else ", a FAILED preflight")
            )
        else:
            measured = {
                r["model"]: float(r["feed_img_per_s"]) for r in data["models"] if "error" not in r
            }
            what = f"bench_feed_models on {data['device']} at {data['size']} px"
    except (KeyError, TypeError) as exc:
        raise ValueError(
            f"{path}: neither an `imagenot preflight` report (its --json) nor the output of "
            f"benchmarks/bench_feed_models.py --json (missing {exc})"
        ) from None
    if not measured:
        raise ValueError(f"{path}: no model's throughput was measured in it")
    table.update(measured)
    source = (
        f"{path} ({what}) for {', '.join(sorted(measured))}; config train.throughput for the rest"
    )
    return {"throughput": table, "source": source, "memory": memory}


def _preflight_measurements(report: dict) -> tuple[dict[str, float], list[dict]]:
    """Fed images/s per model (the ``feed <model>`` checks that measured) and the memory checks
    (``memory <model> (<spaces>)``) of a preflight report."""
    feeds, memory = {}, []
    for check in report["checks"]:
        kind, _, rest = check["name"].partition(" ")
        model = rest.split(" ")[0]
        values = check.get("values") or {}
        if kind == "feed" and values.get("feed_img_per_s"):
            feeds[model] = float(values["feed_img_per_s"])
        elif kind == "memory" and values:
            memory.append(
                {
                    "check": check["name"],
                    "model": model,
                    "per_gpu": values.get("per_gpu"),
                    "peak_gib": values.get("peak_gib"),
                    "device_gib": values.get("device_gib"),
                    "fits": values.get("fits"),
                    "status": check["status"],
                }
            )
    return feeds, memory
