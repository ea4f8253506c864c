"""Your GPU's measured speed and memory, for ``imagenot plan --throughput FILE``.

Two files carry them: the JSON report of ``imagenot preflight`` run on one of the user's GPUs
(its ``feed <model>`` checks: fed images/s, what a training job sees; its ``memory <model>``
checks: the peak at the per-GPU batch against the device's memory), and the output of
``benchmarks/bench_feed_models.py --json`` (fed images/s only). :mod:`imagenot.plan.costs` reads
them through here; without a file, the config's ``train.throughput`` (by default one H200's,
measured: the schema's description says which figure of docs/gpu.md each model's is) and the
same H200's memory peaks (:data:`H200_MEMORY`).

Beside them, what a run in the working directory has measured itself (:func:`read_runs`):
each finished halving slot's and final run's record (its epochs and why it stopped) and the
images/s of every epoch its ``metrics.csv`` holds, so that ``imagenot plan`` re-estimates what
is left of a run from the run.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from imagenot.core.io import read_json

# GPU memory measured on one NVIDIA H200 (139.8 GiB; docs/gpu.md "Measured on a GPU": the
# preflight's memory check for four models at c9a3615, the plain training loop for three):
# model -> (images per GPU, peak GiB)
H200_MEMORY = {
    "alexnet": (256, 2.1),
    "resnet18": (256, 4.0),
    "convnext_large": (64, 14.4),
    "efficientnet_v2_l": (32, 8.7),
    "resnet152": (256, 22.4),
    "densenet161": (256, 29.9),
    "vgg19": (256, 12.9),
}
H200_SOURCE = (
    'one NVIDIA H200 (139.8 GiB), docs/gpu.md "Measured on a GPU" (the preflight\'s memory '
    "checks and the plain training loop); `bash benchmarks/gpu_check.sh` or `imagenot "
    "preflight` on your GPU replaces it (--throughput)"
)


def read_measurements(path: Path | list[Path] | None, config: dict) -> dict:
    """Training images/s per model (``throughput``): ``train.throughput`` of the config, with
    the models that ``path`` measured replaced by their fed rate (``feed_img_per_s``: what a
    training job sees); its ``source``; and from a preflight report its memory checks
    (``memory``: per model and per-GPU batch, the peak and the device's GiB; None without a
    preflight report). ``path`` may be a list of such files (``benchmarks/
    gpu_check.sh`` writes two preflight reports): each replaces the models it measured, in
    order. ``path``: the JSON report of ``imagenot preflight`` on the user's GPU (its ``feed
    <model>`` checks; a failed report's measurements count too), or ``benchmarks/
    bench_feed_models.py --json`` output."""
    table = dict(config["train"]["throughput"])
    if path is None:
        source = "config train.throughput, one H200's measured images/s (the schema's default: "
        source += 'docs/gpu.md "Measured on a GPU"; `bash benchmarks/gpu_check.sh` on your GPU, '
        source += "then --throughput with its preflight reports, replaces it)"
        return {"throughput": table, "source": source, "memory": None, "measured": []}
    memory, sources, names = None, [], set()
    for one in path if isinstance(path, list | tuple) else [path]:
        measured, found, what = _read_measured(Path(one))
        table.update(measured)
        names |= set(measured)
        memory = found if memory is None else memory + (found or [])
        sources.append(f"{one} ({what}) for {', '.join(sorted(measured))}")
    source = "; ".join(sources) + "; config train.throughput for the rest"
    return {"throughput": table, "source": source, "memory": memory, "measured": sorted(names)}


def _read_measured(path: Path) -> tuple[dict[str, float], list[dict] | None, str]:
    """The fed images/s per model one file measured, its memory checks (a preflight report's;
    None for bench_feed_models) and what measured them."""
    data = read_json(path, hint="pass the JSON that imagenot preflight or the benchmark wrote")
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
    return measured, memory, what


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
            found = {k: values.get(k) for k in ("per_gpu", "peak_gib", "device_gib", "fits")}
            memory.append({"check": check["name"], "model": model, **found})
            memory[-1]["status"] = check["status"]
    return feeds, memory


def read_runs(runs: dict[tuple[str, str, str], Path]) -> dict[tuple[str, str, str], dict]:
    """What a run has measured, per trained (dataset, protocol, model) and its folder in
    ``runs`` (``results/train/{dataset}/{protocol}/{model}`` of the working directory;
    :func:`imagenot.train.estimate.run_records` names them): ``slots`` (each finished halving
    slot's stage, epochs and ``stopped_by``), ``finals`` (each final run's seed, from its
    folder, epochs and ``stopped_by``) and ``images_per_s`` (the training images/s of every epoch in
    its trials' and finals' ``metrics.csv``; an epoch resumed already trained, 0, left out).
    Empty where nothing has finished. A record that is not JSON, or lacks a key, raises
    ValueError naming the file."""
    out = {}
    for key, run in runs.items():
        run = Path(run)
        if not run.is_dir():
            continue
        slots = [
            _record(p, ("stage", "epochs", "stopped_by"))
            for p in sorted(run.glob("stage-*/slot-*.json"))
        ]
        finals = [
            {**_record(p, ("epochs", "stopped_by")), "seed": int(p.parent.name[5:])}
            for p in sorted(run.glob("final/seed-[0-9]*/result.json"))
        ]
        rates = []
        for metrics in sorted(run.glob("trial-*/metrics.csv")) + sorted(
            run.glob("final/seed-[0-9]*/metrics.csv")
        ):
            rates += _rates(metrics)
        slots = [s for s in slots if s.get("epochs")]  # an empty slot trained nothing
        if slots or finals or rates:
            out[key] = {"slots": slots, "finals": finals, "images_per_s": rates}
    return out


def _record(path: Path, keys: tuple[str, ...]) -> dict:
    """``keys`` of the record at ``path``; ValueError naming it when it is damaged (never moved
    aside: the plan writes nothing), no JSON object or lacks a key."""
    data = read_json(path, hint="delete it and run the workflow again (it reruns its job)")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    if "stage" in keys and data.get("trial", 0) is None:
        return {}  # an empty slot: nothing was promoted into it
    missing = [k for k in keys if k not in data]
    if missing:
        raise ValueError(f"{path}: record without {', '.join(missing)}")
    return {k: data[k] for k in keys}


def _rates(path: Path) -> list[float]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if rows and "images_per_s" not in rows[0]:
        raise ValueError(f"{path}: no images_per_s column")
    out = []
    for i, row in enumerate(rows, start=2):
        try:
            rate = float(row["images_per_s"])
        except (TypeError, ValueError):
            raise ValueError(f"{path}, row {i}: images_per_s {row['images_per_s']!r}") from None
        if rate > 0:
            out.append(rate)
    return out


def median_rate(records: dict, model: str) -> tuple[float, int] | None:
    """The median training images/s of ``model``'s measured epochs over every experiment of
    ``records`` (:func:`read_runs`) and how many epochs; None without any."""
    rates = [r for (_, _, m), rec in records.items() if m == model for r in rec["images_per_s"]]
    return (statistics.median(rates), len(rates)) if rates else None
